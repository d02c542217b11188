"""Intermediate tensors out of each runtime: a variant opened so that ``run`` also returns the
tensors of the reference graph it computes (``Tapped``), as the backend's registry entry allows
(``runtimes.registry.DebugHooks``; the document says how, its ``capture`` line):

- an ONNX backend (ORT, OpenVINO, QNN, TensorRT, a plugin's): the captured tensors as extra graph
  outputs of a copy of the ONNX, opened with the entry's ``open_file`` (its own kernels and
  fusions; TensorRT builds an engine of the copy). Tensors are matched by name between the float
  and the QDQ graph (``capture_names``: where a quantized op hands its output on only through a
  Q -> DQ, the DQ's output).
- a backend that runs the module (torch, a reference): the entry's ``open_hooked`` with each
  module path mapped to the tensor its module's last ONNX node produces (module paths from the
  export metadata, ``quantize.module_labels``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from edgekit._deps import require
from edgekit._sidefiles import side_files_beside
from edgekit.bundle import Bundle
from edgekit.debug.topology import Topology
from edgekit.errors import UsageError
from edgekit.runtimes import open_runtime
from edgekit.runtimes.base import Runtime
from edgekit.runtimes.bucketed import BucketedRuntime
from edgekit.runtimes.onnx_file import load_onnx
from edgekit.runtimes.registry import Backend, DebugHooks, FileOptions, backend
from edgekit.runtimes.registry import names as runtime_names
from edgekit.spec import step_position
from edgekit.targets import load_target

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


def debug_hooks(runtime: str, flag: str = "--runtime") -> DebugHooks:
    """What ``runtime``'s registry entry gives debug; one error naming the runtimes debug takes."""
    hooks = backend(runtime, flag).debug
    if hooks is None:
        takes = [n for n in runtime_names() if backend(n).debug is not None]
        raise UsageError(
            f"{flag}: debug cannot capture the tensors runtime {runtime!r} computes; valid: {', '.join(takes)}",
            hint="debug the same model on one of those (e.g. --candidate ort:int8)",
        )
    return hooks


def artifact_for(bundle: Bundle, runtime: str, precision: str) -> str:
    """The bundle ONNX a variant computes, as its registry entry names it (checked: qnn takes only
    a qnn-profile int8 model); an engine's source ONNX where the entry names none (TensorRT)."""
    entry = backend(runtime)
    if precision in entry.artifacts:
        return entry.artifact(bundle, precision)
    return "int8" if precision == "int8" else "fp32"


def buckets_of(bundle: Bundle, precision: str) -> tuple[list[str], list[float]] | None:
    """(the int8 graphs' artifacts, the step boundaries) of a step-bucketed int8 model
    (``quantize --step-buckets``), else None."""
    buckets = bundle.step_buckets() if precision == "int8" else None  # the record checked whole (its binding too)
    return (list(buckets.graphs), list(buckets.boundaries)) if buckets is not None else None


def artifact_at(bundle: Bundle, runtime: str, precision: str, feeds: Mapping[str, np.ndarray]) -> str:
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
        owned = (
            quantized_op
            and node.op_type != "DequantizeLinear"
            and users
            and all(u.op_type == "QuantizeLinear" for u in users)
        )
        out[tensor] = _dq_after(tensor, consumers) if owned and tensor not in outputs else tensor
    return out


def _dq_after(tensor: str, consumers: Mapping[str, list[Any]]) -> str:
    q = next((n for n in consumers.get(tensor, []) if n.op_type == "QuantizeLinear"), None)
    dq = (
        None
        if q is None
        else next((n for n in consumers.get(q.output[0], []) if n.op_type == "DequantizeLinear"), None)
    )
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
            model.graph.output.append(
                known if known is not None else onnx.helper.make_tensor_value_info(name, onnx.TensorProto.FLOAT, None)
            )
    onnx.save(model, str(dst))
    return dst


def _open_file(
    entry: Backend, path: Path, precision: str, threads: int, target: str | None, tmp: Path, io_binding: bool = True
) -> Runtime:
    if entry.open_file is None:  # the callers ask first; registration checks it of a debug entry without open_hooked
        raise ValueError(f"backend {entry.name!r} opens no ONNX file")
    return entry.open_file(path, FileOptions(precision, threads, target=target, scratch=tmp, io_binding=io_binding))


