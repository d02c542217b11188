"""The ``edgekit inspect`` stage: a bundle loaded and verified (every artifact's sha256), its
manifest as the document, with whether its int8 model is the one quantize made."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from edgekit.bundle import Bundle
from edgekit.int8_match import int8_match


def inspect_bundle(path: Path | str) -> tuple[Bundle, dict[str, Any]]:
    """(the loaded bundle, its manifest: the ``--json`` document). Beside the manifest's own
    sections: ``int8_match`` (``edgekit.int8_match``: matches, differs, not recorded; null
    without an int8 model) and ``warnings`` (a differing int8 model's line)."""
    bundle = Bundle.load(path)
    match = int8_match(bundle)
    line = match.warning(bundle.root) if match is not None else None
    doc = bundle.to_json() | {
        "int8_match": match.to_json() if match is not None else None,
        "warnings": [line] if line else [],
    }
    return bundle, doc
