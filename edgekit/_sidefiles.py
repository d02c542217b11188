"""Which files an ONNX model reads beside itself (external data), read from its bytes without onnx.

A tensor stored outside the model carries ``external_data`` entries ``{key: "location", value:
FILE}``; serialized, each is the bytes ``0a 08 "location" 12 <varint len> FILE``. Finding them
needs no protobuf parser and no heavy import, so every ``Bundle.load`` can afford to check that an
ONNX artifact reads no file its manifest does not list (a side file edgekit never hashed).
"""

from __future__ import annotations

import mmap
from pathlib import Path
from typing import Any, Mapping

from edgekit.errors import BundleError

_KEY = b"\x0a\x08location\x12"


def external_data_locations(path: Path) -> set[str]:
    """The external-data file names an ONNX model at ``path`` refers to (empty: all weights inline)."""
    out: set[str] = set()
    with open(path, "rb") as fh:
        try:
            data = mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ)
        except ValueError:  # an empty file
            return out
        with data:
            i = data.find(_KEY)
            while i >= 0:
                start = i + len(_KEY)
                length, shift, j = 0, 0, start
                while j < len(data) and j - start < 5:
                    byte = data[j]
                    length |= (byte & 0x7F) << shift
                    shift += 7
                    j += 1
                    if not byte & 0x80:
                        break
                name = data[j : j + length]
                if 0 < length <= 4096 and len(name) == length:
                    out.add(name.decode("utf-8", "replace"))
                i = data.find(_KEY, start)
    return out


def check_side_files_listed(path: Path, name: str, doc: Mapping[str, Any]) -> None:
    """Refuse artifact ``name`` (its manifest entry ``doc``, file ``path``) when it is an ONNX file
    that reads weights from a file its entry does not list (a bundle from an older edgekit):
    edgekit would load that file unhashed, pack would leave it out, unpack would call it verified."""
    if path.suffix != ".onnx":
        return
    listed = {str(s.get("path")) for s in doc.get("side_files") or [] if isinstance(s, Mapping)}
    unlisted = sorted(external_data_locations(path) - listed)
    if unlisted:
        raise BundleError(
            f"artifact {name!r} ({doc.get('path')}) reads weights from {unlisted[0]!r}, a file its manifest does not list "
            "(a bundle from an older edgekit?); edgekit loads no unhashed file",
            hint="re-run the stage that made it (fp32: `edgekit export MODEL -o BUNDLE`, int8: `edgekit quantize BUNDLE`)",
        )
