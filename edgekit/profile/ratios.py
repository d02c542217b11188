"""Ratios between the variants measured in one run (the candidate over its reference)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from edgekit.probes.speed import Timing, compare
from edgekit.profile.config import candidate_order


# ---- ratios -------------------------------------------------------------------------------------
def safe_ratio(a: float | None, b: float | None) -> float | None:
    if a is None or b is None or not (isinstance(a, (int, float)) and isinstance(b, (int, float))) or b == 0:
        return None
    return float(a) / float(b)


def latency_verdict(num: Mapping[str, Any], den: Mapping[str, Any]) -> dict[str, Any]:
    """Whether ``num``'s decode is faster or slower than ``den``'s, or within noise (their spreads
    not below the difference, or the host busier than its cores while either was measured:
    ``probes.speed.compare`` on each variant's ``timing``), and why; verdict None where a variant
    recorded no timing."""
    a, b = Timing.from_json(num.get("timing")), Timing.from_json(den.get("timing"))
    if a is None or b is None:
        return {"verdict": None, "unsure": []}
    d = compare(str(num["id"]), a, str(den["id"]), b)
    return {"verdict": d.verdict, "unsure": list(d.unsure)}


def ratio(num: Mapping[str, Any], den: Mapping[str, Any], name: str) -> dict[str, Any]:
    """Figures of variant ``num`` over variant ``den`` (both measured in this run), and whether
    the latency ratio is within noise (``latency_verdict``)."""
    med = safe_ratio(num["latency"]["median_ms"], den["latency"]["median_ms"])
    return {
        "name": name,
        "numerator": num["id"],
        "denominator": den["id"],
        **latency_verdict(num, den),
        "median_latency": med,
        "p99_latency": safe_ratio(num["latency"]["p99_ms"], den["latency"]["p99_ms"]),
        "speedup": (1.0 / med) if med else None,
        "throughput": safe_ratio(num["throughput"]["items_per_s"], den["throughput"]["items_per_s"]),
        "energy_per_decode": safe_ratio(_energy_mj(num), _energy_mj(den)),
        "host_overhead_share": safe_ratio(
            num["breakdown"]["host_overhead_share"], den["breakdown"]["host_overhead_share"]
        ),
        "peak_rss": safe_ratio(num["memory"].get("peak_rss_bytes"), den["memory"].get("peak_rss_bytes")),
        # What each session added at its peak over the process before it opened (RssReport).
        "session_peak": safe_ratio(num["memory"].get("session_peak_bytes"), den["memory"].get("session_peak_bytes")),
        "model_bytes": safe_ratio(num["memory"].get("model_bytes"), den["memory"].get("model_bytes")),
    }


def _energy_mj(variant: Mapping[str, Any]) -> float | None:
    """Energy per decode where the variant has one (never from a probe that cannot see its device)."""
    energy = variant["energy"]
    return energy.get("gross_mj") if energy.get("available") else None


def variant_ratios(variants: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Ratios between every two variants that differ in exactly one of runtime, precision and
    steps, oriented candidate / reference (int8/fp32, trt/ort/torch, fewer/more steps)."""
    out = []
    for i, a in enumerate(variants):
        for b in variants[i + 1 :]:
            diff = [k for k in ("runtime", "precision", "steps") if a[k] != b[k]]
            if len(diff) != 1:
                continue
            axis = diff[0]
            if axis == "steps":
                num, den = (a, b) if a["steps"] < b["steps"] else (b, a)
                name = f"K={num['steps']}/K={den['steps']} ({a['runtime']} {a['precision']})"
            else:
                order = candidate_order(axis)
                num, den = (a, b) if order.index(a[axis]) < order.index(b[axis]) else (b, a)
                same = a["precision"] if axis == "runtime" else a["runtime"]
                name = f"{num[axis]}/{den[axis]} ({same}" + (f", K={a['steps']})" if _multi_steps(variants) else ")")
            out.append(ratio(num, den, name))
    return out


def _multi_steps(variants: Sequence[Mapping[str, Any]]) -> bool:
    return len({v["steps"] for v in variants}) > 1
