"""Reading an ONNX file a bundle names as one clean error: a file whose recorded hash was updated
after it was corrupted passes the bundle's check and must still not reach protobuf as a traceback."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from edgekit._deps import require
from edgekit.errors import BundleError


def load_onnx(path: Path, what: str, *, external_data: bool = False) -> Any:
    """``onnx.load`` of ``path`` (``what`` names it in the error, e.g. "artifact 'fp32'")."""
    onnx = require("onnx")
    try:
        return onnx.load(str(path), load_external_data=external_data)
    except Exception as exc:  # noqa: BLE001 - DecodeError, ValueError, OSError: the same user-facing fault
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
        raise BundleError(f"{what} ({path}) is not a readable ONNX model ({type(exc).__name__}: {first})",
                          hint="re-run the stage that made it (re-export for fp32)") from None
