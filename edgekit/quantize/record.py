"""Writing a quantize stage's result into the bundle: the INT8 artifact, ORT's calibration
table where there is one, and the summary as ``manifest["quantization"]`` (shared by every
quantization profile)."""

from __future__ import annotations

import shutil
import time
from pathlib import Path
from typing import Any, Mapping

import numpy as np

from edgekit._deps import require
from edgekit.bundle import Bundle
from edgekit.output import jsonable
from edgekit.quantize.config import QuantizeConfig


def record_result(
    bundle: Bundle, model: Path, cache: Path, tensors: list[str], tmp: Path, cfg: QuantizeConfig,
    summary: dict[str, Any], clock: dict[str, float], start: float, eval_rows: Mapping[str, np.ndarray] | None = None,
) -> None:
    """Stage the INT8 graph (and ORT's TensorRT calibration table, and the held-out condition
    rows the budget judged, which `edgekit check` then decodes by default) into the bundle,
    record the summary as manifest["quantization"] and save: the previous int8 artifact goes
    only then."""
    staged = bundle.staging_path("int8.onnx")
    staged_table = None
    staged_cond = None
    try:
        if eval_rows is not None:
            staged_cond = bundle.staging_path("conditions.npz")
            with open(staged_cond, "wb") as f:
                np.savez(f, **eval_rows)
            bundle.add_artifact("conditions", staged_cond, made_by="quantize",
                                config={"format": "npz: held-out condition rows [N, ...] per input", "rows": len(next(iter(eval_rows.values())))},
                                suffix=".npz")
        else:
            bundle.remove_artifact("conditions")
        shutil.copyfile(model, staged)
        staged_table = calibration_table(bundle, cache, tensors, tmp)
        art = bundle.add_artifact("int8", staged, made_by="quantize", config=cfg.to_json(), suffix=".onnx")
        summary["artifact"] = {"int8": art.path}
        if staged_table is not None:
            table = bundle.add_artifact(
                "int8-calibration", staged_table, made_by="quantize",
                config={"format": "TensorRT calibration cache (text): tensor max |x|", "method": cfg.method},
                suffix=".cache",
            )
            summary["artifact"]["int8-calibration"] = table.path
        else:
            bundle.remove_artifact("int8-calibration")
        clock["total_s"] = time.perf_counter() - start
        summary["timing_s"] = clock
        bundle.manifest["quantization"] = jsonable(summary)
        bundle.save()
    finally:
        staged.unlink(missing_ok=True)
        if staged_cond is not None:
            staged_cond.unlink(missing_ok=True)
        if staged_table is not None:
            staged_table.unlink(missing_ok=True)


def calibration_table(bundle: Bundle, cache: Path, tensors: list[str], tmp: Path) -> Path | None:
    """ORT's ``write_calibration_table`` (TensorRT calibration cache text) for the INT8 nodes'
    activation inputs, staged in the bundle; None where this ORT keeps no calibration cache."""
    if not cache.is_file():
        return None
    calib = require("onnxruntime.quantization.calibrate")
    write_calibration_table = require("onnxruntime.quantization.quant_utils").write_calibration_table
    ranges = calib.load_tensors_data(cache)
    chosen = {k: ranges[k] for k in tensors if k in ranges}
    out_dir = tmp / "table"
    out_dir.mkdir()
    write_calibration_table(chosen, dir=str(out_dir))
    staged = bundle.staging_path("int8-calibration.cache")
    shutil.copyfile(out_dir / "calibration.cache", staged)
    return staged


