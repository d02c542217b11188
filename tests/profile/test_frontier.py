import math

import pytest

from edgekit.errors import UsageError
from edgekit.profile.frontier import FrontierPoint, Tolerance, frontier, pareto_flags, smallest_steps_within


def pt(model, steps, ms, q, precision="fp32", metric="acc"):
    return FrontierPoint(model, precision, steps, ms, {metric: q})


def test_pareto_marks_exactly_the_undominated_points():
    points = [
        pt("masked", 1, 1.0, 0.50),
        pt("masked", 2, 2.0, 0.70),
        pt("masked", 4, 4.0, 0.65),  # slower and worse than K=2: dominated
        pt("masked", 8, 8.0, 0.90),
        pt("ar", 64, 9.0, 0.90),  # as good as K=8 but slower: dominated
        pt("ar", 64, 20.0, 0.95, precision="int8"),  # slowest but best: optimal
    ]
    assert pareto_flags(points, "acc") == [True, True, False, True, False, True]


def test_pareto_ties_and_undefined_quality():
    same = [pt("masked", 8, 5.0, 0.8), pt("ar", 64, 5.0, 0.8)]
    assert pareto_flags(same, "acc") == [True, True]  # identical points dominate neither
    with_nan = [pt("masked", 1, 1.0, math.nan), pt("masked", 2, 2.0, 0.1)]
    assert pareto_flags(with_nan, "acc") == [False, True]  # nan is never optimal, dominates nothing


def test_pareto_lower_is_better():
    points = [pt("masked", 1, 1.0, 2.0), pt("masked", 2, 2.0, 3.0), pt("ar", 64, 3.0, 1.0)]
    assert pareto_flags(points, "acc", higher_is_better=False) == [True, False, True]
    assert pareto_flags(points, "acc", higher_is_better=True) == [True, True, False]


def test_smallest_k_within_relative_and_absolute_tolerance():
    nar = [
        pt("masked", 16, 16.0, 0.93),
        pt("masked", 2, 2.0, 0.70),
        pt("masked", 8, 8.0, 0.86),
        pt("masked", 4, 4.0, 0.80),
    ]
    assert smallest_steps_within(nar, 0.95, Tolerance.parse("10%"), "acc").steps == 8  # bar 0.855
    assert smallest_steps_within(nar, 0.95, Tolerance.parse("0.2"), "acc").steps == 4  # bar 0.75
    assert smallest_steps_within(nar, 0.95, Tolerance.parse("0"), "acc") is None
    assert smallest_steps_within(nar, math.nan, Tolerance.parse("10%"), "acc") is None
    # lower is better (e.g. NLL): within 10% above AR's 1.0
    nll = [pt("masked", 4, 4.0, 1.3), pt("masked", 8, 8.0, 1.05)]
    assert smallest_steps_within(nll, 1.0, Tolerance.parse("10%"), "acc", higher_is_better=False).steps == 8


def test_relative_tolerance_of_a_negative_metric_uses_its_magnitude():
    # a hook returning -loss: AR -2.0, 10% -> bar -2.2
    assert Tolerance.parse("10%").threshold(-2.0) == pytest.approx(-2.2)
    nar = [pt("masked", 4, 4.0, -2.3), pt("masked", 8, 8.0, -2.1)]
    assert smallest_steps_within(nar, -2.0, Tolerance.parse("10%"), "acc").steps == 8


@pytest.mark.parametrize("bad", ["ten", "-5%", "101%", "nan", ""])
def test_bad_tolerance_is_a_usage_error(bad):
    with pytest.raises(UsageError, match="frontier-tolerance"):
        Tolerance.parse(bad)


def test_frontier_document_per_precision():
    points = [
        pt("masked", 1, 1.0, 0.50),
        pt("masked", 8, 8.0, 0.90),
        pt("ar", 64, 24.0, 0.95),
        pt("masked", 1, 0.5, 0.40, "int8"),
        pt("masked", 8, 5.0, 0.70, "int8"),
        pt("ar", 64, 30.0, 0.94, "int8"),
    ]
    doc = frontier(points, "acc", Tolerance.parse("10%"))
    fp32, int8 = doc["smallest_k"]
    assert fp32["precision"] == "fp32" and fp32["steps"] == 8 and fp32["speedup"] == pytest.approx(3.0)
    assert int8["steps"] is None and int8["speedup"] is None and "best: K=8" in int8["reason"]
    assert [p["pareto"] for p in doc["points"]] == [
        True,
        True,
        True,
        True,
        True,
        False,
    ]  # int8 AR: slower and worse than fp32 AR
    assert doc["tolerance"] == {"text": "10%", "amount": 0.1, "relative": True}


def test_frontier_without_ar_or_with_unknown_metric():
    doc = frontier([pt("masked", 8, 8.0, 0.9)], "acc", Tolerance.parse("5%"))
    assert doc["smallest_k"][0]["reason"] == "no AR baseline at this precision"
    with pytest.raises(UsageError, match="valid: acc"):
        frontier([pt("masked", 8, 8.0, 0.9)], "validity", Tolerance.parse("5%"))
