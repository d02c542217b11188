"""The ``edgekit inspect`` stage: a bundle loaded and verified (every artifact's sha256), its
manifest as the document."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from edgekit.bundle import Bundle


def inspect_bundle(path: Path | str) -> tuple[Bundle, dict[str, Any]]:
    """(the loaded bundle, its manifest: the ``--json`` document)."""
    bundle = Bundle.load(path)
    return bundle, bundle.to_json()
