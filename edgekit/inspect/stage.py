"""The ``edgekit inspect`` stage: a bundle loaded and verified (every artifact's sha256), its
manifest as the document, with whether its int8 model is the one quantize made; or
(``--float-set``) the layers quantize kept float, named for another quantizer (``float_set``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from edgekit.bundle import Bundle
from edgekit.inspect.float_set import float_set
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


def float_set_document(path: Path | str, fmt: str) -> tuple[dict[str, Any], list[str]]:
    """(the float set of the bundle at ``path`` as ``fmt``'s keyword arguments, warnings)."""
    return float_set(Bundle.load(path), fmt)
