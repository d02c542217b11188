"""Intermediate tensors out of each runtime: a variant opened so that ``run`` also returns the
tensors of the reference graph it computes (``Tapped``), by whatever that backend allows.

How each runtime is tapped (``TAP_METHODS``; the document says which one ran):

- ORT, OpenVINO: the captured tensors as extra graph outputs of a copy of the ONNX, run by the
  backend with its own kernels and fusions. Tensors are matched by name between the float and the
  QDQ graph, as onnxruntime's ``quantization.qdq_loss_debug`` matches them (the quantizer keeps
  the names of the tensors it does not create).
- QNN (HTP backend): graph outputs on the ``DequantizeLinear`` after each captured tensor of a
  copy of the QDQ graph: the value the HTP holds. Outputs on the float tensors *before* their
  ``QuantizeLinear`` compiled too, but changed the HTP's results (max |Δ logits| 22 on the test
  model), so they are never used; outputs on the DQ left them bit-identical. (Cut graphs would
  need one HTP compile per tensor.)
- TensorRT: an engine built from a copy of the ONNX with the tensors marked as outputs (a marked
  tensor can keep TensorRT from fusing across it: the replay checks the final outputs are unchanged).
- torch (a reference): forward hooks on the modules, each mapped to the tensor its module's last
  ONNX node produces (module paths from the export metadata, ``quantize.module_labels``).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

import numpy as np

from edgekit._deps import require
from edgekit._sidefiles import side_files_beside
from edgekit.bundle import Bundle
from edgekit.debug.topology import Topology
from edgekit.runtimes import open_runtime
from edgekit.runtimes import (
    trt as trt_backend,  # imports tensorrt only when a function runs
)
from edgekit.runtimes.base import Runtime, RuntimeProxy
from edgekit.runtimes.bucketed import BucketedRuntime
from edgekit.runtimes.onnx_file import load_onnx
from edgekit.runtimes.openvino import (  # lazy: openvino
    OpenVinoRuntime,
    OvOptions,
    inference_precision_for,
)
from edgekit.runtimes.ort import OrtOptions, OrtRuntime  # lazy: onnxruntime
from edgekit.runtimes.qnn import (  # lazy: onnxruntime-qnn
    QnnOptions,
    QnnRuntime,
    qnn_options_for,
)
from edgekit.runtimes.registry import backend
from edgekit.spec import step_position
from edgekit.targets import load_target

TAP_METHODS: dict[str, str] = {
    "ort": "graph outputs added to a copy of the ONNX, run by onnxruntime with its own kernels and fusions",
    "openvino": "graph outputs added to a copy of the ONNX, compiled by OpenVINO",
    "qnn": "graph outputs on the DequantizeLinear after each tensor of a copy of the QDQ graph (the value the HTP "
           "holds), compiled by the HTP backend; outputs before the QuantizeLinear change the HTP's results",
    "trt": "an engine built from a copy of the ONNX with the tensors marked as outputs",
    "torch": "forward hooks on the modules, each mapped to the tensor its module's last ONNX node produces",
}
_QDQ = ("QuantizeLinear", "DequantizeLinear")


@dataclass
class Tapped:
    """An open runtime whose ``run`` returns its graph outputs and the captured tensors;
    ``names``: reference tensor -> key of that tensor in ``run``'s result."""

    runtime: Runtime
    names: dict[str, str]
    method: str

    def close(self) -> None:
        self.runtime.close()


def artifact_for(bundle: Bundle, runtime: str, precision: str) -> str | None:
    """The bundle ONNX a variant computes, as its registry entry names it (checked: qnn takes only
    a qnn-profile int8 model); an engine's source ONNX for TensorRT; None: the PyTorch module."""
    if runtime == "torch":
        return None
    entry = backend(runtime)
    if precision in entry.artifacts:
        return entry.artifact(bundle, precision)
    return "int8" if precision == "int8" else "fp32"


def buckets_of(bundle: Bundle, precision: str) -> tuple[list[str], list[float]] | None:
    """(the int8 graphs' artifacts, the step boundaries) of a step-bucketed int8 model
    (``quantize --step-buckets``), else None."""
    buckets = bundle.step_buckets() if precision == "int8" else None  # the record checked whole (its binding too)
    return (list(buckets.graphs), list(buckets.boundaries)) if buckets is not None else None


