"""Metrics + thresholds (+ a baseline) -> one pass/fail row per metric and an overall verdict."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any

from edgekit.evaluate.thresholds import Baseline, Thresholds, allowed_regression


@dataclass(frozen=True)
class Row:
    """One metric's judgement. ``gated``: a threshold or a baseline applied to it; ``reason``
    says why it failed (empty when it passed)."""

    metric: str
    value: float | None  # None: undefined on both variants (e.g. NLL when no sequence is valid)
    bound: str  # min | max: which side of the threshold passes
    threshold: float | None
    unit: str
    baseline: float | None  # the baseline's value, when one was given and has this metric
    allowed_regression: float | None  # vs the baseline, absolute
    passed_threshold: bool | None  # None = no threshold
    passed_baseline: bool | None  # None = not compared with a baseline
    passed: bool
    reason: str

    @property
    def gated(self) -> bool:
        return self.passed_threshold is not None or self.passed_baseline is not None

    def to_json(self) -> dict[str, Any]:
        return asdict(self) | {"gated": self.gated}


@dataclass(frozen=True)
class Verdict:
    rows: tuple[Row, ...]

    @property
    def passed(self) -> bool:
        return all(r.passed for r in self.rows)

    @property
    def failed(self) -> list[str]:
        return [r.metric for r in self.rows if not r.passed]


def _fmt(x: float) -> str:
    return f"{x:.4g}"


def _judge_threshold(value: float, bound: str, threshold: float) -> tuple[bool, str]:
    if math.isnan(value):
        return False, f"value is nan (threshold {bound} {_fmt(threshold)})"
    ok = value >= threshold if bound == "min" else value <= threshold
    sign = "<" if bound == "min" else ">"
    return ok, "" if ok else f"{_fmt(value)} {sign} {bound} {_fmt(threshold)}"


def _judge_baseline(value: float, bound: str, base: float, allowed: float) -> tuple[bool, str]:
    if math.isnan(value):
        return False, f"value is nan (baseline {_fmt(base)})"
    if value == base:  # also inf == inf, where the difference would be nan
        return True, ""
    regression = (base - value) if bound == "min" else (value - base)
    ok = not (regression > allowed)
    return ok, "" if ok else f"regressed by {_fmt(regression)} vs baseline {_fmt(base)} (allowed {_fmt(allowed)})"


def judge(metric: str, value: float | None, thresholds: Thresholds, baseline: Baseline | None = None) -> Row:
    rule = thresholds.rule(metric)
    bound = rule.bound if rule else "min"
    threshold = rule.threshold if rule else None
    unit = rule.unit if rule else ""
    if value is None:
        return Row(metric, None, bound, threshold, unit, None, None, None, None, True, "")
    value = float(value)
    passed_t = reason_t = None
    if threshold is not None:
        passed_t, reason_t = _judge_threshold(value, bound, threshold)
    base = allowed = passed_b = reason_b = None
    if baseline is not None and rule is not None and metric in baseline.metrics:
        base = baseline.metrics[metric]
        allowed = allowed_regression(rule, base)
        if allowed is not None and not math.isnan(base):
            passed_b, reason_b = _judge_baseline(value, bound, base, allowed)
    passed = passed_t is not False and passed_b is not False
    reason = "; ".join(r for r in (reason_t, reason_b) if r)
    return Row(metric, value, bound, threshold, unit, base, allowed, passed_t, passed_b, passed, reason)


def compare(metrics: Mapping[str, float | None], thresholds: Thresholds, baseline: Baseline | None = None) -> Verdict:
    """One ``Row`` per metric, in the order of ``metrics``."""
    return Verdict(tuple(judge(name, value, thresholds, baseline) for name, value in metrics.items()))
