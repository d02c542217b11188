"""INT8 post-training quantization (QDQ) of a per-step graph with onnxruntime.quantization.

ORT does the work (``quant_pre_process``, ``quantize_static``, its calibrators). This module
decides *what* it quantizes: it reads the graph once (``analyse_graph``: op, module path, role,
FLOPs of every node), picks nodes per profile and config (``select_nodes``), and checks the
result's structure (``qdq_structure``, ``trt_violations``).

Roles: ``weighted`` (MatMul/Gemm/Conv with a constant weight), ``attention-core`` (a MatMul
whose both inputs are activations: QKᵀ and AV), ``time-embedding`` (flow: the nodes computed
from ``t`` alone up to the embedding the blocks share: sinusoid + time MLP), ``other``.
"""

from __future__ import annotations

import contextlib
import inspect
import io
import logging
import shutil
import tempfile
from collections import Counter, defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator, Mapping, Sequence

import numpy as np

from edgekit._deps import require
from edgekit.errors import EdgekitError, UsageError
from edgekit.quantize.config import METHODS, QuantizeConfig

FLOAT = 1  # onnx.TensorProto.FLOAT
_NAME_SCOPES = "pkg.torch.onnx.name_scopes"  # torch.onnx (dynamo) node metadata: module path


@dataclass(frozen=True)
class NodeInfo:
    """One node of the prepared float graph. ``rows``: rows of the activation operand of a
    MatMul/Gemm (1 = GEMV-shaped), 0 when unknown or not a matrix product. ``flops``: 2·MACs of
    MatMul/Gemm/Conv from the inferred static shapes (0 for other ops)."""

    name: str
    op_type: str
    label: str  # module path from export metadata (``blocks.0.mlp.fc``), else the node name
    role: str  # weighted | attention-core | time-embedding | other
    flops: int
    rows: int
    activations: tuple[str, ...]  # float inputs that are not constants


@dataclass(frozen=True)
class GraphPlan:
    nodes: tuple[NodeInfo, ...]

    def by_name(self) -> dict[str, NodeInfo]:
        return {n.name: n for n in self.nodes}

    def candidates(self, op_types: Sequence[str]) -> list[NodeInfo]:
        """Nodes of ``op_types`` that have a float activation input (quantizable at all)."""
        return [n for n in self.nodes if n.op_type in op_types and n.activations]

    def matmul_flops(self, names: Sequence[str] | None = None, ops: Sequence[str] = ("MatMul", "Gemm")) -> int:
        chosen = None if names is None else set(names)
        return sum(n.flops for n in self.nodes if n.op_type in ops and (chosen is None or n.name in chosen))


@contextlib.contextmanager
def quiet_ort_logging() -> Iterator[None]:
    """ORT's quantizer logs advice through the root logger ("consider pre-processing", ...) and
    its histogram calibrators ``print`` progress to stdout, which would corrupt ``--json``:
    library code prints nothing, so hold the logs to errors and send stdout to the debug log."""
    root = logging.getLogger()
    level = root.level
    root.setLevel(max(level, logging.ERROR))
    captured = io.StringIO()
    try:
        with contextlib.redirect_stdout(captured):
            yield
    finally:
        root.setLevel(level)
        if captured.getvalue():
            logging.getLogger(__name__).debug("onnxruntime.quantization printed: %s", captured.getvalue().strip())


# ---- preparation and analysis ------------------------------------------------------------------
def prepare_model(fp32_path: Path, out_path: Path, preprocess: bool = True) -> Path:
    """``quant_pre_process`` (symbolic shape inference + ORT basic optimization, which turns
    MatMul+Add into Gemm: ORT CPU fuses only DQ->Gemm into QGemm) into ``out_path``; or a plain
    copy with ONNX shape inference when ``preprocess`` is False."""
    onnx = require("onnx")
    if preprocess:
        quant_pre_process = require("onnxruntime.quantization.shape_inference").quant_pre_process
        with quiet_ort_logging():
            quant_pre_process(str(fp32_path), str(out_path))
    else:
        model = onnx.shape_inference.infer_shapes(onnx.load(str(fp32_path)))
        onnx.save(model, str(out_path))
    return out_path


