"""The ``qnn`` quantization profile: full-integer QDQ for Qualcomm's HTP (Hexagon NPU), mixed
8/16-bit activations, the budget measured on the HTP backend itself.

An NPU has no float fallback, so every op is quantized (LayerNorm, Softmax, GELU, the attention
core, the flow time embedding too) with onnxruntime's QNN rules
(``quantization.execution_providers.qnn.get_qnn_qdq_config``: uint8 weights per tensor, uint8
activations). Instead of falling back to float, the most sensitive activation tensors are
promoted to uint16 (tensor quant overrides; ORT inserts the 8<->16-bit converts): ranked once by
the SQNR of their own 8-bit quantization (``qdq_loss_debug`` on the recorded decode feeds), then
promoted in doubling groups (1, 2, 4, ... tensors) until the budget holds **measured on the HTP
backend** (``runtimes.qnn``; x86 emulation here): the CPU EP's simulation of a QDQ graph is not
the NPU's arithmetic (masked demo, 8-bit: top-1 0.908 on CPU vs 0.875 on the HTP backend).

    prepare (qnn_preprocess_model) -> [the shared pipeline: FP32 trajectories and held-out set] ->
    all-8-bit model -> rank activation tensors -> promote until the budget holds (each candidate
    decoded on the HTP backend) -> promotions and 8-bit share in the summary

``QnnProfile`` holds these hooks; ``edgekit.quantize.stage.quantize_bundle`` runs them like the
cpu and trt profiles' (conditions, ``--cond-data`` rows, warnings and the summary keys are shared).
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np

from edgekit._deps import require
from edgekit.errors import EdgekitError
from edgekit.quantize.calibrate import calibration_reader, range_drift
from edgekit.quantize.config import METHODS
from edgekit.quantize.context import QuantizeRun
from edgekit.quantize.graph import analyse_graph, module_labels
from edgekit.quantize.overrides import tensor_overrides
from edgekit.quantize.ptq import quiet_ort_logging
from edgekit.quantize.result import SearchResult
from edgekit.runtimes.ort import OrtOptions, OrtRuntime
from edgekit.runtimes.qnn import (
    QnnOptions,
    QnnRuntime,
    emulated,
    float_nodes,
    qnn_options_for,
    versions,
)
from edgekit.targets import load_target


def prepare_qnn(fp32_path: Path, out: Path) -> Path:
    """``qnn_preprocess_model`` (fuses LayerNorm/GELU patterns into the single ops the HTP has)
    into ``out``, or a copy when it changed nothing; then every Gemm with a constant weight as
    MatMul + Add (``gemm_as_matmul``)."""
    qnn = require("onnxruntime.quantization.execution_providers.qnn")
    with quiet_ort_logging():
        changed = qnn.qnn_preprocess_model(str(fp32_path), str(out))
    if not changed:
        shutil.copyfile(fp32_path, out)
    gemm_as_matmul(out)
    return out


def gemm_as_matmul(path: Path) -> int:
    """Rewrite, in place, each Gemm (alpha = beta = 1, no transA) whose B is a constant as MatMul
    with the (transposed) weight plus Add of its bias: the HTP takes a MatMul weight at 16 bit
    (A16W16) and refuses a 16-bit Gemm weight, so only this way can the budget search promote
    a Linear layer's weight (torch exports Linear on a 2-D input as Gemm). Returns the count."""
    onnx = require("onnx")
    from onnx import helper, numpy_helper

    model = onnx.load(str(path))
    graph = model.graph
    inits = {i.name: i for i in graph.initializer}
    nodes, rewritten = [], 0
    for node in graph.node:
        attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
        if (node.op_type != "Gemm" or len(node.input) < 2 or node.input[1] not in inits or attrs.get("transA", 0)
                or attrs.get("alpha", 1.0) != 1.0 or attrs.get("beta", 1.0) != 1.0):
            nodes.append(node)
            continue
        w = numpy_helper.to_array(inits[node.input[1]])
        weight = f"{node.input[1]}_matmul"
        graph.initializer.append(numpy_helper.from_array(np.ascontiguousarray(w.T if attrs.get("transB", 0) else w), weight))
        has_bias = len(node.input) > 2 and node.input[2]
        product = f"{node.output[0]}_matmul" if has_bias else node.output[0]
        nodes.append(helper.make_node("MatMul", [node.input[0], weight], [product], name=f"{node.name}_matmul"))
        if has_bias:
            nodes.append(helper.make_node("Add", [product, node.input[2]], [node.output[0]], name=f"{node.name}_bias"))
        rewritten += 1
    if rewritten:
        del graph.node[:]
        graph.node.extend(nodes)
        onnx.save(model, str(path))
    return rewritten


