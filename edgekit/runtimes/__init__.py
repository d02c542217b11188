"""Backends behind one ``Runtime`` protocol, and the opener that picks one for a bundle.

Concrete backends import their heavy dependency lazily; importing this package imports none.
"""

from __future__ import annotations

from edgekit.bundle import Bundle
from edgekit.errors import UsageError
from edgekit.runtimes.base import BaseRuntime, Runtime, validate_feeds

RUNTIMES = ("ort", "torch", "trt")
PRECISIONS = ("fp32", "int8", "fp16")

__all__ = ["RUNTIMES", "PRECISIONS", "BaseRuntime", "Runtime", "open_runtime", "validate_feeds"]


def open_runtime(
    bundle: Bundle, runtime: str = "ort", precision: str = "fp32", *, threads: int = 0, target: str | None = None, rebuild: bool = False
) -> Runtime:
    """A ready ``Runtime`` for ``bundle``'s per-step network in ``precision``.

    With ``target`` the engine comes from the target's runtimes in order (``edgekit build``
    output for that target when present; a stale engine is refused unless ``rebuild``), and
    ``runtime`` is ignored. Without it:

    ort   — the bundle's ONNX artifact of that precision (``fp32``, or ``int8`` after quantize);
    torch — the PyTorch module rebuilt from the bundle's model source (fp32 only; needs the
            ``export`` extra): the reference and eager baseline;
    trt   — a TensorRT engine of the bundle built for this host.
    """
    if target is not None:
        from edgekit.build import select_engine

        return select_engine(bundle, target, precision, rebuild=rebuild).open(threads=threads)
    if runtime not in RUNTIMES:
        raise UsageError(f"--runtime {runtime!r} is unknown; valid: {', '.join(RUNTIMES)}")
    if precision not in PRECISIONS:
        raise UsageError(f"--precision {precision!r} is unknown; valid: {', '.join(PRECISIONS)}")
    if runtime == "ort":
        from edgekit.runtimes.ort import OrtOptions, OrtRuntime

        if precision == "fp16":
            raise UsageError("--precision fp16 needs --runtime trt on this version; ORT runs fp32 or int8 bundles")
        return OrtRuntime(bundle.path_of(precision), OrtOptions(intra_op_threads=threads))
    if runtime == "torch":
        return _torch_runtime(bundle, precision, threads)
    return _trt_runtime(bundle, precision)


def _torch_runtime(bundle: Bundle, precision: str, threads: int = 0) -> Runtime:
    from edgekit.models import load_spec
    from edgekit.runtimes.torch_ref import TorchRuntime

    if precision != "fp32":
        raise UsageError(f"--runtime torch runs the fp32 PyTorch module only, not {precision!r}", hint="use --runtime ort")
    source = bundle.manifest["model"].get("source") or bundle.name
    batch = next(iter(bundle.inputs.values())).shape[0]
    spec = load_spec(source, batch=batch)
    if dict(spec.inputs) != bundle.inputs or dict(spec.outputs) != bundle.outputs:
        raise UsageError(
            f"model source {source!r} no longer matches bundle {bundle.root} (its IO changed since export)",
            hint=f"re-export with `edgekit export {source} -o {bundle.root}`",
        )
    return TorchRuntime(spec.module, spec.inputs, spec.outputs, threads=threads)


def _trt_runtime(bundle: Bundle, precision: str) -> Runtime:
    from edgekit._deps import require
    from edgekit.errors import BundleError

    require("tensorrt")
    engines = bundle.manifest.get("engines") or {}
    match = [e for e in engines.values() if e.get("runtime") == "trt" and e.get("precision") == precision]
    if not match:
        raise BundleError(
            f"bundle {bundle.root} has no TensorRT {precision} engine",
            hint=f"build one on the device with `edgekit build {bundle.root} --target nvidia-gpu --precision {precision}`",
        )
    from edgekit.build import select_engine

    return select_engine(bundle, match[0]["target"], precision).open()
