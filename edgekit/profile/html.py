"""A self-contained HTML report of an ``edgekit.profile/1`` document: one file, plots embedded as
base64 PNG (matplotlib, the ``report`` extra), no scripts, no external resources.

Plots: latency histogram per variant, per-step time inside ``Runtime.run`` and the host share
per decode, power over time (or why there is no power figure), decode time against length for
the NAR-vs-AR crossover, and the quality-latency frontier (masked at each K against AR).
"""

from __future__ import annotations

import base64
import html
import io
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from edgekit._deps import require
from edgekit.outpaths import write_text_into
from edgekit.profile.aihub_table import aihub_lines, aihub_table
from edgekit.profile.document import dumps, write_json
from edgekit.profile.table import (
    ar_table,
    crossover_lines,
    frontier_lines,
    frontier_table,
    not_measured_lines,
    power_lines,
    profiled_columns,
    ratios_table,
    sweep_table,
    variants_table,
)

Doc = Mapping[str, Any]
COLORS = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f")

_CSS = """
body { font-family: system-ui, -apple-system, Segoe UI, sans-serif; margin: 2em auto; max-width: 1100px; color: #222; }
h1 { font-size: 1.5em; } h2 { font-size: 1.2em; margin-top: 2em; border-bottom: 1px solid #ddd; }
table { border-collapse: collapse; margin: 0.5em 0; font-size: 0.9em; }
th, td { border: 1px solid #ddd; padding: 3px 8px; text-align: right; }
th:first-child, td:first-child { text-align: left; }
th { background: #f4f4f4; }
.unavailable { color: #a15c00; } .warn { color: #a15c00; }
img { max-width: 100%; } pre { background: #f7f7f7; padding: 1em; overflow-x: auto; font-size: 0.8em; }
.meta td { text-align: left; }
"""


def _fmt(value: Any) -> str:
    if value is None:
        return "—"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        if value != value:  # NaN: not defined, shown as in every table
            return "—"
        if value != 0 and (abs(value) >= 1e5 or abs(value) < 1e-3):
            return f"{value:.3g}"
        return f"{value:.4g}"
    return str(value)