def matmul_weights(model_path: Path) -> dict[str, str]:
    """{constant weight of a MatMul: that node's activation input}: the weights the HTP takes at
    16 bit (with a 16-bit activation: A16W16; it refused them on Gemm, LayerNorm and Conv)."""
    onnx = require("onnx")
    model = onnx.load(str(model_path), load_external_data=False)
    inits = {i.name for i in model.graph.initializer}
    return {n.input[1]: n.input[0] for n in model.graph.node
            if n.op_type == "MatMul" and len(n.input) > 1 and n.input[1] in inits and n.input[0] not in inits}


def weight_sqnr(model_path: Path, names: Sequence[str]) -> dict[str, float]:
    """{weight: SQNR (dB) of its uint8 per-tensor quantization (the QNN profile's weights)}."""
    onnx = require("onnx")
    model = onnx.load(str(model_path))
    wanted = set(names)
    out = {}
    for init in model.graph.initializer:
        if init.name not in wanted:
            continue
        w = onnx.numpy_helper.to_array(init).astype(np.float64)
        lo, hi = min(w.min(), 0.0), max(w.max(), 0.0)
        scale = (hi - lo) / 255 or 1.0
        q = np.clip(np.round((w - lo) / scale), 0, 255) * scale + lo
        noise = np.sum((w - q) ** 2)
        out[init.name] = float(10 * np.log10(np.sum(w**2) / noise)) if noise > 0 else float("inf")
    return out


def quantize_qnn_model(prepared: Path, out: Path, reader: Any, promoted: Sequence[str] = (), method: str = "minmax",
                       all_activations_16bit: bool = False) -> Path:
    """Every op of ``prepared`` QDQ-quantized by the QNN rules (uint8 activations and weights),
    the tensors in ``promoted`` at uint16: activations, and MatMul weights (whose
    activation input then goes to uint16 too: the HTP has A16W16, not A8W16).
    ``all_activations_16bit``: uint16 as the default activation type rather than one override per
    tensor (on the demo flow, overriding all 256 tensors left 17.4 dB where the default type
    reached 36.5 dB: tensors ORT ties to their producer's type kept 8 bits)."""
    quant = require("onnxruntime.quantization")
    qnn = require("onnxruntime.quantization.execution_providers.qnn")

    weights = matmul_weights(prepared)
    if all_activations_16bit:
        promoted = [w for w in promoted if w in weights]
    names = list(promoted) + [weights[w] for w in promoted if w in weights]
    overrides = {name: [{"quant_type": quant.QuantType.QUInt16}] for name in dict.fromkeys(names)}
    reader.rewind()
    try:
        with quiet_ort_logging():
            config = qnn.get_qnn_qdq_config(
                str(prepared), reader,
                calibrate_method=getattr(quant.CalibrationMethod, METHODS[method]),
                activation_type=quant.QuantType.QUInt16 if all_activations_16bit else quant.QuantType.QUInt8,
                weight_type=quant.QuantType.QUInt8,
                init_overrides=overrides or None,
            )
            reader.rewind()
            quant.quantize(str(prepared), str(out), config)
    except (ValueError, RuntimeError, KeyError) as exc:
        raise EdgekitError(
            f"onnxruntime's QNN quantizer failed on {prepared.name}: {str(exc).splitlines()[0][:300]}",
            hint="try --method minmax; `edgekit lint BUNDLE --target snapdragon-8-gen-3` shows what the HTP refuses",
        ) from None
    return out