def module_labels(fp32_path: Path) -> dict[str, str]:
    """Node name -> module path, from the exporter's name-scope metadata of the original graph
    (``quant_pre_process`` drops metadata but keeps names, adding ``/<Fusion>`` suffixes)."""
    onnx = require("onnx")
    model = onnx.load(str(fp32_path), load_external_data=False)
    labels = {}
    for node in model.graph.node:
        meta = {p.key: p.value for p in node.metadata_props}
        scopes = _parse_scopes(meta.get(_NAME_SCOPES, ""))
        modules = [s for s in scopes[:-1] if s]  # the last entry names the op, not a module
        if modules:
            labels[node.name] = modules[-1]
    return labels


def _parse_scopes(text: str) -> list[str]:
    text = text.strip()
    if not (text.startswith("[") and text.endswith("]")):
        return []
    return [p.strip().strip("'\"") for p in text[1:-1].split(",")]


def analyse_graph(model_path: Path, time_input: str | None = None, labels: Mapping[str, str] | None = None) -> GraphPlan:
    """Every node of the (prepared, shape-inferred) float graph with its role and FLOPs.

    time_input: the flow time input (``t``); its embedding subgraph gets role ``time-embedding``.
    labels: node name -> module path (``module_labels`` of the original graph)."""
    onnx = require("onnx")
    model = onnx.shape_inference.infer_shapes(onnx.load(str(model_path)))
    graph = model.graph
    labels = dict(labels or {})
    shapes, types = _value_shapes(onnx, model)
    constant = {i.name for i in graph.initializer}
    for node in graph.node:  # topological order: a node of constants is a constant
        if node.op_type == "Constant" or (node.input and all(i in constant or i == "" for i in node.input)):
            constant.update(node.output)
    time_nodes = _time_embedding_nodes(graph, time_input, constant) if time_input else set()

    nodes = []
    for node in graph.node:
        acts = tuple(i for i in node.input if i and i not in constant and types.get(i, FLOAT) == FLOAT)
        if node.name in time_nodes:
            role = "time-embedding"
        elif node.op_type in ("MatMul", "Gemm", "Conv", "ConvTranspose") and acts:
            role = "attention-core" if node.op_type == "MatMul" and len(acts) == 2 else "weighted"
        else:
            role = "other"
        flops, rows = _flops(node, shapes)
        label = labels.get(node.name) or labels.get(node.name.split("/")[0]) or node.name
        nodes.append(NodeInfo(node.name, node.op_type, label, role, flops, rows, acts))
    return GraphPlan(tuple(nodes))


def _value_shapes(onnx: Any, model: Any) -> tuple[dict[str, tuple[int, ...]], dict[str, int]]:
    shapes: dict[str, tuple[int, ...]] = {}
    types: dict[str, int] = {}
    graph = model.graph
    for vi in [*graph.input, *graph.output, *graph.value_info]:
        t = vi.type.tensor_type
        types[vi.name] = t.elem_type
        if t.HasField("shape") and all(d.HasField("dim_value") for d in t.shape.dim):
            shapes[vi.name] = tuple(d.dim_value for d in t.shape.dim)
    for init in graph.initializer:
        shapes[init.name] = tuple(init.dims)
        types[init.name] = init.data_type
    return shapes, types


