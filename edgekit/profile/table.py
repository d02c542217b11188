"""Tables of an ``edgekit.profile/1`` document as plain rows (no printing): the console (through
``Output.table``), the demo and the HTML report show the same figures.

Each builder returns ``(columns, rows)``; cells are numbers, strings or ``None`` (shown as —).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

Doc = Mapping[str, Any]
Rows = tuple[list[str], list[list[Any]]]

MB = 1e6


def _get(d: Mapping[str, Any] | None, *keys: str) -> Any:
    for k in keys:
        if not isinstance(d, Mapping):
            return None
        d = d.get(k)
    return d


def _mb(value: Any) -> float | None:
    return None if value is None else value / MB


def metric_rows(spec: Sequence[tuple[str, Callable[[Any], Any]]], cols: Sequence[Any]) -> list[list[Any]]:
    """One row per ``(label, getter)`` of ``spec``: the label, then the getter's cell for each
    column (``None`` where a column lacks what the getter reads)."""
    return [[label, *(_cell(get, col) for col in cols)] for label, get in spec]


def _cell(get: Callable[[Any], Any], col: Any) -> Any:
    try:
        return get(col)
    except (KeyError, TypeError):
        return None


def _energy_cell(v: Mapping[str, Any], key: str) -> Any:
    e = v.get("energy") or {}
    if not e.get("available"):
        return "unavailable"
    value = e.get(key)
    # An above-idle figure refused with a reason (no more than idle): the power lines say why.
    return "unavailable" if value is None and e.get("reason") else value


def profiled_columns(doc: Doc) -> list[Mapping[str, Any]]:
    """The measured variants, NAR first, then the AR baseline's that could run."""
    cols = [v for v in doc["variants"] if v.get("available", True)]
    if doc.get("compare_ar"):
        cols += [v for v in doc["compare_ar"]["variants"] if v.get("available")]
    return cols


# (row label, cell getter); the unit is in the label. Labels stay short: the table is read in
# an 80-column terminal with up to four variants side by side.
_ROWS: list[tuple[str, Callable[[Mapping[str, Any]], Any]]] = [
    ("device", lambda v: _short_device(v.get("device"))),
    # The Hexagon NPU emulated on x86: its figures are the emulator's, never the device's.
    ("latency is", lambda v: "x86 EMULATION, not device" if v.get("timing_note") else "measured on this host"),
    ("steps / run calls", lambda v: f"{_get(v, 'decode', 'steps')} / {_get(v, 'decode', 'runtime_calls')}"),
    ("decodes measured", lambda v: _get(v, "latency", "n")),
    ("median ms", lambda v: _get(v, "latency", "median_ms")),
    ("mean ms", lambda v: _get(v, "latency", "mean_ms")),
    ("p90 ms", lambda v: _get(v, "latency", "p90_ms")),
    ("p95 ms", lambda v: _get(v, "latency", "p95_ms")),
    ("p99 ms", lambda v: _get(v, "latency", "p99_ms")),
    ("min ms", lambda v: _get(v, "latency", "min_ms")),
    ("max ms", lambda v: _get(v, "latency", "max_ms")),
    ("std ms", lambda v: _get(v, "latency", "std_ms")),
    ("CV", lambda v: _get(v, "latency", "cv")),
    ("p99 / p50", lambda v: _ratio(_get(v, "latency", "p99_ms"), _get(v, "latency", "median_ms"))),
    ("runtime ms / decode", lambda v: _get(v, "breakdown", "median_runtime_ms")),
    ("host ms / decode", lambda v: _get(v, "breakdown", "median_host_ms")),
    ("host overhead share", lambda v: _pct(_get(v, "breakdown", "host_overhead_share"))),
    ("ms / run call p50", lambda v: _get(v, "breakdown", "median_step_ms")),
    ("ms / run call p90", lambda v: _get(v, "breakdown", "p90_step_ms")),
    ("ms / decode step", lambda v: _get(v, "breakdown", "per_step_ms")),
    ("decodes / s", lambda v: _get(v, "throughput", "decodes_per_s")),
    ("ITEMS / s", lambda v: _get(v, "throughput", "items_per_s")),
    ("mJ / decode", lambda v: _energy_cell(v, "gross_mj")),
    ("mJ / decode > idle", lambda v: _energy_cell(v, "above_idle_mj")),
    ("average mW", lambda v: _energy_cell(v, "average_mw")),
    ("peak RSS MB", lambda v: _mb(_get(v, "memory", "peak_rss_bytes"))),
    ("  session's own MB", lambda v: _mb(_get(v, "memory", "session_peak_bytes"))),
    ("RSS growth MB", lambda v: _mb(_get(v, "memory", "growth_bytes"))),
    ("  after warm-up MB", lambda v: _mb(_get(v, "memory", "growth_after_warmup_bytes"))),
    ("model file MB", lambda v: _mb(_get(v, "memory", "model_bytes"))),
    ("warnings", lambda v: len(v["latency"]["warnings"]) + len(v["system"]["warnings"]) + len(v["runtime_warnings"])),
]


