"""Qualcomm HTP engines: the graph compiled for one Snapdragon SoC into an EPContext model (the
QNN context binary embedded in a one-node ONNX file, or beside it for a model whose weights need
a side file) that a device loads without compiling."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from edgekit._sidefiles import model_bytes, wants_external_data
from edgekit.runtimes import (
    qnn as qnn_backend,  # imports onnxruntime-qnn only when a function runs
)
from edgekit.targets import Target


def build_qnn(
    model_path: Path, target: Target, precision: str, workdir: Path
) -> tuple[dict[str, Path], dict[str, Any]]:
    """Compile for the target's HTP (CPU fallback off: every node on the NPU or an error naming
    it) and write the EPContext model; loaded once here too, to record what compiling costs and
    what loading the context saves."""
    options = qnn_backend.qnn_options_for(target, precision)
    out = workdir / "model_ctx.onnx"
    # A model whose weights need a side file gets its context binary in one too (an attribute of
    # 2 GB does not serialize either).
    embed = not wants_external_data(model_bytes(model_path))
    compiled = qnn_backend.compile_context(model_path, out, options, embed=embed)
    with qnn_backend.QnnRuntime(out, options) as loaded:
        load_seconds = loaded.session_seconds
    v = qnn_backend.versions()
    facts = {
        "runtime": "qnn",
        "runtime_version": v["onnxruntime_qnn"],
        "format": "epcontext",
        "device": f"HTP v{options.arch} soc_model {options.soc}",
        "portable": False,  # a context binary runs on the SoC model it was compiled for
        "compute_capability": None,
        "l4t": None,
        "qnn": {
            "htp_arch": options.arch,
            "soc_model": options.soc,
            "qnn_sdk": v["qnn_sdk"],
            "onnxruntime": v["onnxruntime"],
            "onnxruntime_qnn": v["onnxruntime_qnn"],
            "fp16": options.fp16,
        },
        "session_seconds": {"compile": compiled["compile_seconds"], "load_precompiled": load_seconds},
        "config": {
            "performance_mode": options.performance_mode,
            "vtcm_mb": options.vtcm_mb,
            "ep.context_embed_mode": int(embed),
            "cpu_fallback": False,
        },
    }
    context = compiled["context_file"]
    return {"model": out} | ({"external_data": context} if context is not None else {}), facts
