"""What check says beside its metrics, and ``--strict``: every warning a failure.

Both checks (this host's and AI Hub's) put their warnings through ``settle`` before the baseline
and JUnit files are written, so the files, the table and the exit code agree: the int8 model's
line first when it is not the one quantize made (``edgekit.int8_match``), and under ``--strict``
one gated row ``warnings`` (threshold: at most 0) that fails when there is any, with exit 4 as
a failed metric."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from edgekit.bundle import Bundle
from edgekit.evaluate.verdict import Row
from edgekit.int8_match import int8_warnings

STRICT_ROW = "warnings"


def settle(doc: dict[str, Any], bundle: Bundle, precisions: Iterable[str], strict: bool) -> None:
    """``doc`` (an ``edgekit.check/1`` document) with the int8 model's warning added to its
    ``warnings`` and, when ``strict``, the ``warnings`` row judged: ``passed`` false and
    ``failed`` naming it when there is any warning."""
    match, lines = int8_warnings(bundle, precisions)
    doc["warnings"] = lines + list(doc["warnings"])
    doc["int8_match"] = match.to_json() if match is not None else None
    doc["strict"] = strict
    if not strict:
        return
    count = len(doc["warnings"])
    ok = count == 0
    reason = "" if ok else f"{count} warning(s) under --strict, the first: {doc['warnings'][0]}"
    row = Row(STRICT_ROW, float(count), "max", 0.0, "", None, None, ok, None, ok, reason)
    doc["rows"] = [*doc["rows"], row.to_json()]
    if not ok:
        doc["passed"] = False
        doc["failed"] = [*doc["failed"], STRICT_ROW]
