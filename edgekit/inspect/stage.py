"""The ``edgekit inspect`` stage: a bundle loaded and verified (every artifact's sha256), its
manifest as the document; or (``--float-set``) the layers quantize kept float, named for another
quantizer (``float_set``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from edgekit.bundle import Bundle
from edgekit.inspect.float_set import float_set


def inspect_bundle(path: Path | str) -> tuple[Bundle, dict[str, Any]]:
    """(the loaded bundle, its manifest: the ``--json`` document)."""
    bundle = Bundle.load(path)
    return bundle, bundle.to_json()


def float_set_document(path: Path | str, fmt: str) -> tuple[dict[str, Any], list[str]]:
    """(the float set of the bundle at ``path`` as ``fmt``'s keyword arguments, warnings)."""
    return float_set(Bundle.load(path), fmt)
