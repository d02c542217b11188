"""`edgekit profile`'s console output: progress bars on stderr, the side-by-side table, ratios,
NAR vs AR with the quality-latency frontier, power and warnings (``deploy`` shows a device's
profile with the same tables)."""

from __future__ import annotations

from contextlib import contextmanager

from edgekit.output import Output
from edgekit.profile.aihub_table import aihub_lines, aihub_table
from edgekit.profile.table import summary_rows


@contextmanager
def profile_progress(o: Output):
    """progress(label, done, total) for the profiler: one bar per label on stderr in a terminal,
    one `· label` line per stage otherwise (logs stay readable)."""
    if o.quiet or not o.err.is_terminal:
        seen: set[str] = set()

        def line(label: str, done: int, total: int) -> None:
            if label not in seen:
                seen.add(label)
                o.info(f"· {label}")

        yield line
        return
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TextColumn,
        TimeElapsedColumn,
    )

    with Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=o.err,
        transient=True,
    ) as bar:
        tasks: dict[str, int] = {}

        def update(label: str, done: int, total: int) -> None:
            if label not in tasks:
                tasks[label] = bar.add_task(label, total=total or None)
            bar.update(tasks[label], completed=done, total=total or None)

        yield update


def print_profile(o: Output, doc: dict) -> None:
    """The side-by-side table, the ratios, NAR vs AR, power and warnings (shared with `demo`)."""
    s = summary_rows(doc)
    if doc["variants"] or not doc.get("aihub"):
        o.table(
            f"profile {doc['model']} ({doc['kind']}), {doc['rows']} rows per decode",
            s["variants"]["columns"],
            s["variants"]["rows"],
        )
    if aihub_table(doc)[1]:
        o.table(
            f"profile {doc['model']} ({doc['kind']}) on Qualcomm AI Hub's devices, {doc['rows']} rows per decode",
            *aihub_table(doc),
        )
    for line in aihub_lines(doc):
        o.line(line)
    if s["ratios"]["rows"]:
        o.table(
            "ratios measured in the same run (latency < 1: the first is faster)",
            s["ratios"]["columns"],
            s["ratios"]["rows"],
        )
    if "ar" in s:
        o.table("NAR vs AR at the same length (speedup = AR ms / NAR ms)", s["ar"]["columns"], s["ar"]["rows"])
        if len(s["sweep"]["rows"]) > 1:
            o.table("decode time against length (crossover)", s["sweep"]["columns"], s["sweep"]["rows"])
    for line in s["not_measured"] + s["crossover"]:
        o.line(line)
    print_frontier(o, s, (doc.get("compare_ar") or {}).get("frontier"))
    for w in doc["warnings"]:
        o.warn(w)


def print_frontier(o: Output, tables: dict, frontier: dict | None) -> None:
    """The quality-latency frontier's table (``tables``: ``summary_rows`` of a profile document;
    ``frontier``: its frontier section) and the lines under it, then the power lines: profile's
    console and the demo's show them alike."""
    if tables.get("frontier", {}).get("rows"):
        o.table(
            f"quality-latency frontier, ranked by {frontier['metric']} (* = Pareto-optimal)",
            tables["frontier"]["columns"],
            tables["frontier"]["rows"],
        )
    for line in tables.get("frontier_lines", []) + tables["power"]:
        o.line(line)