def activation_tensors(qdq_model: Path) -> list[str]:
    """The activation tensors a QDQ model quantizes (inputs of its QuantizeLinear nodes that are
    not constants), in graph order: the candidates for 16-bit promotion."""
    onnx = require("onnx")
    model = onnx.load(str(qdq_model), load_external_data=False)
    inits = {i.name for i in model.graph.initializer}
    producers = {o: n for n in model.graph.node for o in n.output}
    seen, out = set(), []
    for node in model.graph.node:
        if node.op_type != "QuantizeLinear":
            continue
        name = node.input[0]
        src = producers.get(name)
        # A Q reading a DQ output is a 8<->16-bit convert ORT added, not a tensor of the model.
        if name in inits or name in seen or (src is not None and src.op_type in ("DequantizeLinear", "Constant")):
            continue
        seen.add(name)
        out.append(name)
    return out


def tensor_sqnr(float_model: Path, qdq_model: Path, feeds: Sequence[Mapping[str, np.ndarray]], tensors: Sequence[str]) -> dict[str, float]:
    """{tensor: SQNR (dB) of its own 8-bit quantization} (the QDQ graph's value before vs after
    its Q/DQ round trip, on the CPU EP), over ``feeds``. ``float_model`` is unused: kept so the
    ranking can move to float-vs-QDQ comparisons without changing callers."""
    dbg = require("onnxruntime.quantization.qdq_loss_debug")
    with tempfile.TemporaryDirectory(prefix="edgekit-qnn-sens-") as tmp, quiet_ort_logging():
        aug = Path(tmp) / "qdq.onnx"
        dbg.modify_model_output_intermediate_tensors(str(qdq_model), str(aug), op_types_for_saving=["QuantizeLinear", "DequantizeLinear"])
        acts = dbg.collect_activations(str(aug), calibration_reader(feeds))
    matched = dbg.create_activation_matching(acts)
    out = {}
    for name in tensors:
        pair = matched.get(name)
        if pair and "pre_qdq" in pair and "post_qdq" in pair:
            out[name] = float(dbg.compute_signal_to_quantization_noice_ratio(pair["pre_qdq"], pair["post_qdq"]))
    return out


def _consumers_label(prepared: Path, labels: Mapping[str, str]) -> dict[str, str]:
    """tensor -> 'module (op)' of the node producing it (graph inputs: 'input')."""
    onnx = require("onnx")
    model = onnx.load(str(prepared), load_external_data=False)
    out = {i.name: f"graph input {i.name}" for i in model.graph.input}
    for node in model.graph.node:
        for o in node.output:
            out[o] = f"{labels.get(node.name, node.name)} ({node.op_type})"
    return out


