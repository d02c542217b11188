"""`edgekit targets` console output."""

from __future__ import annotations

import textwrap
from collections.abc import Mapping
from typing import Any

from edgekit.output import Output, clean

TITLE = "targets (pass one with --target NAME, or --target your.toml)"
# Below this width the description gets its own lines: as a fifth column at 80 columns it was
# squeezed to ~12 characters, right-aligned, a dozen lines per target.
WIDE = 130


def print_targets(o: Output, doc: Mapping[str, Any]) -> None:
    if o.json_mode:
        return
    rows = [
        (
            t["name"],
            " → ".join(t["runtimes"]),
            ",".join(t["precisions"]),
            t["power_probe"] or "—",
            t["description"] or "",
        )
        for t in doc["targets"]
    ]
    width = o.out.width
    if width >= WIDE:
        from rich.markup import escape
        from rich.table import Table

        table = Table(title=TITLE, title_justify="left", show_edge=False, header_style="bold")
        for col in ("target", "runtimes", "precisions", "power"):
            table.add_column(col, no_wrap=True)
        table.add_column("description", ratio=1)
        for row in rows:
            table.add_row(*(escape(clean(v)) for v in row))
        o.out.print(table)
        return
    # Narrow: one line of facts per target, its description wrapped and indented below it.
    heads = ("target", "runtimes", "precisions", "power")
    cols = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(heads)]
    o.line(TITLE)
    o.line("  ".join(h.ljust(w) for h, w in zip(heads, cols)).rstrip())
    for row in rows:
        o.line("  ".join(v.ljust(w) for v, w in zip(row[:4], cols)).rstrip())
        for part in textwrap.wrap(row[4], width=max(width - 4, 20)):
            o.line(f"    {part}")
