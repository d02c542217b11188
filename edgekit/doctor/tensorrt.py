"""What doctor checks of TensorRT for a target: the package and a working GPU, its version against
edgekit's floor and the target's JetPack (with the install line or the target to use instead),
and what an older TensorRT cannot do (``trt_limits``)."""

from __future__ import annotations

import platform
from typing import Any

from edgekit.doctor.checkup import Checkup
from edgekit.runtimes.engines import device_problems
from edgekit.runtimes.registry import backend
from edgekit.targets import Target, list_targets

TRT_INSTALL = backend("trt").requires.install
TRT_INSTALL_JETSON = (
    "TensorRT comes with JetPack: sudo apt install nvidia-jetpack (make the venv with --system-site-packages)"
)
# JetPack 5's TensorRT bindings are for its Python 3.8; edgekit needs >= 3.10.
TRT_INSTALL_JETPACK5 = (
    "JetPack 5's TensorRT bindings are for Python 3.8: build TensorRT 8.5's bindings for this Python "
    "from the TensorRT OSS release/8.5 python/ folder (docs/targets.md: 'Jetson with JetPack 5')"
)
# cuda-python for a JetPack's CUDA (its bindings must not be newer than the driver's CUDA).
CUDA_PYTHON_FOR_CUDA: dict[str, str] = {
    "11.4": "pip install 'cuda-python>=11.8,<12'",
    "12.2": "pip install 'cuda-python>=12.2,<12.3'",
    "12.6": "pip install 'cuda-python>=12.6,<12.7'",
}
# The oldest TensorRT with the name-based IO API (execute_async_v3, set_tensor_address).
TRT_MIN = (8, 5)


def trt_report(name: str, c: Checkup) -> dict[str, Any]:
    """TensorRT for ``c.target``: its version, the GPU, why it cannot serve the target (``problems``)
    and what this version cannot do (``limits``); adds what is missing to ``c.missing``."""
    reasons: list[str] = []
    version = c.env.get("tensorrt")
    if version is None:
        reasons.append("tensorrt is not installed")
        c.lacks("TensorRT", "the tensorrt Python package is not importable", trt_install(c.target))
    elif c.env.get("tensorrt_error"):
        reasons.append(c.env["tensorrt_error"])
        cuda_line = CUDA_PYTHON_FOR_CUDA.get(c.target.trt.cuda) if c.target.trt.jetson else None
        c.lacks(
            "a working TensorRT + CUDA",
            c.env["tensorrt_error"],
            f"check the driver with nvidia-smi; {cuda_line or TRT_INSTALL + ' brings cuda-python'}",
        )
    limits: list[str] = []
    if version is not None:
        reasons += trt_version_problems(c, str(version))
        limits = trt_limits(str(version), c.target)
    gpu = c.env.get("gpu")
    wanted = c.target.trt.compute_capability
    if gpu and wanted and gpu["compute_capability"] not in wanted:
        reasons.append(
            f"GPU {gpu['name']} has compute capability {gpu['compute_capability']}, target needs {' or '.join(wanted)}"
        )
    return {
        "runtime": "trt",
        "available": not reasons and not device_problems(c.target, c.host),
        "version": version,
        "gpu": gpu,
        "problems": reasons,
        "limits": limits,
    }


def trt_install(target: Target) -> str:
    """The line that installs TensorRT for ``target`` (pip, or JetPack's for its Python)."""
    if not target.trt.jetson:
        return TRT_INSTALL
    if target.trt.python and target.trt.python != "{}.{}".format(*platform.python_version_tuple()[:2]):
        return TRT_INSTALL_JETPACK5 if target.trt.python == "3.8" else TRT_INSTALL_JETSON
    return TRT_INSTALL_JETSON


def version_tuple(version: str) -> tuple[int, ...]:
    """(major, minor) of ``version`` ("10.3.0" -> (10, 3))."""
    return tuple(int(p) for p in version.split(".")[:2] if p.isdigit())


def trt_version_problems(c: Checkup, version: str) -> list[str]:
    """Why this TensorRT cannot serve ``c.target`` (too old for edgekit, or another JetPack's); adds
    what is missing to ``c.missing``."""
    target = c.target
    have = version_tuple(version)
    if have < TRT_MIN:
        why = f"TensorRT {version} lacks the name-based IO API (execute_async_v3) edgekit runs engines with"
        c.lacks("TensorRT >= 8.5", why, "upgrade to JetPack 5.1 or newer" if target.trt.jetson else TRT_INSTALL)
        return [why]
    wanted = target.trt.tensorrt
    if wanted and have[:2] != version_tuple(wanted)[:2]:
        why = f"target {target.name} is for TensorRT {wanted} (JetPack {target.trt.jetpack}), this host has {version}"
        others = [
            t.name
            for t in list_targets()
            if t.trt.jetson
            and t.trt.board == target.trt.board
            and t.trt.compute_capability == target.trt.compute_capability
            and version_tuple(t.trt.tensorrt or "0")[:2] == have[:2]
        ]
        c.lacks(
            f"TensorRT {wanted}",
            why,
            f"use --target {' or '.join(others)}" if others else f"install JetPack {target.trt.jetpack}",
        )
        return [why]
    return []


def trt_limits(version: str, target: Target | None = None) -> list[str]:
    """What TensorRT ``version`` cannot do that edgekit works around or a user must know (empty
    for TensorRT >= 10)."""
    have = version_tuple(version)
    if have >= (10,) or have < TRT_MIN:
        return []
    limits = [
        f"TensorRT {version} runs INT64 graph inputs/outputs as INT32: "
        "edgekit casts int64 feeds at the boundary (values must fit in int32)",
        f"TensorRT {version} parses ONNX opsets up to 17: export with --opset 17 (edgekit export defaults to 18)",
        f"TensorRT {version} has no strongly typed networks: INT8 engines build weakly typed from the trt-profile "
        "Q/DQ model with BuilderFlag.INT8",
    ]
    if have < (8, 6):
        limits.append(f"TensorRT {version} has no builder_optimization_level: the target's setting is ignored")
    if target is not None and target.lint.opset_max > 17:
        limits.append(
            f"target {target.name}'s lint allows opset {target.lint.opset_max} (TensorRT 10): on this host "
            "lint with a target whose opset_max is 17, or pip install 'edgekit[trt]' for TensorRT 10"
        )
    return limits