def _flops(node: Any, shapes: Mapping[str, tuple[int, ...]]) -> tuple[int, int]:
    """(2·MACs, activation rows) of a MatMul/Gemm/Conv from static shapes; (0, 0) otherwise."""
    ins = [shapes.get(i) for i in node.input[:2]]
    out = shapes.get(node.output[0]) if node.output else None
    if node.op_type in ("MatMul", "Gemm") and ins[0] is not None and out is not None and len(ins[0]) >= 1:
        k = ins[0][-1]
        if node.op_type == "Gemm" and any(a.name == "transA" and a.i for a in node.attribute):
            k = ins[0][0]
        rows = int(np.prod(out[:-1])) if len(out) > 1 else 1
        return int(2 * np.prod(out) * k), rows
    if node.op_type in ("Conv", "ConvTranspose") and ins[1] is not None and out is not None:
        w = ins[1]  # (Cout, Cin/group, *kernel)
        return int(2 * np.prod(out) * int(np.prod(w[1:]))), 0
    return 0, 0


def _time_embedding_nodes(graph: Any, time_input: str, constant: set[str]) -> set[str]:
    """Nodes computed from ``time_input`` (and constants) alone, up to and including the tensor
    most consumers share (the embedding every block reads); all of them when none is shared."""
    consumers: dict[str, list[Any]] = defaultdict(list)
    for node in graph.node:
        for i in node.input:
            consumers[i].append(node)
    t_only = {time_input}
    producer: dict[str, Any] = {}
    cone = []
    for node in graph.node:
        live = [i for i in node.input if i and i not in constant]
        if live and all(i in t_only for i in live):
            t_only.update(node.output)
            cone.append(node)
            for o in node.output:
                producer[o] = node
    if not cone:
        return set()
    outputs = [o for n in cone for o in n.output]
    # Most consumers wins; on a tie the later tensor (the sinusoid's angle also feeds two ops).
    hub = max(enumerate(outputs), key=lambda io: (len(consumers[io[1]]), io[0]))[1]
    if len(consumers[hub]) < 2:
        return {n.name for n in cone}
    keep, stack = set(), [hub]
    while stack:
        node = producer.get(stack.pop())
        if node is not None and node.name not in keep:
            keep.add(node.name)
            stack.extend(i for i in node.input if i in producer)
    return keep


# ---- selection -----------------------------------------------------------------------------------
def match_exclude(plan: GraphPlan, pattern: str) -> list[str]:
    """Node names a ``--exclude`` value names: a node name, an op type, or a module path
    (``blocks.0`` matches ``blocks.0.attn.qkv``)."""
    return [
        n.name
        for n in plan.nodes
        if pattern in (n.name, n.op_type, n.label) or n.label.startswith(pattern + ".") or n.name.split("/")[0] == pattern
    ]


def select_nodes(plan: GraphPlan, cfg: QuantizeConfig) -> tuple[list[str], dict[str, str]]:
    """(nodes to quantize, {node kept float: why}) for the config's op types, profile and excludes."""
    floated: dict[str, str] = {}
    for pattern in cfg.exclude:
        hits = match_exclude(plan, pattern)
        if not hits:
            examples = ", ".join(sorted({n.label for n in plan.candidates(cfg.op_types)})[:6])
            raise UsageError(
                f"--exclude {pattern!r} matches no node; valid: a node name, an op type "
                f"({', '.join(sorted({n.op_type for n in plan.nodes}))}) or a module path (e.g. {examples})",
                hint="`edgekit quantize BUNDLE --json` lists every node it quantized or kept float under selection",
            )
        for name in hits:
            floated.setdefault(name, f"excluded by --exclude {pattern}")
    settings = cfg.settings
    candidates = plan.candidates(cfg.op_types)
    # A module path also names its LayerNorms and Adds: only nodes that could be INT8 are listed.
    floated = {n.name: floated[n.name] for n in candidates if n.name in floated}
    chosen = []
    for node in candidates:
        if node.name in floated:
            continue
        if node.role == "attention-core" and cfg.float_attention_core:
            floated[node.name] = "attention core (QKᵀ/AV: both inputs are activations)"
        elif node.role == "time-embedding" and cfg.float_time_embedding:
            floated[node.name] = "flow time embedding (sinusoid of 1000·t and the time MLP)"
        elif settings.skip_gemv and node.op_type in ("MatMul", "Gemm") and node.rows == 1:
            floated[node.name] = "GEMV-shaped (1 row): TensorRT runs it as fast unquantized"
        else:
            chosen.append(node.name)
    return chosen, floated


