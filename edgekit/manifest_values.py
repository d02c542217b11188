"""How the typed manifest views read one JSON value: the value where it has the shape the field
takes, else absent (None, an empty container), never an error deep in a stage
(``manifest_sections``, ``manifest_engines``). Underscored: readers for the manifest modules only."""

from __future__ import annotations

import copy
from typing import Any


def _text(value: Any) -> str | None:
    return value if isinstance(value, str) else None


def _number(value: Any) -> float | None:
    return float(value) if type(value) in (int, float) else None


def _int(value: Any) -> int | None:
    return value if type(value) is int else None


def _or(value: Any, default: Any) -> Any:
    return default if value is None else value


def _object(value: Any) -> dict[str, Any]:
    return copy.deepcopy(value) if isinstance(value, dict) else {}


def _list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def _dict(value: Any) -> dict[str, Any]:
    """``value`` itself where it is an object (read, not kept: no copy), else {}."""
    return value if isinstance(value, dict) else {}


def _texts(value: Any) -> tuple[str, ...] | None:
    return tuple(str(v) for v in value) if isinstance(value, list) else None


def _numbers(value: Any) -> tuple[float, ...]:
    return tuple(float(v) for v in value if type(v) in (int, float)) if isinstance(value, list) else ()
