"""TensorRT's entry in the runtime registry: a bundle opens on the engine `edgekit build` made for
this host, a target's engine is checked against this GPU and TensorRT, and none runs unbuilt."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import edgekit.runtimes.trt.builder as trt_builder
import edgekit.runtimes.trt.metadata as metadata  # module attributes: tests fake the host
import edgekit.runtimes.trt.runtime as trt_runtime
from edgekit._deps import require
from edgekit.errors import BundleError
from edgekit.manifest_sections import EngineRecord
from edgekit.runtimes.base import Runtime
from edgekit.runtimes.engines import device_problems, find_engine
from edgekit.runtimes.registry import (
    Backend,
    DebugHooks,
    EngineHooks,
    FileOptions,
    Requirement,
    register_backend,
)


def open_trt(bundle: Any, precision: str, threads: int = 0) -> Runtime:
    """The bundle's TensorRT engine of ``precision`` built for this host (any target's)."""
    require("tensorrt")
    match = bundle.engine_for("trt", precision)
    if match is None:
        raise BundleError(
            f"bundle {bundle.root} has no TensorRT {precision} engine",
            hint="build one on the device with "
            f"`edgekit build {bundle.root} --target nvidia-gpu --precision {precision}`",
        )
    return find_engine(bundle, match.target, precision).open()


def _check_host(target: Any, host: Any, precision: str) -> tuple[str | None, list[str]]:
    reasons = ([] if TRT.requires.available() else ["tensorrt is not installed"]) + device_problems(target, host)
    if reasons:
        return f"target {target.name}: TensorRT skipped on this host ({'; '.join(reasons)})", []
    return None, []


def _engine_problems(plan: Path, entry: EngineRecord, host: Any, target: Any, trt_host: Any) -> list[str]:
    if not plan.is_file():
        return []
    try:
        meta = metadata.read_metadata(plan)
    except BundleError as exc:
        return [f"no usable metadata sidecar ({exc.message})"]
    trt_host = trt_host if trt_host is not None else metadata.host_metadata()
    # The source check is done against the manifest; the precision must match the key.
    return metadata.check_compatible(meta, trt_host, None, entry.precision)


def _open_engine(choice: Any, threads: int) -> Runtime:
    return trt_runtime.load_engine(choice.path, source_onnx=choice.source, precision=choice.precision)


def _open_file(path: Path, o: FileOptions) -> Runtime:
    """An engine built here from ``path`` into ``o.scratch`` (no target's engine: a scratch copy)."""
    plan = (o.scratch or path.parent) / f"{path.stem}.plan"
    trt_builder.build_engine(path, plan, trt_builder.TrtBuildConfig(precision=o.precision))
    return trt_runtime.TrtRuntime(plan)


TRT = register_backend(
    Backend(
        name="trt",
        title="TensorRT",
        help="the TensorRT engine `edgekit build` made on the NVIDIA device",
        precisions=("fp32", "fp16", "int8"),
        open=open_trt,
        lacks="TensorRT engines are fp32, fp16 or int8",
        requires=Requirement("tensorrt", "pip install 'edgekit[trt]'", extra="trt"),  # Jetson: comes with JetPack
        engine=EngineHooks(check_host=_check_host, problems=_engine_problems, open=_open_engine, runs_unbuilt=False),
        open_file=_open_file,
        quantize_profile="trt",
        # A marked tensor can keep TensorRT from fusing across it: debug's replay checks that the
        # final outputs are unchanged.
        debug=DebugHooks(capture="an engine built from a copy of the ONNX with the tensors marked as outputs"),
    )
)

__all__ = ["TRT", "open_trt"]
