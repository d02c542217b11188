"""The one output object commands print through: data to stdout, logs and progress to stderr.

``--json`` prints exactly one JSON document on stdout and nothing else there.
"""

from __future__ import annotations

import json
import math
import sys
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import PurePath
from typing import Any

_CONTROL = {c: f"\\x{c:02x}" for c in (*range(0x00, 0x09), *range(0x0B, 0x20), 0x7F)}


def clean(text: str) -> str:
    """``text`` with terminal control characters (ANSI escapes, bells, carriage returns) shown as
    ``\\xNN``: names from a user's model or manifest cannot drive the terminal."""
    return str(text).translate(_CONTROL)


# "Not defined" (NLL/token when no sequence is valid, a ratio without a denominator) is one
# thing everywhere: — in a table, null in JSON. NaN is how the numbers carry it.
NOT_DEFINED = "—"


def _fmt(value: Any) -> str:
    if isinstance(value, float):
        if math.isnan(value):
            return NOT_DEFINED
        if value != 0 and (abs(value) >= 1e5 or abs(value) < 1e-3):
            return f"{value:.3g}"
        return f"{value:.4g}"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if value is None:
        return NOT_DEFINED
    return str(value)


def jsonable(obj: Any) -> Any:
    """``obj`` as strict JSON holds it (every document and manifest section goes through here):
    mappings as dicts with string keys, tuples as lists, numpy scalars/arrays as numbers/lists,
    paths as strings, NaN as null ("not defined") and ±inf as the strings "inf"/"-inf"."""
    if isinstance(obj, float) and not math.isfinite(obj):
        return None if math.isnan(obj) else ("inf" if obj > 0 else "-inf")
    if isinstance(obj, Mapping):
        return {str(k): jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [jsonable(v) for v in obj]
    if hasattr(obj, "tolist"):  # numpy scalars and arrays
        return jsonable(obj.tolist())
    if isinstance(obj, PurePath):
        return str(obj)
    return obj


class Output:
    documents_written = 0  # --json documents this process printed (an error after one prints none)

    def __init__(self, json_mode: bool = False, quiet: bool = False):
        from rich.console import Console

        self.json_mode = json_mode
        self.quiet = quiet
        self.out = Console(file=sys.stdout, soft_wrap=True)
        self.err = Console(file=sys.stderr, soft_wrap=True)
        self.started = time.perf_counter()

    # ---- human output (suppressed in --json mode; stdout stays one document) -------------------
    def info(self, message: str) -> None:
        if not self.quiet:
            self.err.print(clean(message), highlight=False, markup=False)

    def step(self, message: str) -> None:
        """A progress line stamped with the time the command has run (`· [2:05] fallback 3: …`):
        a stage that works for minutes says what it is on and how long it has taken."""
        m, sec = divmod(int(time.perf_counter() - self.started), 60)
        self.info(f"· [{m}:{sec:02d}] {message}")

    def warn(self, message: str) -> None:
        from rich.markup import escape

        self.err.print(f"[yellow]warning:[/yellow] {escape(clean(message))}", highlight=False)

    def table(self, title: str, columns: Sequence[str], rows: Sequence[Sequence[Any]]) -> None:
        if self.json_mode:
            return
        from rich.markup import escape
        from rich.table import Table

        table = Table(title=escape(clean(title)), title_justify="left", show_edge=False, header_style="bold")
        for i, col in enumerate(columns):
            # The first column names the row (a target, a metric): narrow terminals wrap the others.
            table.add_column(col, justify="left" if i == 0 else "right", no_wrap=i == 0)
        for row in rows:
            table.add_row(*(escape(clean(_fmt(v))) for v in row))
        self.out.print(table)

    def pairs(self, title: str, items: dict[str, Any]) -> None:
        self.table(title, ["", "value"], [(k, v) for k, v in items.items()])

    def line(self, message: str) -> None:
        if not self.json_mode:
            self.out.print(clean(message), highlight=False, markup=False)

    # ---- machine output ------------------------------------------------------------------------
    def document(self, doc: dict[str, Any]) -> None:
        """In --json mode print ``doc`` as the one JSON document on stdout."""
        if self.json_mode:
            Output.documents_written += 1
            sys.stdout.write(json.dumps(jsonable(doc), indent=2) + "\n")
            sys.stdout.flush()

    @contextmanager
    def progress(self, description: str, total: int | None) -> Iterator[Any]:
        """A rich progress bar on stderr; yields ``advance(n=1)``."""
        from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

        if self.quiet or not self.err.is_terminal:
            yield lambda n=1: None
            return
        with Progress(
            TextColumn("{task.description}"), BarColumn(), TimeElapsedColumn(), console=self.err, transient=True
        ) as bar:
            task = bar.add_task(description, total=total)
            yield lambda n=1: bar.advance(task, n)
