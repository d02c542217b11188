"""Backends behind one ``Runtime`` protocol, and the opener that picks one for a bundle.

Concrete backends import their heavy dependency lazily; importing this package imports none.
"""

from __future__ import annotations

from typing import Any

from edgekit._deps import require
from edgekit.bundle import Bundle
from edgekit.errors import BundleError, UsageError
from edgekit.models import load_spec
from edgekit.runtimes.base import BaseRuntime, Runtime, validate_feeds
from edgekit.runtimes.engines import find_engine
from edgekit.runtimes.openvino import OpenVinoRuntime, OvOptions, inference_precision_for  # lazy: openvino
from edgekit.runtimes.ort import OrtOptions, OrtRuntime  # lazy: onnxruntime
from edgekit.runtimes.qnn import QnnOptions, QnnRuntime, qnn_artifact  # lazy: onnxruntime-qnn
from edgekit.runtimes.torch_ref import TorchRuntime
from edgekit.spec import check_graph_kind

RUNTIMES = ("ort", "torch", "trt", "openvino", "qnn")
PRECISIONS = ("fp32", "int8", "fp16", "bf16")
# Precisions each runtime runs (openvino: bf16 and fp16 = the fp32 ONNX at that inference
# precision, where the device computes it).
RUNTIME_PRECISIONS: dict[str, tuple[str, ...]] = {
    "ort": ("fp32", "int8"), "torch": ("fp32",), "trt": ("fp32", "fp16", "int8"), "openvino": ("fp32", "int8", "bf16", "fp16"),
    "qnn": ("int8", "fp16"),  # the Hexagon NPU has no fp32
}

__all__ = ["RUNTIMES", "PRECISIONS", "RUNTIME_PRECISIONS", "BaseRuntime", "Runtime", "open_fused", "open_runtime", "validate_feeds"]


def open_runtime(
    bundle: Bundle, runtime: str = "ort", precision: str = "fp32", *, threads: int = 0, target: str | None = None
) -> Runtime:
    """A ready ``Runtime`` for ``bundle``'s per-step network in ``precision``.

    With ``target`` the engine comes from the target's runtimes in order (``edgekit build``
    output for that target when present; a stale engine is refused: ``edgekit.builder.select_engine``
    rebuilds it), and ``runtime`` is ignored. Without it:

    ort   — the bundle's ONNX artifact of that precision (``fp32``, or ``int8`` after quantize);
    torch — the PyTorch module rebuilt from the bundle's model source (fp32 only; needs the
            ``export`` extra): the reference and eager baseline;
    trt   — a TensorRT engine of the bundle built for this host;
    openvino — the bundle's ONNX compiled by OpenVINO on its CPU (fp32 and bf16: the fp32 ONNX
            at that inference precision; int8: the QDQ ONNX, float parts in f32).
    qnn   — Qualcomm's HTP (Hexagon NPU) backend of onnxruntime-qnn, emulated on x86: ``int8``
            is the bundle's int8 model from ``quantize --profile qnn``, ``fp16`` its fp32 model
            computed in float16 (HTP v73+); no fp32 (the NPU has none). Default SoC: 8 Gen 3.
    """
    if target is not None:
        return find_engine(bundle, target, precision).open(threads=threads)
    if runtime not in RUNTIMES:
        raise UsageError(f"--runtime {runtime!r} is unknown; valid: {', '.join(RUNTIMES)}")
    if precision not in PRECISIONS:
        raise UsageError(f"--precision {precision!r} is unknown; valid: {', '.join(PRECISIONS)}")
    if runtime == "ort":
        if precision == "fp16":
            raise UsageError("--precision fp16 needs --runtime trt on this version; ORT runs fp32 or int8 bundles")
        if precision == "bf16":
            raise UsageError("--precision bf16 needs --runtime openvino; ORT runs fp32 or int8 bundles")
        return OrtRuntime(bundle.path_of(precision), OrtOptions(intra_op_threads=threads))
    if runtime == "openvino":
        return _openvino_runtime(bundle, precision, threads)
    if runtime == "torch":
        return _torch_runtime(bundle, precision, threads)
    if runtime == "qnn":
        options = QnnOptions(fp16=precision == "fp16")
        return QnnRuntime(bundle.path_of(qnn_artifact(bundle, precision)), options, threads=threads)
    return _trt_runtime(bundle, precision)


