"""TensorRT engines: built on the device by ``runtimes.trt.build_engine`` and keyed to the bundle
artifact they stand for."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

from edgekit.runtimes import (
    trt as trt_backend,  # imports tensorrt/cuda only when a function runs
)
from edgekit.targets import Target


def build_trt(model_path: Path, source_sha256: str, target: Target, precision: str, workdir: Path) -> tuple[dict[str, Path], dict[str, Any]]:
    plan = workdir / f"{precision}.plan"
    level = target.trt.builder_optimization_level
    cfg = trt_backend.TrtBuildConfig(
        precision=precision, workspace_mib=target.trt.workspace_mib,
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
