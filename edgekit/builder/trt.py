"""TensorRT engines: built on the device by ``runtimes.trt.build_engine`` and keyed to the bundle
artifact they stand for."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

from edgekit._deps import require
from edgekit.bundle import Bundle
from edgekit.errors import TargetUnavailable
from edgekit.host import HostFacts
from edgekit.runtimes import (
    trt as trt_backend,  # imports tensorrt/cuda only when a function runs
)
from edgekit.runtimes.engines import device_problems
from edgekit.targets import Target


def prepare_trt(target: Target, bundle: Bundle, host: HostFacts) -> Any:
    """Refuse a host that is not the target's device (an engine only runs on the GPU, TensorRT
    version and L4T release that built it); TensorRT's facts about this GPU otherwise."""
    problems = device_problems(target, host)
    if problems:
        raise _refuse_device(target, bundle, problems)
    require("tensorrt")
    trt_host = trt_backend.host_metadata()
    wanted = target.trt.compute_capability
    if wanted and trt_host.compute_capability not in wanted:
        raise _refuse_device(
            target,
            bundle,
            [
                f"this GPU is {trt_host.gpu_name} (compute capability {trt_host.compute_capability}), "
                f"target {target.name} has compute capability {' or '.join(wanted)}"
            ],
        )
    return trt_host


def _refuse_device(target: Target, bundle: Bundle, problems: list[str]) -> TargetUnavailable:
    return TargetUnavailable(
        f"cannot build target {target.name}'s TensorRT engine on this host: {'; '.join(problems)} "
        "(an engine only runs on the GPU, TensorRT version and L4T release that built it)",
        hint=f"build it on the device: `edgekit deploy {bundle.root} --host USER@DEVICE --target {target.name}` "
        f"builds it there, or run `edgekit build {bundle.root} --target {target.name}` on the device",
    )


def build_trt(
    model_path: Path, source_sha256: str, target: Target, precision: str, workdir: Path
) -> tuple[dict[str, Path], dict[str, Any]]:
    plan = workdir / f"{precision}.plan"
    level = target.trt.builder_optimization_level
    cfg = trt_backend.TrtBuildConfig(
        precision=precision,
        workspace_mib=target.trt.workspace_mib,
        builder_optimization_level=None if level < 0 else level,
    )
    meta = trt_backend.build_engine(model_path, plan, cfg)
    if meta.source_onnx_sha256 != source_sha256:
        # Built from the shape-fixed copy: key the engine to the bundle artifact it stands for.
        meta = dataclasses.replace(meta, source_onnx_sha256=source_sha256)
        trt_backend.write_metadata(plan, meta)
    facts = {
        "runtime": "trt",
        "runtime_version": meta.tensorrt_version,
        "format": "plan",
        "device": meta.gpu_name,
        "portable": False,
        "compute_capability": meta.compute_capability,
        "l4t": meta.l4t,
        "config": {"workspace_mib": cfg.workspace_mib, "builder_optimization_level": cfg.builder_optimization_level},
        "notes": list(meta.notes),  # e.g. strongly typed INT8 keeps the layers outside Q/DQ pairs in FP32
    }
    return {"model": plan, "metadata": trt_backend.sidecar_path(plan)}, facts