class QnnProfile:
    """Hooks of the qnn profile for one quantize run: full-integer QDQ by the QNN rules, the most
    sensitive tensors promoted to 16 bit until the budget holds on the HTP backend."""

    def __init__(self, run: QuantizeRun):
        self.run = run
        # The HTP the budget is measured on: the --target's SoC (htp_arch, soc_model), else the default.
        self.htp = qnn_options_for(load_target(run.cfg.target), "int8") if run.cfg.target else QnnOptions()
        self.builds = iter(range(10**6))
        self.tensors: list[str] = []  # activation tensors of the all-8-bit model
        self.weights: list[str] = []  # MatMul weights (promotable to 16 bit)
        self.labels: dict[str, str] = {}
        self.forced: list[str] = []

    def check(self) -> None:
        if any(o.get("node") for o in self.run.cfg.overrides):
            raise EdgekitError("node overrides (float, weight-only) do not apply to --profile qnn: the NPU has no float fallback",
                               hint="the qnn profile takes tensor overrides: {\"tensor\": NAME, \"action\": \"int16\"}")
        if self.run.cfg.exclude:
            raise EdgekitError("--exclude does not apply to --profile qnn: the NPU has no float fallback",
                               hint="the profile promotes sensitive tensors to 16 bit instead; drop --exclude")

    def prepare(self) -> None:
        run = self.run
        run.say("prepare graph (qnn_preprocess_model)")
        run.prepared = prepare_qnn(run.fp32_path, run.tmp / "prepared.onnx")
        run.preprocess = {"applied": True, "skipped_because": None, "tool": "qnn_preprocess_model + Gemm as MatMul"}
        self.labels = module_labels(run.fp32_path)
        run.plan = analyse_graph(run.prepared, None, self.labels)

    def calibrate(self) -> None:
        pass  # get_qnn_qdq_config calibrates every build from the reader

    def budget_runtime(self, model: Path) -> Any:
        return QnnRuntime(model, self.htp, threads=self.run.cfg.threads)

    def build(self, promoted: Sequence[str]) -> Path:
        every_activation = bool(self.tensors) and set(self.tensors) <= set(promoted)
        out = self.run.tmp / f"qnn-{next(self.builds)}.onnx"
        return quantize_qnn_model(self.run.prepared, out, self.run.reader, promoted, self.run.cfg.method, every_activation)

    def measure(self, model: Path, promoted: Sequence[str], backend: str = "htp") -> tuple[bool, dict[str, Any], list[dict[str, Any]]]:
        """Decode the held-out set with ``model`` on the HTP backend, with check's gate (budget met
        means `check --candidate qnn:int8` passes: a flow model met snr_db at 33 dB while check's
        velocity SNR was 23 dB); or on the CPU EP's QDQ simulation, which only narrows the search."""
        run = self.run
        if backend == "htp":
            run.say(f"decode the held-out set on the HTP backend ({len(promoted)} tensor(s) at 16 bit)")
            runtime = self.budget_runtime(model)
        else:
            runtime = OrtRuntime(model, OrtOptions(intra_op_threads=run.cfg.threads))
        with runtime as rt:
            metrics = run.measure(rt, gate=backend == "htp")
        passed, rows = run.judge(metrics)
        run.history.append({"backend": "qnn-htp" if backend == "htp" else "ort-cpu (search only)", "promoted": len(promoted),
                            **{k: metrics.get(k) for k in run.budget}, "passed": passed})
        return passed, metrics, rows

    def search(self) -> SearchResult:
        run = self.run
        run.say("quantize every op: 8-bit activations and weights (QNN rules)")
        self.tensors = activation_tensors(self.build(()))
        self.weights = list(matmul_weights(run.prepared))
        self.forced = self._forced()
        model = self.build(self.forced)
        passed, metrics, rows = self.measure(model, self.forced)
        promoted: list[str] = list(self.forced)
        ranking: dict[str, float] = {}
        if not passed and run.cfg.fallback:
            ranking = self.rank(model)
            model, promoted, passed, metrics, rows = self.promote(ranking, model, passed, metrics, rows)
        return self.result(model, promoted, ranking, passed, metrics, rows)

    def _forced(self) -> list[str]:
        """Tensors an override puts at 16 bit from the start (``--overrides``, ``debug --fix``)."""
        known = set(self.tensors) | set(self.weights)
        forced = tensor_overrides(self.run.cfg.overrides)
        unknown = [t for t in forced if t not in known]
        if unknown:
            raise EdgekitError(f"override tensor {unknown[0]!r} is not an activation or MatMul weight of this graph",
                               hint="re-run `edgekit debug BUNDLE --fix` on this bundle, or fix the file")
        return forced

    def rank(self, model: Path) -> dict[str, float]:
        """SQNR (dB) of every activation's and MatMul weight's own 8-bit quantization: in one
        ranking, since on the tiny flow test model every activation at 16 bit still left 19.6 dB
        (< 30): its uint8 weights were the limit."""
        feeds = self.run.traj.feeds
        pick = np.linspace(0, len(feeds) - 1, min(self.run.cfg.sensitivity_feeds, len(feeds))).round().astype(int)
        ranking = tensor_sqnr(self.run.prepared, model, [feeds[i] for i in sorted(set(pick.tolist()))], self.tensors)
        return ranking | weight_sqnr(self.run.prepared, self.weights)

    def promote(self, ranking: Mapping[str, float], model: Path, passed: bool, metrics: dict[str, Any], rows: list[dict[str, Any]]):
        """Promote the least precise tensors in doubling groups (1, 2, 4, ...) until the budget
        holds. Emulating 16-bit tensors costs the HTP backend up to 10x per forward, so the doubling
        first runs on the CPU EP's QDQ simulation; the HTP backend then decides, doubling further
        while its budget still fails."""
        run = self.run
        forced = list(self.forced)
        order = sorted([t for t in [*self.tensors, *self.weights] if t not in forced], key=lambda t: ranking.get(t, np.inf))
        limit = len(order) if run.cfg.max_fallback is None else min(run.cfg.max_fallback, len(order))
        k = 1
        while k < limit and not self.measure(self.build(forced + order[:k]), forced + order[:k], backend="cpu")[0]:
            k *= 2
        k = min(k, limit)
        promoted: list[str] = forced
        while not passed and len(promoted) - len(forced) < limit:
            promoted = forced + order[:k]
            run.say(f"promote the {len(promoted)} least precise tensor(s) to 16 bit")
            model = self.build(promoted)
            passed, metrics, rows = self.measure(model, promoted)
            k = min(2 * k, limit)
        return model, promoted, passed, metrics, rows

    def result(self, model: Path, promoted: list[str], ranking: dict[str, float], passed: bool,
               metrics: dict[str, Any], rows: list[dict[str, Any]]) -> SearchResult:
        run = self.run
        floats = float_nodes(model)
        if floats:  # get_qnn_qdq_config quantizes every op it knows; anything else is named here
            run.warn(f"{len(floats)} node(s) stay float (e.g. {floats[0]['node']} {floats[0]['op']}): the HTP computes them in fp16")
        producer = _consumers_label(run.prepared, self.labels)
        shown = [t for t in self.tensors if t in producer][:64]
        with run.timed("range_drift_s"):
            drift = range_drift(run.prepared, shown, run.traj, run.cfg.threads, labels={t: producer[t] for t in shown})
        ops: dict[str, int] = {}
        for n in run.plan.nodes:
            ops[n.op_type] = ops.get(n.op_type, 0) + 1
        return SearchResult(
            model=model, passed=passed, metrics=metrics, checks=rows, int8_nodes=[n.name for n in run.plan.nodes],
            sensitivity={t: {"sqnr_8bit_db": ranking[t]} for t in sorted(ranking, key=ranking.get)[:10]},
            history=run.history, float_by_op_type={f["op"]: sum(1 for x in floats if x["op"] == f["op"]) for f in floats},
            int8_flop_share={"matmul": 1.0 if run.plan.matmul_flops() else None, "weighted": 1.0},
            structure={"ops": ops, "float_nodes": floats}, drift=drift, tensors=self.tensors,
            budget_extra={"measured_on": "qnn HTP backend" + (" (x86 emulation)" if emulated() else "")},
            extras={"qnn": self.promotions(promoted, ranking, producer)},
        )

    def promotions(self, promoted: list[str], ranking: Mapping[str, float], producer: Mapping[str, str]) -> dict[str, Any]:
        weight_set = set(self.weights)
        # Activations at 16 bit: the promoted ones and the inputs of promoted MatMul weights.
        act_of = matmul_weights(self.run.prepared)
        wide = {t for t in promoted if t not in weight_set} | {act_of[t] for t in promoted if t in weight_set}
        tensors = set(self.tensors)
        return {
            "htp_arch": self.htp.arch, "soc_model": self.htp.soc, **versions(),
            "weights": "uint8 per tensor, promoted MatMul weights uint16", "activations": "uint8, promoted tensors uint16",
            "activation_tensors": len(self.tensors),
            "promoted_16bit": len(promoted),
            "activations_16bit": len(wide & tensors),
            "weights_16bit": sum(1 for t in promoted if t in weight_set),
            "share_8bit": 1.0 - len(wide & tensors) / len(tensors) if tensors else None,
            "promotions": [
                {"step": i + 1, "tensor": t, "kind": "weight" if t in weight_set else "activation",
                 "produced_by": "initializer" if t in weight_set else producer.get(t, t), "sqnr_8bit_db": ranking.get(t)}
                for i, t in enumerate(promoted)
            ],
        }