def artifact_at(bundle: Bundle, runtime: str, precision: str, feeds: Mapping[str, np.ndarray]) -> str | None:
    """The artifact that computes a call with ``feeds``: its step bucket's graph where there are buckets."""
    buckets = buckets_of(bundle, precision)
    if buckets is None:
        return artifact_for(bundle, runtime, precision)
    position = step_position(bundle.kind, feeds, bundle.meta)
    index = int(np.searchsorted(np.asarray(buckets[1]), position, side="right")) if np.isfinite(position) else 0
    return buckets[0][index]


def capture_names(topo: Topology, model: Any) -> dict[str, str]:
    """reference tensor -> tensor of ``model`` to capture: the same name where ``model`` computes
    it, except where a quantized op's output goes only through a Q -> DQ (an op unit with its
    output quantized: a Conv of the cpu profile, every op on the HTP): there the DQ's output, the
    value the op hands on. A Q in front of a float tensor's consumer belongs to that consumer
    (a MatMul's input quantization is the MatMul's noise): the float tensor is captured."""
    produced = {o: n for n in model.graph.node for o in n.output}
    consumers: dict[str, list[Any]] = {}
    for node in model.graph.node:
        for name in node.input:
            consumers.setdefault(name, []).append(node)
    outputs = {o.name for o in model.graph.output}
    out = {}
    for tensor in topo.floats:
        node = produced.get(tensor)
        if node is None or node.op_type == "QuantizeLinear":
            continue
        users = consumers.get(tensor, [])
        quantized_op = any(getattr(produced.get(i), "op_type", None) == "DequantizeLinear" for i in node.input)
        owned = quantized_op and node.op_type != "DequantizeLinear" and users and all(u.op_type == "QuantizeLinear" for u in users)
        out[tensor] = _dq_after(tensor, consumers) if owned and tensor not in outputs else tensor
    return out


def _dq_after(tensor: str, consumers: Mapping[str, list[Any]]) -> str:
    q = next((n for n in consumers.get(tensor, []) if n.op_type == "QuantizeLinear"), None)
    dq = None if q is None else next((n for n in consumers.get(q.output[0], []) if n.op_type == "DequantizeLinear"), None)
    return tensor if dq is None else dq.output[0]


def tapped_copy(model: Any, dst: Path, tensors: list[str]) -> Path:
    """``model`` with ``tensors`` added as float graph outputs, with their inferred static shapes
    (TensorRT takes static outputs only), saved to ``dst``."""
    onnx = require("onnx")
    try:
        inferred = {vi.name: vi for vi in onnx.shape_inference.infer_shapes(model).graph.value_info}
    except Exception:  # noqa: BLE001 - shapes help TensorRT only; ORT, OpenVINO and QNN infer them
        inferred = {}
    have = {o.name for o in model.graph.output}
    for name in dict.fromkeys(tensors):
        if name not in have:
            known = inferred.get(name)
            model.graph.output.append(known if known is not None else onnx.helper.make_tensor_value_info(name, onnx.TensorProto.FLOAT, None))
    onnx.save(model, str(dst))
    return dst


def _ort(path: Path, precision: str, threads: int, target: str | None, tmp: Path) -> Runtime:
    return OrtRuntime(path, OrtOptions(intra_op_threads=threads))


def _openvino(path: Path, precision: str, threads: int, target: str | None, tmp: Path) -> Runtime:
    return OpenVinoRuntime(path, OvOptions(threads=threads, inference_precision=inference_precision_for(precision)))


def _qnn(path: Path, precision: str, threads: int, target: str | None, tmp: Path) -> Runtime:
    options = qnn_options_for(load_target(target), precision) if target else QnnOptions(fp16=precision == "fp16")
    return QnnRuntime(path, options, threads=threads)


def _trt(path: Path, precision: str, threads: int, target: str | None, tmp: Path) -> Runtime:
    plan = tmp / f"{path.stem}.plan"
    trt_backend.build_engine(path, plan, trt_backend.TrtBuildConfig(precision=precision))
    return trt_backend.TrtRuntime(plan)


# runtime name -> how a tapped ONNX copy is opened on it (onnxruntime's plain-dict registry style).
OPENERS = {"ort": _ort, "openvino": _openvino, "qnn": _qnn, "trt": _trt}


