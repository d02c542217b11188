"""Writing a decode's outputs: an ``.npz`` with the tokens or frames and the conditions, atomically."""

from __future__ import annotations

import io
import os
from collections.abc import Mapping
from pathlib import Path

import numpy as np

from edgekit.bundle import STAGING_PREFIX
from edgekit.errors import UsageError


def save_outputs(
    path: Path,
    output_name: str,
    output: np.ndarray,
    cond: Mapping[str, np.ndarray],
    extra: Mapping[str, np.ndarray] | None = None,
) -> None:
    """Write an .npz atomically: ``output_name``, ``cond_<name>`` for each condition, and the
    ``extra`` arrays as named (flow: ``x0``, the starting noise)."""
    if path.suffix != ".npz":
        raise UsageError(f"-o {path} must end in .npz")
    path.parent.mkdir(parents=True, exist_ok=True)
    buf = io.BytesIO()
    np.savez(buf, **{output_name: output}, **{f"cond_{k}": v for k, v in cond.items()}, **dict(extra or {}))
    tmp = path.with_name(f"{STAGING_PREFIX}{path.name}")
    try:
        tmp.write_bytes(buf.getvalue())
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