def _short_device(device: Any) -> Any:
    """'CPUExecutionProvider' -> 'CPU' (the JSON keeps the full name)."""
    return device.removesuffix("ExecutionProvider") if isinstance(device, str) else device


def _ratio(a: Any, b: Any) -> float | None:
    return a / b if isinstance(a, (int, float)) and isinstance(b, (int, float)) and b else None


def _pct(x: Any) -> str | None:
    return None if x is None else f"{100 * x:.1f}%"


def variants_table(doc: Doc) -> Rows:
    """Metrics down, variants across (one column per measured variant, AR baseline included)."""
    cols = profiled_columns(doc)
    unit = doc.get("item_unit", "tokens")
    rows = [[label.replace("ITEMS", unit), *cells] for label, *cells in metric_rows(_ROWS, cols)]
    return ["metric"] + [v["id"] for v in cols], rows


_RATIO_ROWS = (
    ("median latency", "median_latency"),
    ("p99 latency", "p99_latency"),
    ("speedup", "speedup"),
    # faster / slower / within noise (the spreads or the host's load cannot tell): JSON says why.
    ("latency verdict", "verdict"),
    ("ITEMS/s", "throughput"),
    ("energy / decode", "energy_per_decode"),
    ("host overhead share", "host_overhead_share"),
    ("peak RSS", "peak_rss"),
    ("session peak", "session_peak"),
    ("model size", "model_bytes"),
)


def ratios_table(doc: Doc) -> Rows:
    """Ratios between variants measured in the same run, one column per pair (latency below 1:
    the first named is faster; speedup is its inverse)."""
    ratios = doc.get("ratios", [])
    unit = doc.get("item_unit", "tokens")
    rows = [[label.replace("ITEMS", unit)] + [r.get(key) for r in ratios] for label, key in _RATIO_ROWS]
    return ["ratio"] + [r["name"] for r in ratios], rows if ratios else []


def ar_table(doc: Doc) -> Rows:
    """NAR-vs-AR speedups at the bundle's length (AR median / NAR median)."""
    cmp = doc.get("compare_ar") or {}
    columns = [
        "NAR",
        "AR",
        f"NAR ms (L={cmp.get('length')})",
        "AR ms",
        "speedup",
        f"{doc.get('item_unit', 'tokens')}/s ratio",
        "NAR is",
    ]
    rows = []
    for s in cmp.get("speedups", []):
        if s.get("speedup") is not None:  # one that could not be measured is a line (not_measured_lines)
            rows.append(
                [
                    s["nar"],
                    s["ar"],
                    s["nar_median_ms"],
                    s["ar_median_ms"],
                    s["speedup"],
                    s["throughput_ratio"],
                    s.get("verdict"),
                ]
            )
    return columns, rows


def not_measured_lines(doc: Doc) -> list[str]:
    """One line per variant that could not run (NAR or AR baseline), saying why."""
    every = list(doc.get("variants", [])) + list((doc.get("compare_ar") or {}).get("variants", []))
    return [f"{v['id']}: not measured: {v.get('reason')}" for v in every if not v.get("available", True)]


# The demo's summary: the four figures docs/demo.md quotes, per measured variant.
SUMMARY_ROWS = ("median ms", "p99 / p50", "host overhead share", "mJ / decode")


def summary_table(doc: Doc) -> Rows:
    """``variants_table`` cut to SUMMARY_ROWS (the HTML report and `edgekit profile` keep all)."""
    columns, rows = variants_table(doc)
    return columns, [r for r in rows if r[0] in SUMMARY_ROWS]