def weight_only_by_rule(floated: Mapping[str, str], cfg: QuantizeConfig) -> list[str]:
    """The float-kept nodes (``select_nodes``' second result) that store INT8 weights: those kept
    float by rule where the profile allows it; ``--exclude`` means fully float."""
    return [n for n, why in floated.items() if cfg.settings.weight_only_float and not why.startswith("excluded")]


# ---- quantization ------------------------------------------------------------------------------
# Histogram sizes for method=entropy. quantize_static cannot pass them, and ORT's defaults (128
# bins for 128 quantized bins) leave the KL search nothing to clip: entropy == minmax. TensorRT
# searches 2048 bins, but ORT's KL search is pure Python: calibrating the masked demo took 9 s
# with 512 bins, 21 s with 1024 (about 60 s extrapolated for 2048), so 512.
ENTROPY_BINS = {"num_bins": 512, "num_quantized_bins": 128}


def supports_calibration_cache() -> bool:
    quant = require("onnxruntime.quantization")
    return "calibration_cache_path" in inspect.signature(quant.quantize_static).parameters


def calibrate(prepared: Path, reader: Any, cfg: QuantizeConfig, cache: Path) -> bool:
    """Run ORT's calibrator for ``cfg.method`` over every recorded feed once and save the ranges
    of all tensors of ``cfg.op_types`` nodes to ``cache`` (ORT's own cache format), which every
    ``quantize_model`` call of the run then reads instead of calibrating again. False (nothing
    written) on an onnxruntime without ``quantize_static(calibration_cache_path=...)``."""
    if not supports_calibration_cache():
        return False
    calib = require("onnxruntime.quantization.calibrate")
    options: dict[str, Any] = {}
    if cfg.method == "entropy":
        options |= ENTROPY_BINS
    if cfg.method == "percentile":
        options["percentile"] = cfg.percentile
    reader.rewind()
    with tempfile.TemporaryDirectory(prefix="edgekit-calib-") as tmp, quiet_ort_logging():
        calibrator = calib.create_calibrator(
            Path(prepared),
            list(cfg.op_types),
            augmented_model_path=str(Path(tmp) / "augmented.onnx"),
            calibrate_method=getattr(calib.CalibrationMethod, METHODS[cfg.method]),
            extra_options=options,
        )
        calibrator.collect_data(reader)
        calib.save_tensors_data(calibrator.compute_data(), cache)
    return True


