"""The AI Hub section of a profile document as table rows (metrics down, devices across) and
lines, for the console and the HTML report alike."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from edgekit.profile.table import metric_rows

Doc = Mapping[str, Any]
Rows = tuple[list[str], list[list[Any]]]


def _pct(x: Any) -> str | None:
    return None if x is None else f"{100 * x:.1f}%"


def _mb(x: Any) -> float | None:
    return None if x is None else x / 1e6


# (row label, cell getter): what AI Hub's device measured, then the decode estimate and its parts.
_ROWS: list[tuple[str, Callable[[Mapping[str, Any]], Any]]] = [
    ("chipset", lambda d: d.get("chipset")),
    ("model", lambda d: d.get("model")),
    ("ms / network call (device)", lambda d: d.get("per_call_ms")),
    ("  p90 ms / call (device)", lambda d: (d.get("per_call") or {}).get("p90_ms")),
    ("  iterations (device)", lambda d: (d.get("per_call") or {}).get("n")),
    ("calls / decode", lambda d: d["decode"]["calls"]),
    ("device ms / decode", lambda d: d["decode"]["device_ms"]),
    ("host loop ms / decode (here)", lambda d: d["decode"]["host_loop_ms"]),
    ("decode estimate ms", lambda d: d["decode"]["estimate_ms"]),
    ("peak memory MB (inference)", lambda d: _mb(d.get("peak_memory_bytes"))),
    ("first load ms", lambda d: d.get("first_load_ms")),
    ("ops on NPU", lambda d: _pct(d.get("npu_share"))),
    ("ops on CPU / GPU", lambda d: f"{d['ops'].get('CPU', 0)} / {d['ops'].get('GPU', 0)}"),
    ("jobs", lambda d: ", ".join(d.get("jobs") or [])),
]


def aihub_table(doc: Doc) -> Rows:
    """One column per device (and precision) that AI Hub measured."""
    cols = [d for d in ((doc.get("aihub") or {}).get("devices") or []) if d.get("available")]
    rows = metric_rows(_ROWS, cols)
    return ["on AI Hub"] + [d["id"] for d in cols], rows if cols else []


def aihub_lines(doc: Doc) -> list[str]:
    """How the figures were made, per step bucket graph of a linked binary, and where the jobs are."""
    section = doc.get("aihub") or {}
    if not section:
        return []
    lines = [f"measured: {section['measured_where']}"]
    for d in section.get("devices") or []:
        if d.get("available"):
            lines.append(f"{d['id']}: decode estimate = {d['decode']['how']}")
            for i, b in enumerate(d.get("buckets") or []):
                lines.append(
                    f"  bucket {i} ({b['graph']}): {b['calls_per_decode']:.3g} calls x {b['per_call_ms']:.4g} ms"
                )
    lines.append(f"jobs: {len(section.get('jobs') or [])} in {section.get('job_book')}")
    return lines
