"""The quality-latency frontier of a NAR (masked) model against its AR baseline.

Pure arithmetic over measured points, no measuring: each point is one decode configuration
(model, precision, step count) with its median latency per decode and its quality on one
evaluation set. This module marks the Pareto-optimal points, finds the smallest masked step
count K whose quality is within a tolerance of the AR baseline's, and the speedup at that K.

Quality is "higher is better" inside this module; a lower-is-better metric (NLL) is handled by
the caller passing ``higher_is_better=False``, which negates it before comparing.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from edgekit.errors import UsageError

NAR, AR = "masked", "ar"


@dataclass(frozen=True)
class FrontierPoint:
    model: str  # "masked" (NAR) or "ar"; one curve per model and precision
    precision: str  # fp32 | int8 | ...
    steps: int  # masked: K network calls; ar: tokens decoded (its sequential steps)
    latency_ms: float  # median wall time of one whole decode (all rows of the batch)
    quality: Mapping[str, float]  # every metric measured on the evaluation set (nan = undefined)

    def value(self, metric: str) -> float:
        return float(self.quality.get(metric, math.nan))


@dataclass(frozen=True)
class Tolerance:
    """How far below the AR baseline's quality a masked point may be and still count as "as
    good": ``relative`` = a share of |AR quality| ("10%"), else an absolute amount ("0.02")."""

    amount: float
    relative: bool

    @classmethod
    def parse(cls, text: str | float) -> Tolerance:
        raw = str(text).strip()
        relative = raw.endswith("%")
        try:
            amount = float(raw[:-1] if relative else raw)
        except ValueError:
            raise UsageError(
                f"--frontier-tolerance {text!r} is not a number; valid: e.g. 10% (of AR's quality) or 0.02 (absolute)"
            ) from None
        if not math.isfinite(amount) or amount < 0 or (relative and amount > 100):
            raise UsageError(
                f"--frontier-tolerance {text!r} is out of range; valid: 0%..100% or an absolute amount >= 0"
            )
        return cls(amount / 100 if relative else amount, relative)

    def threshold(self, reference: float, higher_is_better: bool = True) -> float:
        """The worst quality still within tolerance of ``reference``."""
        slack = self.amount * abs(reference) if self.relative else self.amount
        return reference - slack if higher_is_better else reference + slack

    def __str__(self) -> str:
        return f"{100 * self.amount:g}%" if self.relative else f"{self.amount:g}"


def _better_or_equal(a: float, b: float, higher_is_better: bool) -> bool:
    return a >= b if higher_is_better else a <= b


def pareto_flags(points: Sequence[FrontierPoint], metric: str, higher_is_better: bool = True) -> list[bool]:
    """True for every point no other point dominates: none is at least as fast and at least as
    good, and strictly better in one. A point whose quality is undefined (nan) or whose latency
    is unknown is never optimal and dominates nothing. Two identical points are both optimal."""
    usable = [math.isfinite(p.latency_ms) and math.isfinite(p.value(metric)) for p in points]
    flags = []
    for i, p in enumerate(points):
        if not usable[i]:
            flags.append(False)
            continue
        q = p.value(metric)
        dominated = any(
            usable[j]
            and o.latency_ms <= p.latency_ms
            and _better_or_equal(o.value(metric), q, higher_is_better)
            and (o.latency_ms < p.latency_ms or o.value(metric) != q)
            for j, o in enumerate(points)
            if j != i
        )
        flags.append(not dominated)
    return flags


def smallest_steps_within(
    nar: Sequence[FrontierPoint], reference: float, tolerance: Tolerance, metric: str, higher_is_better: bool = True
) -> FrontierPoint | None:
    """The masked point with the fewest steps whose quality is within ``tolerance`` of
    ``reference`` (AR's quality), or None when no K reaches it (or AR's quality is undefined)."""
    if not math.isfinite(reference):
        return None
    bar = tolerance.threshold(reference, higher_is_better)
    for p in sorted(nar, key=lambda p: p.steps):
        q = p.value(metric)
        if math.isfinite(q) and _better_or_equal(q, bar, higher_is_better):
            return p
    return None


def frontier(
    points: Sequence[FrontierPoint], metric: str, tolerance: Tolerance, higher_is_better: bool = True
) -> dict[str, Any]:
    """The frontier document (JSON-ready): every point with its ``pareto`` flag, and per
    precision the AR reference, the smallest K within tolerance and the speedup there (AR
    latency / masked latency at that K, both measured in this run)."""
    if not any(metric in p.quality for p in points):
        have = sorted({m for p in points for m in p.quality})
        raise UsageError(
            f"--frontier-metric {metric!r} is not a measured quality metric; valid: {', '.join(have) or 'none'}"
        )
    flags = pareto_flags(points, metric, higher_is_better)
    per_precision = []
    for precision in dict.fromkeys(p.precision for p in points):
        nar = [p for p in points if p.model == NAR and p.precision == precision]
        ar = next((p for p in points if p.model == AR and p.precision == precision), None)
        entry: dict[str, Any] = {
            "precision": precision,
            "ar_quality": None,
            "threshold": None,
            "steps": None,
            "speedup": None,
        }
        if ar is None or not nar:
            entry["reason"] = "no AR baseline at this precision" if ar is None else "no masked point at this precision"
            per_precision.append(entry)
            continue
        ref = ar.value(metric)
        entry["ar_quality"] = ref
        entry["ar_latency_ms"] = ar.latency_ms
        if not math.isfinite(ref):
            entry["reason"] = f"AR's {metric} is undefined"
            per_precision.append(entry)
            continue
        entry["threshold"] = tolerance.threshold(ref, higher_is_better)
        hit = smallest_steps_within(nar, ref, tolerance, metric, higher_is_better)
        if hit is None:
            best = max(nar, key=lambda p: _key(p.value(metric), higher_is_better))
            entry["reason"] = (
                f"no measured K reaches {metric} {_fmt(entry['threshold'])} (AR {_fmt(ref)} within {tolerance}); "
                f"best: K={best.steps} at {_fmt(best.value(metric))}"
            )
        else:
            entry |= {
                "steps": hit.steps,
                "quality": hit.value(metric),
                "latency_ms": hit.latency_ms,
                "speedup": ar.latency_ms / hit.latency_ms if hit.latency_ms > 0 else None,
            }
        per_precision.append(entry)
    return {
        "metric": metric,
        "higher_is_better": higher_is_better,
        "tolerance": {"text": str(tolerance), "amount": tolerance.amount, "relative": tolerance.relative},
        "points": [
            {
                "model": p.model,
                "precision": p.precision,
                "steps": p.steps,
                "latency_ms": p.latency_ms,
                "quality": dict(p.quality),
                "pareto": flag,
            }
            for p, flag in zip(points, flags)
        ],
        "smallest_k": per_precision,
    }


def _key(q: float, higher_is_better: bool) -> float:
    if not math.isfinite(q):
        return -math.inf
    return q if higher_is_better else -q


def _fmt(x: float) -> str:
    return f"{x:.4g}"