def open_variant(bundle: Bundle, runtime: str, precision: str, tmp: Path, threads: int = 0, target: str | None = None) -> Runtime:
    """The variant as ``check`` runs it: ``open_runtime`` (a target's built engine where the target
    lists the runtime); qnn with a target: the int8 model on that target's HTP; trt without a
    built engine (a scratch copy): an engine built here from the bundle's ONNX; a step-bucketed
    int8 model: each bucket's graph behind ``BucketedRuntime``."""
    buckets = buckets_of(bundle, precision)
    if buckets is not None and runtime in OPENERS:
        graphs = [OPENERS[runtime](bundle.path_of(a), precision, threads, target, tmp) for a in buckets[0]]
        return BucketedRuntime(graphs, buckets[1], bundle.kind, bundle.meta)
    if runtime == "qnn" and target:
        return _qnn(bundle.path_of(artifact_for(bundle, runtime, precision)), precision, threads, target, tmp)
    if target is not None and runtime in load_target(target).runtimes:
        return open_runtime(bundle, runtime, precision, threads=threads, target=target)
    if runtime == "trt" and bundle.engine_for("trt", precision) is None:
        return _trt(bundle.path_of(artifact_for(bundle, runtime, precision)), precision, threads, target, tmp)
    return open_runtime(bundle, runtime, precision, threads=threads)


def open_tapped(bundle: Bundle, runtime: str, precision: str, topo: Topology, tmp: Path, threads: int = 0,
                target: str | None = None) -> Tapped:
    """The variant ``runtime:precision`` of ``bundle`` with ``topo``'s float tensors captured."""
    if runtime == "torch":
        return _torch(bundle, topo, threads)
    buckets = buckets_of(bundle, precision)
    graphs, names = [], {}
    for art in buckets[0] if buckets else [artifact_for(bundle, runtime, precision)]:
        # The graph; weights in a side file stay there, linked beside the tapped copy.
        model = load_onnx(bundle.path_of(art), f"artifact {art!r}")
        names = names or capture_names(topo, model)  # the buckets' graphs differ only in their scales
        path = tapped_copy(model, tmp / f"tapped-{runtime}-{art}.onnx", list(names.values()))
        with side_files_beside(bundle.path_of(art), tmp):
            graphs.append(OPENERS[runtime](path, precision, threads, target, tmp))
    rt = BucketedRuntime(graphs, buckets[1], bundle.kind, bundle.meta) if buckets else graphs[0]
    method = TAP_METHODS[runtime] + (f" (each of the {len(graphs)} step buckets' graphs)" if buckets else "")
    return Tapped(rt, {k: v for k, v in names.items() if v in rt.outputs}, method)


class HookedTorch(RuntimeProxy):
    """The torch reference with forward hooks: ``run`` adds each hooked module's output under the
    ONNX tensor name it stands for."""

    def __init__(self, inner: Any, modules: Mapping[str, Any]):
        super().__init__(inner, name="torch (hooked)")
        self.seen: dict[str, np.ndarray] = {}
        self.handles = [m.register_forward_hook(self._hook(t)) for t, m in modules.items()]

    def _hook(self, tensor: str):
        def keep(module: Any, args: Any, output: Any) -> None:
            first = output[0] if isinstance(output, (tuple, list)) else output
            self.seen[tensor] = first.detach().cpu().numpy().astype(np.float32, copy=True)
        return keep

    def run(self, feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        self.seen = {}
        return dict(self.inner.run(feeds)) | self.seen

    def close(self) -> None:
        for h in self.handles:
            h.remove()
        super().close()


def _torch(bundle: Bundle, topo: Topology, threads: int) -> Tapped:
    rt = open_runtime(bundle, "torch", "fp32", threads=threads)
    last: dict[str, str] = {}  # module path -> the tensor its last node produces
    for op in topo.ops:
        if op.label != op.name and op.outputs and op.outputs[0] in set(topo.floats):
            last[op.label] = op.outputs[0]
    named = dict(rt.module.named_modules())
    # The exported module may sit inside the spec's (an adapter): match the path's tail.
    modules = {t: m for label, t in last.items() if (m := _module(named, label)) is not None}
    return Tapped(HookedTorch(rt, modules), {t: t for t in modules} | {o: o for o in rt.outputs}, TAP_METHODS["torch"])


def _module(named: Mapping[str, Any], label: str) -> Any:
    if label in named:
        return named[label]
    hits = [m for path, m in named.items() if path.endswith("." + label)]
    return hits[0] if len(hits) == 1 else None