def quantize_model(
    prepared: Path,
    out: Path,
    reader: Any,
    nodes: Sequence[str],
    cfg: QuantizeConfig,
    plan: GraphPlan,
    calibration_cache: Path | None = None,
    weight_only: Sequence[str] = (),
) -> None:
    """``quantize_static`` (QDQ) of exactly ``nodes`` of ``prepared`` into ``out``; the nodes of
    ``weight_only`` not in ``nodes`` get INT8 weights (float activations, float compute). Which
    float nodes may be weight-only (profile, rule vs budget vs --exclude) the caller decides.

    reader: a rewindable CalibrationDataReader (``TrajectoryReader``). calibration_cache: ranges
    from ``calibrate`` (or, when absent, where ORT saves the ones it computes), so fallback
    iterations re-run the quantizer only; ORT < 1.32 recalibrates every call. An empty ``nodes``
    writes the float graph: ORT reads an empty list as "quantize everything"."""
    s = cfg.settings
    float_weighted = [n for n in weight_only if n not in set(nodes)]
    if not nodes:
        shutil.copyfile(prepared, out)
        _weight_only(out, float_weighted)
        return
    quant = require("onnxruntime.quantization")
    by_name = plan.by_name()
    # The calibrator observes every node of these types, so one cache serves every subset.
    op_types = sorted({by_name[n].op_type for n in nodes} | set(cfg.op_types))
    extra: dict[str, Any] = {
        "ActivationSymmetric": s.activation_symmetric,
        "WeightSymmetric": s.weight_symmetric,
        "QuantizeBias": s.quantize_bias,
        "OpTypesToExcludeOutputQuantization": [t for t in op_types if t not in s.quantized_outputs],
    }
    if cfg.method == "percentile":
        extra["CalibPercentile"] = cfg.percentile
    kwargs: dict[str, Any] = {}
    if calibration_cache is not None and supports_calibration_cache():
        kwargs["calibration_cache_path"] = str(calibration_cache)
    reader.rewind()
    try:
        with quiet_ort_logging():
            quant.quantize_static(
                str(prepared),
                str(out),
                reader,
                quant_format=quant.QuantFormat.QDQ,
                op_types_to_quantize=op_types,
                per_channel=s.per_channel,
                reduce_range=s.reduce_range,
                activation_type=getattr(quant.QuantType, s.activation_type),
                weight_type=getattr(quant.QuantType, s.weight_type),
                nodes_to_quantize=list(nodes),
                calibrate_method=getattr(quant.CalibrationMethod, METHODS[cfg.method]),
                extra_options=extra,
                **kwargs,
            )
    except (ValueError, RuntimeError) as exc:
        raise EdgekitError(
            f"onnxruntime quantize_static failed on {prepared.name} ({cfg.profile}, {cfg.method}): {str(exc).splitlines()[0][:300]}",
            hint="try --method minmax, or --exclude the node named in the message",
        ) from None
    _float_inputs_for_float_nodes(out, set(nodes), s.quantized_outputs)
    _weight_only(out, float_weighted)


def _weight_only(path: Path, names: Sequence[str]) -> None:
    """Store the constant weight (input 1) of each node in ``names`` as symmetric per-output-
    channel int8 behind a DequantizeLinear: the node still computes in float on float
    activations. Weights shared with other nodes, or not plain initializers, are left alone."""
    onnx = require("onnx")
    numpy_helper, helper = onnx.numpy_helper, onnx.helper
    model = onnx.load(str(path))
    inits = {i.name: i for i in model.graph.initializer}
    uses = Counter(i for n in model.graph.node for i in n.input)
    wanted = set(names)
    new_nodes = []
    for node in model.graph.node:
        if node.name not in wanted or len(node.input) < 2:
            continue
        w_name = node.input[1]
        init = inits.get(w_name)
        if init is None or uses[w_name] != 1 or init.data_type != FLOAT:
            continue
        w = numpy_helper.to_array(init)
        if node.op_type == "Conv":
            axis = 0  # (Cout, Cin/g, *k)
        elif node.op_type == "Gemm" and any(a.name == "transB" and a.i for a in node.attribute):
            axis = 0  # (N, K)
        else:
            axis = w.ndim - 1  # MatMul / Gemm B: (K, N)
        reduce = tuple(a for a in range(w.ndim) if a != axis)
        scale = (np.abs(w).max(axis=reduce) / 127.0).astype(np.float32)
        scale[scale == 0] = 1.0
        shape = [1] * w.ndim
        shape[axis] = -1
        q = np.clip(np.round(w / scale.reshape(shape)), -127, 127).astype(np.int8)
        base = f"{w_name}_weight_only"
        model.graph.initializer.remove(init)
        model.graph.initializer.extend([
            numpy_helper.from_array(q, f"{base}_quantized"),
            numpy_helper.from_array(scale, f"{base}_scale"),
            numpy_helper.from_array(np.zeros(scale.shape, np.int8), f"{base}_zero_point"),
        ])
        new_nodes.append(helper.make_node(
            "DequantizeLinear", [f"{base}_quantized", f"{base}_scale", f"{base}_zero_point"], [w_name],
            name=f"{base}_DequantizeLinear", axis=axis,
        ))
    if new_nodes:
        for dq in reversed(new_nodes):  # producers first: keep the graph topologically sorted
            model.graph.node.insert(0, dq)
        onnx.save(model, str(path))