def _table(columns: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    head = "".join(f"<th>{html.escape(str(c))}</th>" for c in columns)
    body = []
    for row in rows:
        cells = []
        for cell in row:
            text = _fmt(cell)
            cls = ' class="unavailable"' if isinstance(cell, str) and cell.startswith("unavailable") else ""
            cells.append(f"<td{cls}>{html.escape(text)}</td>")
        body.append("<tr>" + "".join(cells) + "</tr>")
    return f"<table><thead><tr>{head}</tr></thead><tbody>{''.join(body)}</tbody></table>"


def _lines(lines: Sequence[str], cls: str = "") -> str:
    attr = f' class="{cls}"' if cls else ""
    return "".join(f"<p{attr}>{html.escape(line)}</p>" for line in lines)


# ---- plots ----------------------------------------------------------------------------------------
def _figure(width: float, height: float) -> Any:
    require("matplotlib")
    from matplotlib.figure import (
        Figure,  # the object API: no pyplot, no global backend state
    )

    return Figure(figsize=(width, height), dpi=100, layout="constrained")


def _png(fig: Any, alt: str) -> str:
    buf = io.BytesIO()
    fig.savefig(buf, format="png")
    data = base64.b64encode(buf.getvalue()).decode("ascii")
    return f'<img alt="{html.escape(alt)}" src="data:image/png;base64,{data}">'


def latency_histogram(doc: Doc) -> str:
    cols = [v for v in profiled_columns(doc) if v.get("samples_ms")]
    if not cols:
        return "<p>no per-decode samples in the document (profiled with keep_samples=False)</p>"
    fig = _figure(9, 1.9 * len(cols) + 0.6)
    axes = fig.subplots(len(cols), 1, squeeze=False)[:, 0]
    for i, (ax, v) in enumerate(zip(axes, cols)):
        samples = v["samples_ms"]
        ax.hist(samples, bins=min(40, max(5, len(samples) // 2)), color=COLORS[i % len(COLORS)], alpha=0.8)
        lat = v["latency"]
        for key, style in (("median_ms", "-"), ("p99_ms", "--")):
            ax.axvline(lat[key], color="k", linestyle=style, linewidth=1, label=f"{key[:-3]} {lat[key]:.3g} ms")
        ax.set_title(f"{v['id']}: n={lat['n']}, CV={lat['cv']:.3f}", fontsize=9, loc="left")
        ax.set_ylabel("decodes")
        ax.legend(fontsize=8, loc="upper right")
    axes[-1].set_xlabel("decode latency (ms)")
    return _png(fig, "latency histogram")


def per_step_plot(doc: Doc) -> str:
    cols = [v for v in profiled_columns(doc) if v.get("breakdown", {}).get("step_ms_median")]
    if not cols:
        return "<p>no per-step timings recorded</p>"
    fig = _figure(10, 3.6)
    left, right = fig.subplots(1, 2, width_ratios=[3, 2])
    nar = [v for v in cols if not v["id"].startswith("AR ")] or cols
    width = 0.8 / len(nar)
    for i, v in enumerate(nar):
        steps = v["breakdown"]["step_ms_median"]
        xs = [j + (i - (len(nar) - 1) / 2) * width for j in range(len(steps))]
        left.bar(xs, steps, width=width, color=COLORS[i % len(COLORS)], label=v["id"])
    left.set_xlabel("Runtime.run call within a decode")
    left.set_ylabel("median ms inside Runtime.run")
    left.set_title("per-step time inside the runtime", fontsize=9, loc="left")
    left.legend(fontsize=8)
    names = [v["id"] for v in cols]
    run = [v["breakdown"]["median_runtime_ms"] for v in cols]
    host = [v["breakdown"]["median_host_ms"] for v in cols]
    ys = range(len(cols))
    right.barh(ys, run, color="#4c72b0", label="inside Runtime.run")
    right.barh(ys, host, left=run, color="#dd8452", label="host (sampling, scheduling, copies)")
    for y, v in zip(ys, cols):
        share = v["breakdown"]["host_overhead_share"]
        right.text(run[y] + host[y], y, f" {100 * share:.0f}% host", va="center", fontsize=8)
    right.set_yticks(list(ys), names, fontsize=8)
    right.invert_yaxis()
    right.set_xlabel("median ms per decode")
    right.set_title("runtime vs host per decode", fontsize=9, loc="left")
    right.legend(fontsize=7, loc="lower right")
    return _png(fig, "per-step breakdown")


def power_plot(doc: Doc) -> str:
    traces = [(v["id"], v["power_trace"]) for v in profiled_columns(doc) if v.get("power_trace")]
    traces = [(name, t) for name, t in traces if t.get("samples")]
    if not traces:
        return _lines(power_lines(doc), "unavailable")
    fig = _figure(9, 3.2)
    ax = fig.subplots()
    for i, (name, t) in enumerate(traces):
        rail = t.get("total_rail")
        pts = [(s["t_ms"] / 1e3, s["rails_mw"][rail]) for s in t["samples"] if rail in s.get("rails_mw", {})]
        if pts:
            ax.plot(
                [p[0] for p in pts],
                [p[1] for p in pts],
                marker=".",
                color=COLORS[i % len(COLORS)],
                label=f"{name} ({rail})",
            )
    idle = (doc.get("power") or {}).get("idle_mw")
    if idle is not None:
        ax.axhline(idle, color="k", linestyle=":", label=f"idle {idle:.0f} mW")
    ax.set_xlabel("seconds into the measured window")
    ax.set_ylabel("power (mW)")
    ax.legend(fontsize=8)
    return _png(fig, "power trace") + _lines(power_lines(doc))


def crossover_plot(doc: Doc) -> str:
    cross = ((doc.get("compare_ar") or {}).get("crossover")) or {}
    pts = cross.get("points") or []
    if len(pts) < 2:
        return ""
    fig = _figure(7, 3.6)
    ax = fig.subplots()
    n = [p["length"] for p in pts]
    ax.plot(n, [p["nar_decode_ms"] for p in pts], "o-", label=f"NAR (K={cross['nar_steps']} steps)")
    ax.plot(n, [p["ar_decode_ms"] for p in pts], "s-", label="AR (N tokens)")
    x = (cross.get("measured") or {}).get("n")
    if x is not None:
        ax.axvline(x, color="k", linestyle="--", linewidth=1, label=f"crossover N ~ {x:.0f}")
    ax.set_xscale("log", base=2)
    ax.set_xticks(n, [str(x) for x in n])
    ax.minorticks_off()
    ax.set_yscale("log")
    ax.set_xlabel("sequence length N")
    ax.set_ylabel("median decode ms")
    ax.set_title(f"{cross['runtime']}: decode time against length", fontsize=9, loc="left")
    ax.legend(fontsize=8)
    return _png(fig, "NAR vs AR decode time against length")


def frontier_plot(doc: Doc) -> str:
    """Quality (y) against latency per decode (x, log): one curve per model and precision (colour
    = precision; the masked model through its K values, labelled, as circles; the AR baseline as
    one square), Pareto-optimal points ringed in black, and per precision the bar a K must reach
    (AR's quality within the tolerance) dotted."""
    f = (doc.get("compare_ar") or {}).get("frontier") or {}
    if not f.get("available"):
        return ""
    metric = f["metric"]
    fig = _figure(8, 4.4)
    ax = fig.subplots()
    colors = {p: COLORS[i % len(COLORS)] for i, p in enumerate(dict.fromkeys(p["precision"] for p in f["points"]))}
    curves: dict[tuple[str, str], list[Mapping[str, Any]]] = {}
    for p in f["points"]:
        curves.setdefault((p["model"], p["precision"]), []).append(p)
    for (model, precision), pts in curves.items():
        pts = sorted(pts, key=lambda p: p["latency_ms"])
        xs = [p["latency_ms"] for p in pts]
        ys = [p["quality"].get(metric, float("nan")) for p in pts]
        color = colors[precision]
        name = f"AR ({pts[0]['steps']} tokens)" if model == "ar" else "masked (K steps)"
        ax.plot(
            xs,
            ys,
            marker="s" if model == "ar" else "o",
            linestyle="none" if model == "ar" else "-",
            color=color,
            markersize=7,
            label=f"{name}, {precision}",
        )
        for p, x, y in zip(pts, xs, ys):
            if p["pareto"]:
                ax.plot(
                    [x], [y], marker="o", markersize=13, markerfacecolor="none", markeredgecolor="k", linestyle="none"
                )
            if model != "ar":
                ax.annotate(
                    f"K={p['steps']}", (x, y), textcoords="offset points", xytext=(5, -11), fontsize=7, color=color
                )
    for e in f["smallest_k"]:
        if e.get("threshold") is not None:
            ax.axhline(
                e["threshold"],
                color=colors[e["precision"]],
                linestyle=":",
                linewidth=1,
                label=f"AR {e['precision']} within {f['tolerance']['text']}",
            )
    ax.plot(
        [],
        [],
        marker="o",
        markersize=10,
        markerfacecolor="none",
        markeredgecolor="k",
        linestyle="none",
        label="Pareto-optimal",
    )
    ax.set_xscale("log")
    ax.set_xlabel(f"median ms per decode ({f['runtime']}, {f['rows']} rows)")
    ax.set_ylabel(metric + ("" if f.get("higher_is_better", True) else " (lower is better)"))
    ax.set_title(f"quality-latency frontier: {metric} on {f['n']} conditions", fontsize=9, loc="left")
    ax.legend(fontsize=7, loc="best")
    return _png(fig, "quality-latency frontier")


# ---- the page -------------------------------------------------------------------------------------
def _system_rows(doc: Doc) -> list[list[Any]]:
    before, after = doc["system"]["before"], doc["system"]["after"]
    rows: list[list[Any]] = [
        ["CPU", before["cpu"].get("model"), after["cpu"].get("model")],
        ["cores", before["cpu"].get("cores"), after["cpu"].get("cores")],
    ]
    if before["cpu"].get("board"):
        rows.append(["board", before["cpu"]["board"], after["cpu"].get("board")])
    for cpu, b in before.get("cpufreq", {}).items():
        a = after.get("cpufreq", {}).get(cpu, {})
        fmt = lambda e: e.get("reason") if e.get("cur_mhz") is None else f"{e.get('governor')} {e['cur_mhz']:.0f} MHz"  # noqa: E731
        rows.append([cpu, fmt(b), fmt(a)])
    temps = {z["zone"]: z for z in after.get("thermal", [])}
    for z in before.get("thermal", []):
        rows.append([f"{z['zone']} ({z.get('type')}) °C", z.get("temp_c"), temps.get(z["zone"], {}).get("temp_c")])
    for key in ("jetson", "rpi", "nvml"):
        if key in before:
            rows.append([key, dumps(before[key], None), dumps(after.get(key), None)])
    return rows


def render_html(doc: Doc) -> str:
    """The report page for ``doc`` (a string; every value HTML-escaped)."""
    title = f"edgekit profile: {doc['model']} ({doc['kind']})"
    meta = [
        ["bundle", doc["bundle"]],
        ["created", doc["created"]],
        ["rows per decode", doc["rows"]],
        ["runtimes", ", ".join(doc["config"]["runtimes"])],
        ["schema", doc["schema"]],
    ]
    parts = [
        f'<!DOCTYPE html><html lang="en"><head><meta charset="utf-8"><title>{html.escape(title)}</title>',
        f"<style>{_CSS}</style></head><body>",
        f"<h1>{html.escape(title)}</h1>",
        '<table class="meta"><tbody>'
        + "".join(f"<tr><td>{html.escape(k)}</td><td>{html.escape(_fmt(v))}</td></tr>" for k, v in meta)
        + "</tbody></table>",
        "<h2>Variants side by side</h2>",
        _table(*variants_table(doc)),
    ]
    if not_measured_lines(doc):
        parts += [_lines(not_measured_lines(doc), "warn")]
    if doc.get("aihub"):
        parts += [
            "<h2>On Qualcomm AI Hub's devices, side by side</h2>",
            _table(*aihub_table(doc)),
            _lines(aihub_lines(doc)),
        ]
    if doc.get("ratios"):
        parts += [
            "<h2>Ratios (measured in the same run)</h2>",
            (
                "<p>latency ratio = first / second median decode time "
                "(below 1: the first is faster); speedup = its inverse.</p>"
            ),
            _table(*ratios_table(doc)),
        ]
    if doc.get("compare_ar"):
        parts += ["<h2>NAR vs AR</h2>", _table(*ar_table(doc)), _lines(crossover_lines(doc))]
        if sweep_table(doc)[1]:
            parts += [_table(*sweep_table(doc)), crossover_plot(doc)]
        parts += [_lines(doc["compare_ar"].get("notes", []))]
        if doc["compare_ar"].get("frontier") is not None:
            parts += ["<h2>Quality-latency frontier</h2>", frontier_plot(doc)]
            if frontier_table(doc)[1]:
                parts += [_table(*frontier_table(doc))]
            parts += [_lines(frontier_lines(doc))]
    parts += [
        "<h2>Latency distribution</h2>",
        latency_histogram(doc),
        "<h2>Per-step breakdown</h2>",
        per_step_plot(doc),
        "<h2>Power</h2>",
        power_plot(doc),
    ]
    parts += ["<h2>System state (before / after the run)</h2>", _table(["", "before", "after"], _system_rows(doc))]
    if doc.get("warnings"):
        parts += ["<h2>Warnings</h2>", _lines(doc["warnings"], "warn")]
    parts += [
        "<h2>The JSON document</h2>",
        f"<details><summary>{html.escape(doc['schema'])}</summary><pre>{html.escape(dumps(doc))}</pre></details>",
        "</body></html>",
    ]
    return "\n".join(parts)


def write_html(doc: Doc, out_dir: Path | str) -> Path:
    """Write ``out_dir/profile.html``; returns its path."""
    return write_text_into(out_dir, "profile.html", render_html(doc))


def write_report(doc: Doc, out_dir: Path | str) -> dict[str, Path]:
    """The HTML report and the JSON document side by side in ``out_dir``."""
    html_path = write_html(doc, out_dir)
    return {"html": html_path, "json": write_json(doc, Path(out_dir) / "profile.json")}