def crossover_statement(cross: Mapping[str, Any] | None) -> str:
    """One statement about the crossover length: the measured one when the sweep brackets it or
    bounds it, else the fitted model's, else why there is none (never two that disagree)."""
    if not cross or not cross.get("available", True):
        return "crossover: not measured" + (f" ({cross.get('reason')})" if cross and cross.get("reason") else "")
    m, model = cross.get("measured") or {}, cross.get("model") or {}
    if m.get("n") is not None:
        return f"measured crossover N ~ {m['n']:.0f} tokens"
    if m.get("bound"):
        return f"measured crossover N {m['bound']}"
    if model.get("n") is not None:
        return f"fitted crossover N ~ {model['n']:.0f} tokens" + (
            " (extrapolated)" if model.get("extrapolated") else ""
        )
    return (
        "crossover: not measured (one length timed; `edgekit profile "
        "--compare-ar --sweep 32,128` or `edgekit demo --full` sweeps lengths)"
    )


def nar_vs_ar_line(doc: Doc) -> str | None:
    """'NAR vs AR: 1.36x (ort fp32), 2.22x (ort int8) at L = 64; measured crossover N ~ 37 tokens'."""
    cmp = doc.get("compare_ar")
    if not cmp:
        return None
    parts = [
        f"{s['speedup']:.2f}x ({s['nar']}{', within noise' if s.get('verdict') == 'within noise' else ''})"
        for s in cmp.get("speedups", [])
        if s.get("speedup") is not None
    ]
    speed = ", ".join(parts) if parts else "no variant measured on both"
    return f"NAR vs AR: {speed} at L = {cmp.get('length')}; {crossover_statement(cmp.get('crossover'))}"


def sweep_table(doc: Doc) -> Rows:
    """Decode time against length: the points the crossovers come from, one block per engine and
    precision (``--sweep-precision fp32,int8`` or several runtimes: side by side, one run)."""
    crossovers = [
        c
        for c in (_get(doc, "compare_ar", "crossovers") or [_get(doc, "compare_ar", "crossover") or {}])
        if c.get("points")
    ]
    columns = ["engine", "K", "N", "models", "NAR ms", "AR ms", "c ms/step", "tau ms/token", "AR/NAR"]
    rows = [
        [
            f"{c['runtime']} {c.get('sweep_precision', c['precision'])}",
            c["nar_steps"],
            p["length"],
            "trained" if p["source"] == "bundle" else "arch-only",
            p["nar_decode_ms"],
            p["ar_decode_ms"],
            p["c_ms"],
            p["tau_ms"],
            p["speedup"],
        ]
        for c in crossovers
        for p in c["points"]
    ]
    return columns, rows


def crossover_lines(doc: Doc) -> list[str]:
    """The crossover length in words: one answer first (``crossover_statement``: measured when the
    sweep brackets or bounds it, else fitted), then the estimates it is not, labelled as such on
    one line (four unlabelled numbers read as four claims), then how the sweep ran."""
    cross = _get(doc, "compare_ar", "crossover")
    if not cross:
        return []
    if not cross.get("available"):
        return [f"crossover: unavailable ({cross.get('reason')})"]
    seed = cross["seed_formula"]
    lines = [
        (
            f"crossover ({cross['runtime']} {cross.get('sweep_precision', cross['precision'])}, "
            f"K={cross['nar_steps']}): {crossover_statement(cross)}"
        )
    ]
    m, model = cross.get("measured") or {}, cross.get("model") or {}
    estimates = []
    if model.get("n") is not None and (m.get("n") is not None or m.get("bound")):  # not the answer above: an estimate
        extra = ", extrapolated" if model.get("extrapolated") else ""
        estimates.append(f"fitted per-step costs K*c(N) = N*tau(N) give N ~ {model['n']:.0f}{extra}")
    elif model.get("reason"):
        estimates.append(f"fitted per-step costs: {model['reason']}")
    estimates.append(
        f"lower bounds from the bundle length alone: N > 1 + c/tau = {_num(seed['n'])}, "
        f"N > K*c/tau = {_num(cross['k_steps_estimate']['n'])} with K={cross['nar_steps']} "
        f"(c = {seed['c_ms']:.3g} ms per NAR step, tau = {seed['tau_ms']:.3g} ms per AR token)"
    )
    lines.append("estimates, not the answer: " + "; ".join(estimates))
    sweep = cross.get("sweep") or {}
    if not sweep.get("available", False):
        lines.append(f"length sweep: not run ({sweep.get('reason')})")
    else:
        lines.append(f"length sweep: {sweep.get('how')}")
        lines += [f"note: {n}" for n in sweep.get("notes", [])]
    for other in (_get(doc, "compare_ar", "crossovers") or [])[1:]:  # one per further runtime (engine)
        lines.append(
            f"crossover on {other['runtime']} {other.get('sweep_precision', other['precision'])}, "
            f"K={other['nar_steps']}: {crossover_statement(other)}"
        )
    for c in _get(doc, "compare_ar", "crossovers") or [cross]:
        if c.get("nar_steps_from", "").startswith("the frontier"):
            lines.append(f"K={c['nar_steps']} on {c['runtime']} {c['precision']}: {c['nar_steps_from']}")
    return lines