def _float_inputs_for_float_nodes(path: Path, int8: set[str], quantized_outputs: Sequence[str]) -> None:
    """ORT gives a tensor one Q/DQ pair and rewires *all* its consumers to the DQ output, also
    the ones it was told not to quantize (``h`` read by an INT8 ``q_proj`` and a float
    ``k_proj``). Point those back at the float tensor. DQs of outputs the profile quantizes on
    purpose (CPU: Conv, for QLinearConv) stay: their consumers are why the Q is there."""
    onnx = require("onnx")
    model = onnx.load(str(path))
    inits = {i.name for i in model.graph.initializer}
    producer = {o: n for n in model.graph.node for o in n.output}
    source: dict[str, str] = {}  # activation DQ output -> the float tensor its Q reads
    for node in model.graph.node:
        if node.op_type != "DequantizeLinear" or node.input[0] in inits:
            continue
        q = producer.get(node.input[0])
        if q is None or q.op_type != "QuantizeLinear":
            continue
        origin = producer.get(q.input[0])
        if origin is not None and origin.name in int8 and origin.op_type in quantized_outputs:
            continue
        source[node.output[0]] = q.input[0]
    changed = False
    for node in model.graph.node:
        if node.name in int8 or node.op_type in ("QuantizeLinear", "DequantizeLinear"):
            continue
        for slot, name in enumerate(node.input):
            if name in source:
                node.input[slot] = source[name]
                changed = True
    if changed:
        onnx.save(model, str(path))


# ---- structure of the result -------------------------------------------------------------------
def quantized_nodes(model: Any) -> set[str]:
    """Names of nodes (other than Q/DQ) with an activation input that passes through Q/DQ.

    Weight and bias DQs do not count: ORT's optimizer may share one (zero) bias initializer
    between several nodes, so a bias DQ can feed nodes that were never quantized."""
    inits = {i.name for i in model.graph.initializer}
    act_dq = {o for n in model.graph.node if n.op_type == "DequantizeLinear" and n.input[0] not in inits for o in n.output}
    return {
        n.name
        for n in model.graph.node
        if n.op_type not in ("QuantizeLinear", "DequantizeLinear") and any(i in act_dq for i in n.input)
    }


def weight_only_nodes(model: Any) -> set[str]:
    """Names of weight-only nodes: not quantized (``quantized_nodes``), yet their weight (input
    1) is the output of a DequantizeLinear of an integer initializer; they compute in float."""
    inits = {i.name: i for i in model.graph.initializer}
    weight_dq = {
        n.output[0]
        for n in model.graph.node
        if n.op_type == "DequantizeLinear" and n.input[0] in inits and inits[n.input[0]].data_type != FLOAT
    }
    int8 = quantized_nodes(model)
    return {
        n.name
        for n in model.graph.node
        if n.op_type not in ("QuantizeLinear", "DequantizeLinear") and n.name not in int8
        and len(n.input) > 1 and n.input[1] in weight_dq
    }


def qdq_structure(path: Path) -> dict[str, Any]:
    """Op counts, quantized nodes and the zero points/dtypes of every Q/DQ node of a QDQ model."""
    onnx = require("onnx")
    numpy_helper = onnx.numpy_helper
    model = onnx.load(str(path))
    inits = {i.name: i for i in model.graph.initializer}
    qdq = []
    for node in model.graph.node:
        if node.op_type not in ("QuantizeLinear", "DequantizeLinear"):
            continue
        scale = numpy_helper.to_array(inits[node.input[1]]) if node.input[1] in inits else None
        zp = numpy_helper.to_array(inits[node.input[2]]) if len(node.input) > 2 and node.input[2] in inits else None
        qdq.append(
            {
                "name": node.name,
                "op": node.op_type,
                "input": node.input[0],
                "constant_input": node.input[0] in inits,
                "scale_size": None if scale is None else int(scale.size),
                "axis": next((a.i for a in node.attribute if a.name == "axis"), None),
                "zero_point_dtype": None if zp is None else str(zp.dtype),
                "zero_point_max_abs": None if zp is None else int(np.abs(zp.astype(np.int64)).max(initial=0)),
                "quantized_dtype": str(numpy_helper.to_array(inits[node.input[0]]).dtype) if node.input[0] in inits else None,
            }
        )
    return {
        "ops": dict(Counter(n.op_type for n in model.graph.node)),
        "quantized_nodes": sorted(quantized_nodes(model)),
        "weight_only_nodes": sorted(weight_only_nodes(model)),
        "qdq": qdq,
    }