def _torch_runtime(bundle: Bundle, precision: str, threads: int = 0) -> Runtime:
    if precision != "fp32":
        raise UsageError(f"--runtime torch runs the fp32 PyTorch module only, not {precision!r}", hint="use --runtime ort")
    source = bundle.manifest["model"].get("source") or bundle.name
    batch = next(iter(bundle.inputs.values())).shape[0]
    spec = load_spec(source, batch=batch)
    if bundle.meta.get("chunk") and _window_of(spec.inputs, bundle.inputs) and _window_of(spec.outputs, bundle.outputs):
        # A chunk window bundle (`export --chunk-frames`): the same module at the window's frame
        # count, as exported (its forward takes the shorter length; export verified it does).
        return TorchRuntime(spec.module, bundle.inputs, bundle.outputs, threads=threads)
    if dict(spec.inputs) != bundle.inputs or dict(spec.outputs) != bundle.outputs:
        raise UsageError(
            f"model source {source!r} no longer matches bundle {bundle.root} (its IO changed since export)",
            hint=f"re-export with `edgekit export {source} -o {bundle.root}`",
        )
    return TorchRuntime(spec.module, spec.inputs, spec.outputs, threads=threads)


def _window_of(model: Any, window: Any) -> bool:
    """Whether ``window``'s tensors are ``model``'s with only the frame axis (1) shorter or equal."""
    if list(model) != list(window):
        return False
    for name, m in model.items():
        w = window[name]
        if m.dtype != w.dtype or len(m.shape) != len(w.shape) or (len(m.shape) > 1 and w.shape[1] > m.shape[1]):
            return False
        if [d for i, d in enumerate(m.shape) if i != 1] != [d for i, d in enumerate(w.shape) if i != 1]:
            return False
    return True


def _openvino_runtime(bundle: Bundle, precision: str, threads: int = 0) -> Runtime:
    artifact = "int8" if precision == "int8" else "fp32"
    options = OvOptions(threads=threads, inference_precision=inference_precision_for(precision))
    return OpenVinoRuntime(bundle.path_of(artifact), options)


def _trt_runtime(bundle: Bundle, precision: str) -> Runtime:
    require("tensorrt")
    engines = bundle.manifest.get("engines") or {}
    match = [e for e in engines.values() if e.get("runtime") == "trt" and e.get("precision") == precision]
    if not match:
        raise BundleError(
            f"bundle {bundle.root} has no TensorRT {precision} engine",
            hint=f"build one on the device with `edgekit build {bundle.root} --target nvidia-gpu --precision {precision}`",
        )
    return find_engine(bundle, match[0]["target"], precision).open()


def open_fused(
    bundle: Bundle, graph: str, *, threads: int = 0, runtime: str = "ort", precision: str = "fp32"
) -> tuple[Runtime, dict[str, Any]]:
    """(runtime over the fused ``graph`` artifact, its manifest entry) of a loaded Bundle.

    Fused graphs are FP32 ONNX: ``ort`` runs them as written; ``openvino`` in f32 (``fp32``) or
    at bf16 inference precision (``bf16``)."""

    check_graph_kind(bundle.kind, graph)
    entry = (bundle.manifest.get("fused") or {}).get(graph)
    if entry is None:
        have = ", ".join(bundle.manifest.get("fused") or {}) or "none"
        raise UsageError(
            f"bundle {bundle.root} has no fused {graph!r} graph (it has: {have}); "
            f"add one with `edgekit export MODEL -o {bundle.root} --graph {graph}`"
        )
    path = bundle.path_of(entry["artifact"])
    allowed = {"ort": ("fp32",), "openvino": ("fp32", "bf16")}
    if precision not in allowed.get(runtime, ()):
        raise UsageError(
            f"--graph {graph} runs the fused fp32 graph on ort (fp32) or openvino (fp32, bf16), not {runtime} {precision}",
            hint="use --runtime ort or openvino with --precision fp32 (openvino: or bf16), or --graph host",
        )
    if runtime == "openvino":
        options = OvOptions(threads=threads, inference_precision=inference_precision_for(precision))
        return OpenVinoRuntime(path, options), dict(entry)
    return OrtRuntime(path, OrtOptions(intra_op_threads=threads)), dict(entry)
