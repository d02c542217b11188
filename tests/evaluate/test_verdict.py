"""Per-metric verdicts from thresholds and baselines."""

from __future__ import annotations

import math
from types import MappingProxyType

from edgekit.evaluate.thresholds import Baseline, Rule, Thresholds
from edgekit.evaluate.verdict import compare, judge

RULES = Thresholds(
    "masked",
    MappingProxyType(
        {
            "agree": Rule("min", 0.9, tolerance=0.0, floor=0.02),
            "kl": Rule("max", 0.01, tolerance=1.0, floor=0.001),
            "info": Rule("min", None),
            "snr": Rule("min", 30.0, tolerance=0.0, floor=3.0),
        }
    ),
)


def _baseline(**metrics):
    return Baseline("base.json", MappingProxyType({}), MappingProxyType(metrics))


def test_thresholds_min_and_max():
    v = compare({"agree": 0.95, "kl": 0.02, "info": 0.1}, RULES)
    rows = {r.metric: r for r in v.rows}
    assert rows["agree"].passed and rows["agree"].passed_threshold is True
    assert not rows["kl"].passed and rows["kl"].reason == "0.02 > max 0.01"
    assert rows["info"].passed and rows["info"].passed_threshold is None and not rows["info"].gated
    assert not v.passed and v.failed == ["kl"]
    assert judge("agree", 0.85, RULES).reason == "0.85 < min 0.9"
    assert judge("agree", 0.9, RULES).passed  # the bound itself passes


def test_nan_fails_a_gated_metric_and_none_passes():
    assert not judge("agree", float("nan"), RULES).passed
    assert judge("info", float("nan"), RULES).passed  # not gated
    row = judge("agree", None, RULES)  # undefined on both variants
    assert row.passed and row.value is None and not row.gated
    assert judge("snr", math.inf, RULES).passed


def test_baseline_regressions_fail_beyond_tolerance_and_pass_within():
    base = _baseline(agree=0.98, kl=0.004, snr=40.0, info=0.5)
    rows = {r.metric: r for r in compare({"agree": 0.97, "kl": 0.0075, "snr": 38.0, "info": 0.1}, RULES, base).rows}
    assert rows["agree"].passed_baseline is True and rows["agree"].allowed_regression == 0.02
    assert rows["kl"].passed_baseline is True  # +0.0035 <= 100 % of 0.004
    assert rows["snr"].passed_baseline is True  # -2 dB <= 3 dB floor
    assert rows["info"].passed_baseline is None  # no tolerance: not compared
    rows = {r.metric: r for r in compare({"agree": 0.95, "kl": 0.0085, "snr": 36.0}, RULES, base).rows}
    # Every value still meets its absolute threshold; the baseline catches the regression.
    assert all(r.passed_threshold for r in rows.values())
    assert not rows["agree"].passed and rows["agree"].reason == "regressed by 0.03 vs baseline 0.98 (allowed 0.02)"
    assert not rows["kl"].passed and "regressed by 0.0045 vs baseline 0.004 (allowed 0.004)" in rows["kl"].reason
    assert not rows["snr"].passed
    # Improvements never fail.
    assert compare({"agree": 1.0, "kl": 0.0, "snr": math.inf}, RULES, base).passed


def test_threshold_and_baseline_failures_are_both_reported():
    row = judge("kl", 0.05, RULES, _baseline(kl=0.001))
    assert not row.passed and row.passed_threshold is False and row.passed_baseline is False
    assert row.reason.startswith("0.05 > max 0.01; regressed by 0.049")


def test_infinite_baseline_and_value_is_no_regression():
    row = judge("snr", math.inf, RULES, _baseline(snr=math.inf))
    assert row.passed and row.passed_baseline is True
    assert not judge("snr", 60.0, RULES, _baseline(snr=math.inf)).passed  # from exact to 60 dB: beyond the 3 dB floor