def trt_violations(path: Path) -> list[str]:
    """Where a QDQ model breaks TensorRT's explicit-quantization rules (empty = none): every
    zero point int8 and 0; weights per-channel (one scale per output channel); no bias Q/DQ."""
    onnx = require("onnx")
    model = onnx.load(str(path))
    struct = qdq_structure(path)
    problems = []
    for q in struct["qdq"]:
        if q["zero_point_dtype"] != "int8":  # no zero point at all means uint8 in ONNX
            problems.append(f"{q['name']}: zero point dtype {q['zero_point_dtype'] or 'absent (uint8)'} (TensorRT: int8)")
        if q["zero_point_max_abs"]:
            problems.append(f"{q['name']}: zero point {q['zero_point_max_abs']} != 0 (TensorRT: symmetric)")
        if q["quantized_dtype"] not in (None, "int8"):
            problems.append(f"{q['name']}: quantized weight dtype {q['quantized_dtype']} (TensorRT: int8)")
    by_output = {o: n for n in model.graph.node for o in n.output}
    inits = {i.name for i in model.graph.initializer}
    for node in model.graph.node:
        if node.op_type not in ("MatMul", "Gemm", "Conv"):
            continue
        for slot, name in enumerate(node.input):
            dq = by_output.get(name)
            if dq is None or dq.op_type != "DequantizeLinear":
                continue
            entry = next(q for q in struct["qdq"] if q["name"] == dq.name)
            if dq.input[0] in inits and slot == 2:
                problems.append(f"{node.name}: bias is quantized (TensorRT: keep bias float)")
            elif dq.input[0] in inits and (entry["scale_size"] or 1) <= 1:
                problems.append(f"{node.name}: weight is per-tensor (TensorRT profile: per-channel)")
            elif dq.input[0] not in inits and (entry["scale_size"] or 1) > 1:
                problems.append(f"{node.name}: activation is per-channel (TensorRT: per-tensor)")
    return problems


def quantize_unbudgeted(fp32_path: Path, out_path: Path, feeds: Sequence[Mapping[str, np.ndarray]], cfg: QuantizeConfig | None = None) -> Path:
    """INT8 QDQ of every node ``cfg`` selects (default: the ``cpu`` profile's), no accuracy budget
    and no fallback, calibrated on ``feeds`` (recorded decode calls). For *timing* graphs no
    budget can be checked for: the profiler's architecture-only (random-weight) models at other
    sequence lengths, whose INT8 kernels cost what the trained model's would."""
    from edgekit.quantize.calibrate import calibration_reader

    cfg = cfg or QuantizeConfig()
    with tempfile.TemporaryDirectory(prefix="edgekit-quantize-") as tmp:
        prepared = prepare_model(Path(fp32_path), Path(tmp) / "prepared.onnx", cfg.preprocess)
        plan = analyse_graph(prepared, None, module_labels(Path(fp32_path)))
        nodes, floated = select_nodes(plan, cfg)
        weight_only = weight_only_by_rule(floated, cfg)
        staged = Path(tmp) / "int8.onnx"
        quantize_model(prepared, staged, calibration_reader(feeds), nodes, cfg, plan, weight_only=weight_only)
        shutil.move(str(staged), str(out_path))
    return Path(out_path)
