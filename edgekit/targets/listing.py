"""The ``edgekit targets`` stage: every shipped target as one ``edgekit.targets/1`` document."""

from __future__ import annotations

from typing import Any

from edgekit.targets import list_targets

SCHEMA = "edgekit.targets/1"


def targets_document() -> dict[str, Any]:
    """{"schema", "targets": [each built-in target's full settings, the default first]}."""
    return {"schema": SCHEMA, "targets": [t.to_json() for t in list_targets()]}
