"""The ``edgekit debug`` page: one self-contained HTML file (plot embedded as base64 PNG, no
scripts): the summary line, a heatmap of SQNR per decode step (columns) and module output (rows,
graph order, top to bottom) with the cell where the error entered boxed, the free-running drift
per step, and the fixes tried. Matplotlib (the ``report`` extra) is imported when it is drawn."""

from __future__ import annotations

import base64
import html
import io
import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from edgekit._deps import require
from edgekit.outpaths import write_text_into

Doc = Mapping[str, Any]
# Colour scale of the heatmap (dB): red at or below LOW, green at or above HIGH.
LOW_DB, HIGH_DB = 0.0, 50.0

_CSS = """
body { font-family: system-ui, -apple-system, Segoe UI, sans-serif; margin: 2em auto; max-width: 1100px;
  color: #222; }
h1 { font-size: 1.4em; } h2 { font-size: 1.15em; margin-top: 1.5em; border-bottom: 1px solid #ddd; }
.summary { font-size: 1.1em; padding: 0.6em; background: #f4f4f4; border-left: 4px solid #d62728; }
table { border-collapse: collapse; font-size: 0.9em; }
td, th { border: 1px solid #ddd; padding: 3px 8px; text-align: left; }
img { max-width: 100%; }
"""


def heatmap_png(doc: Doc) -> str:
    """The steps × layers heatmap as an <img> (or a line saying why there is none)."""
    labels = doc["layers"]["labels"]
    grid = np.array(doc["layers"]["per_step"], dtype=np.float64).T if labels else np.zeros((0, 0))  # [layers, steps]
    if grid.size == 0:
        return "<p>no tensor of the two variants could be compared</p>"
    require("matplotlib")
    from matplotlib.figure import (
        Figure,  # the object API: no pyplot, no global backend state
    )

    shown = np.clip(np.where(np.isfinite(grid), grid, HIGH_DB), LOW_DB, HIGH_DB)
    fig = Figure(
        figsize=(min(3 + 0.6 * grid.shape[1], 14), min(2 + 0.28 * len(labels), 24)), dpi=100, layout="constrained"
    )
    ax = fig.add_subplot()
    image = ax.imshow(shown, aspect="auto", cmap="RdYlGn", vmin=LOW_DB, vmax=HIGH_DB, interpolation="nearest")
    ax.set_xticks(range(grid.shape[1]), [str(s + 1) for s in range(grid.shape[1])])
    ax.set_yticks(range(len(labels)), labels, fontsize=8)
    ax.set_xlabel("decode step")
    ax.set_ylabel("module output (graph order)")
    fig.colorbar(image, ax=ax, label="SQNR vs reference (dB, teacher-forced)")
    entry = doc.get("entry")
    if entry and entry["module"] in labels:
        row = labels.index(entry["module"])
        ax.add_patch(_box(entry["step"] - 1, row))
        ax.set_title(f"error enters: step {entry['step']}, {entry['module']} ({entry['op']})", fontsize=10)
    for (r, c), value in np.ndenumerate(grid):
        if grid.shape[1] <= 16 and len(labels) <= 40:
            ax.text(c, r, "∞" if value == math.inf else f"{value:.0f}", ha="center", va="center", fontsize=7)
    buf = io.BytesIO()
    fig.savefig(buf, format="png")
    data = base64.b64encode(buf.getvalue()).decode("ascii")
    return f'<img alt="SQNR per decode step and module" src="data:image/png;base64,{data}">'


def _box(col: int, row: int) -> Any:
    from matplotlib.patches import Rectangle  # lazy: matplotlib

    return Rectangle((col - 0.5, row - 0.5), 1, 1, fill=False, edgecolor="black", linewidth=2.5)


def _rows(items: Mapping[str, Any]) -> str:
    return (
        "<table>"
        + "".join(f"<tr><th>{html.escape(k)}</th><td>{html.escape(str(v))}</td></tr>" for k, v in items.items())
        + "</table>"
    )


def render_html(doc: Doc) -> str:
    attribution, comp, fixed = doc.get("attribution") or {}, doc.get("compounding") or {}, doc.get("fix") or {}
    parts = [
        (
            f"<h1>edgekit debug: {html.escape(doc['model'])} — {html.escape(doc['candidate'])} vs "
            f"{html.escape(doc['reference'])}</h1>"
        ),
        f"<p class='summary'>{html.escape(str(doc.get('summary', '')))}</p>",
        "<h2>Where the error enters (SQNR per step and module)</h2>",
        heatmap_png(doc),
        "<h2>Why</h2>",
        _rows(
            {
                "cause": attribution.get("cause", "—"),
                "detail": attribution.get("why", "—"),
                "compounds": comp.get("summary", "—"),
                "drift": comp.get("why", "—"),
                "captured (candidate)": doc["capture"]["candidate"],
                "captured (reference)": doc["capture"]["reference"],
            }
        ),
    ]
    if fixed:
        rows = {
            t["what"]: ("passes" if t["passed"] else "fails")
            + (f", margin {t['margin']:+.3g}" if isinstance(t.get("margin"), float) else "")
            for t in fixed.get("tried", [])
        }
        rows |= {u["kind"]: "not available: " + u["why"] for u in fixed.get("unavailable", [])}
        parts += ["<h2>Fixes tried (check's gate)</h2>", _rows(rows or {"—": fixed.get("why", "")})]
    return (
        "<!doctype html><html><head><meta charset='utf-8'><title>edgekit "
        f"debug</title><style>{_CSS}</style></head><body>{''.join(parts)}</body></html>"
    )


def write_heatmap(out_dir: Path | str, doc: Doc) -> Path:
    """Write ``out_dir/debug.html`` (atomically); returns its path."""
    return write_text_into(out_dir, "debug.html", render_html(doc))