def open_variant(
    bundle: Bundle, runtime: str, precision: str, tmp: Path, threads: int = 0, target: str | None = None
) -> Runtime:
    """The variant as ``check`` runs it: ``open_runtime`` (a target's built engine where the target
    lists the runtime); with a target and an entry whose files take the target's options
    (``DebugHooks.target_options``, qnn): the bundle's model opened so; a runtime that runs only
    built engines with none built for ``precision`` (TensorRT on a scratch copy): the bundle's ONNX
    opened with ``open_file`` (an engine built here); a step-bucketed int8 model: each bucket's
    graph behind ``BucketedRuntime``."""
    entry = backend(runtime)
    hooks = entry.debug
    buckets = buckets_of(bundle, precision)
    if buckets is not None and entry.open_file is not None:
        graphs = [_open_file(entry, bundle.path_of(a), precision, threads, target, tmp) for a in buckets[0]]
        return BucketedRuntime(graphs, buckets[1], bundle.kind, bundle.meta)
    if hooks is not None and hooks.target_options and target and entry.open_file is not None:
        return _open_file(
            entry, bundle.path_of(artifact_for(bundle, runtime, precision)), precision, threads, target, tmp
        )
    if target is not None and runtime in load_target(target).runtimes:
        return open_runtime(bundle, runtime, precision, threads=threads, target=target)
    unbuilt = entry.engine is not None and not entry.engine.runs_unbuilt and entry.open_file is not None
    if unbuilt and bundle.engine_for(runtime, precision) is None:
        return _open_file(
            entry, bundle.path_of(artifact_for(bundle, runtime, precision)), precision, threads, target, tmp
        )
    return open_runtime(bundle, runtime, precision, threads=threads)


def open_tapped(
    bundle: Bundle, runtime: str, precision: str, topo: Topology, tmp: Path, threads: int = 0, target: str | None = None
) -> Tapped:
    """The variant ``runtime:precision`` of ``bundle`` with ``topo``'s float tensors captured."""
    entry, hooks = backend(runtime), debug_hooks(runtime)
    if hooks.open_hooked is not None:
        return _hooked(bundle, precision, hooks, topo, threads)
    buckets = buckets_of(bundle, precision)
    graphs, names = [], {}
    for art in buckets[0] if buckets else [artifact_for(bundle, runtime, precision)]:
        # The graph; weights in a side file stay there, linked beside the tapped copy.
        model = load_onnx(bundle.path_of(art), f"artifact {art!r}")
        names = names or capture_names(topo, model)  # the buckets' graphs differ only in their scales
        path = tapped_copy(model, tmp / f"tapped-{runtime}-{art}.onnx", list(names.values()))
        with side_files_beside(bundle.path_of(art), tmp):
            # Fresh arrays per run: two bound output sets of every tensor would be 4x a call's
            # capture across the two variants; a run's arrays go when the caller drops them.
            graphs.append(_open_file(entry, path, precision, threads, target, tmp, io_binding=False))
    rt = BucketedRuntime(graphs, buckets[1], bundle.kind, bundle.meta) if buckets else graphs[0]
    method = hooks.capture + (f" (each of the {len(graphs)} step buckets' graphs)" if buckets else "")
    return Tapped(rt, {k: v for k, v in names.items() if v in rt.outputs}, method)


def _hooked(bundle: Bundle, precision: str, hooks: DebugHooks, topo: Topology, threads: int) -> Tapped:
    """The module with each op's module path hooked: the tensor its last ONNX node produces."""
    last: dict[str, str] = {}  # module path -> the tensor its last node produces
    for op in topo.ops:
        if op.label != op.name and op.outputs and op.outputs[0] in set(topo.floats):
            last[op.label] = op.outputs[0]
    rt, hooked = hooks.open_hooked(bundle, precision, threads, last)  # type: ignore[misc]
    return Tapped(rt, {t: t for t in hooked} | {o: o for o in rt.outputs}, hooks.capture)
