"""Reading an ONNX file as one clean error: a missing, empty or corrupt file (even one whose
recorded hash was updated after it was corrupted, so it passes the bundle's check) must not reach
protobuf as a traceback. The one ``load_onnx`` every room uses; ``onnx`` is imported lazily."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from edgekit._deps import require
from edgekit.errors import BundleError


def load_onnx(path: str | Path, what: str | None = None, *, external_data: bool = False) -> Any:
    """``onnx.ModelProto`` of ``path`` (weights in external files loaded only with
    ``external_data``), or one error naming it: ``what`` (e.g. "artifact 'fp32'") and the path."""
    onnx = require("onnx")
    path = Path(path)
    name = f"{what} ({path})" if what else f"ONNX model {path}"
    fix = "re-run the stage that made it (re-export for fp32)" if what else "re-export it (edgekit export)"
    if not path.is_file():
        raise BundleError(f"{name} does not exist", hint="check the path, or run edgekit export")
    if path.stat().st_size == 0:
        raise BundleError(f"{name} is empty (0 bytes)", hint=fix)
    try:
        model = onnx.load(str(path), load_external_data=external_data)
    except Exception as exc:  # noqa: BLE001 - DecodeError, ValueError, OSError: the same user-facing fault
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
        raise BundleError(f"{name} is not a readable ONNX model ({type(exc).__name__}: {first})", hint=fix) from None
    if not model.graph.node and not model.graph.output:
        raise BundleError(f"{name} is not a readable ONNX model (no graph)", hint=fix)
    return model
