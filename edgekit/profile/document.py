"""JSON documents on disk: numpy values and non-finite floats made JSON-safe, written atomically."""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from edgekit.bundle import STAGING_PREFIX
from edgekit.output import jsonable


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