def _num(x: Any) -> str:
    return "—" if x is None else f"{x:.1f}"


def _frontier(doc: Doc) -> Mapping[str, Any] | None:
    f = _get(doc, "compare_ar", "frontier")
    return f if isinstance(f, Mapping) else None


def frontier_table(doc: Doc) -> Rows:
    """The quality-latency frontier: one row per point (masked at each K; AR, whose K is its
    token count), every quality metric, the ranking metric first; * marks the Pareto-optimal
    points."""
    f = _frontier(doc)
    if not f or not f.get("available"):
        return [], []
    metric = f["metric"]
    others = [m for m in dict.fromkeys(k for p in f["points"] for k in p["quality"]) if m != metric]
    # Short headers: the table is read in an 80-column terminal; the frontier lines name the metric.
    columns = ["model", "prec", "K", "ms/decode", metric, *others, "Pareto"]
    rows = [
        [
            "masked" if p["model"] == "masked" else "AR",
            p["precision"],
            p["steps"],
            p["latency_ms"],
            p["quality"].get(metric),
            *[p["quality"].get(m) for m in others],
            "*" if p["pareto"] else "",
        ]
        for p in f["points"]
    ]
    return columns, rows


def frontier_lines(doc: Doc) -> list[str]:
    """The frontier in words: what was measured, and per precision the smallest K within the
    tolerance of AR's quality with the speedup there (or why none)."""
    f = _frontier(doc)
    if f is None:
        return []
    if not f.get("available"):
        return [f"frontier: unavailable ({f.get('reason')})"]
    metric, tol = f["metric"], f["tolerance"]["text"]
    lines = [
        (
            f"frontier: {f['how']}; quality from {f['quality_from']}; "
            "* = Pareto-optimal (no other point is as fast and as good)"
        )
    ]
    for e in f["smallest_k"]:
        head = f"{f['runtime']} {e['precision']}: smallest K with {metric} within {tol} of AR's"
        if e.get("steps") is None:
            lines.append(f"{head}: none ({e.get('reason')})")
        else:
            lines.append(
                f"{head} ({_q(e['ar_quality'])}, bar {_q(e['threshold'])}): K={e['steps']} at {_q(e['quality'])}, "
                f"{e['speedup']:.2f}x faster than AR ({e['latency_ms']:.3g} vs {e['ar_latency_ms']:.3g} ms per decode)"
            )
    lines += [f"note: {n}" for n in f.get("notes", [])]
    return lines


def _q(x: Any) -> str:
    return "—" if x is None else f"{x:.3f}"


def power_lines(doc: Doc) -> list[str]:
    p = doc.get("power") or {}
    if not p.get("available"):
        return [f"power: unavailable ({p.get('probe', 'auto')}): {p.get('reason')}"]
    lines = [
        f"power: {p['probe']}" + (f", idle baseline {p['idle_mw']:.0f} mW" if p.get("idle_mw") is not None else "")
    ]
    for v in profiled_columns(doc):
        e = v.get("energy") or {}
        if not e.get("available"):
            lines.append(f"{v['id']}: energy unavailable: {e.get('reason')}")
        elif e.get("above_idle_mj") is None and e.get("reason"):
            lines.append(f"{v['id']}: energy above idle unavailable: {e['reason']}")
    lines += [f"note: {n}" for n in p.get("notes", [])]
    return lines


def summary_rows(doc: Doc) -> dict[str, Any]:
    """Every table of the document as {name: {"columns", "rows"}} plus the text lines."""
    out: dict[str, Any] = {}
    for name, build in (("variants", variants_table), ("ratios", ratios_table)):
        columns, rows = build(doc)
        out[name] = {"columns": columns, "rows": rows}
    if doc.get("compare_ar"):
        for name, build in (("ar", ar_table), ("sweep", sweep_table), ("frontier", frontier_table)):
            columns, rows = build(doc)
            out[name] = {"columns": columns, "rows": rows}
    out["not_measured"] = not_measured_lines(doc)
    columns, rows = summary_table(doc)
    out["summary"] = {"columns": columns, "rows": rows}
    out["nar_vs_ar"] = nar_vs_ar_line(doc)
    out["crossover"] = crossover_lines(doc)
    out["frontier_lines"] = frontier_lines(doc)
    out["power"] = power_lines(doc)
    return out
