"""JSON documents on disk: numpy values and non-finite floats made JSON-safe, written atomically."""

from __future__ import annotations

import json
import math
import os
from pathlib import Path
from typing import Any, Mapping

from edgekit.bundle import STAGING_PREFIX


def jsonable(obj: Any) -> Any:
    """``obj`` with numpy scalars/arrays as lists, tuples as lists, NaN as null and ±inf as
    strings (strict JSON has neither)."""
    if isinstance(obj, float) and not math.isfinite(obj):
        return None if math.isnan(obj) else ("inf" if obj > 0 else "-inf")
    if isinstance(obj, Mapping):
        return {str(k): jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [jsonable(v) for v in obj]
    if hasattr(obj, "tolist"):
        return jsonable(obj.tolist())
    if isinstance(obj, Path):
        return str(obj)
    return obj


def dumps(doc: Mapping[str, Any], indent: int | None = 2) -> str:
    return json.dumps(jsonable(doc), indent=indent, allow_nan=False)


def write_json(doc: Mapping[str, Any], path: Path | str) -> Path:
    """Write ``doc`` to ``path`` through a temp file and a rename (never a half-written report)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f"{STAGING_PREFIX}{path.name}")
    try:
        tmp.write_text(dumps(doc) + "\n")
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
    return path
