"""The form of the cpu profile's budget fallbacks (``cpu.form.form_record``, on stand-in timings:
nothing is timed for real): weight-only, the smaller, unless it is surely slower than FP32 or
misses the budget."""

from __future__ import annotations

from types import SimpleNamespace

import pytest


def _decision(loads, wo_ms):
    """Weight-only against float fallbacks on a stand-in host (float: 100 ms a forward)."""
    from edgekit.probes.speed import decide
    from tests.fakes.host import StandInHost

    host = StandInHost(loads=loads)
    fns = {"float": host.call("float", [100]), "weight-only": host.call("weight-only", wo_ms)}
    return decide(fns, 5, pair=lambda t: ("weight-only", "float"), warmup=0, probe=host.probe)


def _judged(passes: bool = True):
    """``form_record`` with a budget that ``passes`` (or not) on whatever is measured: (record
    function, warnings, measured models)."""
    from edgekit.quantize.cpu.form import form_record

    warnings, measured = [], []
    run = SimpleNamespace(
        warn=warnings.append, judge=lambda metrics: (passes, ["ok" if passes else "snr_db 12.0 < 20"])
    )

    def measure(model):
        measured.append(model)
        return {"snr_db": 40.0 if passes else 12.0}

    return (
        lambda decision, outcome, sizes: form_record(decision, "wo.onnx", outcome, run, measure, sizes=sizes),
        warnings,
        measured,
    )


SIZES = {"float": 44 << 20, "weight-only": 11 << 20}  # four [2816, 1024] fallbacks, FP32 and INT8


@pytest.mark.parametrize(
    "loads,wo_ms,chosen,why,warned",
    [
        # surely faster, by more than FORM_MARGIN: the speed win, measured against the budget, kept
        ((0.3,), [80], "weight-only", "ran faster here and kept the budget", None),
        # surely faster, by less than FORM_MARGIN: as fast, and smaller: measured, kept
        ((0.3,), [99], "weight-only", "as fast within 3% (weight-only 0.99x", None),
        # a busy host, timed again: the timing cannot tell, the smaller form is kept, said once
        ((3.1,), [80], "weight-only", "as fast within noise (load 3.1 on 2 cores", "kept weight-only fallbacks"),
        # the spread is wider than the difference: as fast within noise
        ((0.3,), [90, 110, 95, 105, 100], "weight-only", "as fast within noise (spread", "kept weight-only"),
        # surely slower: FP32 fallbacks, and the budget is not asked
        ((0.3,), [130], "float", "FP32 fallbacks ran faster here (weight-only 1.30x", None),
    ],
)
def test_the_fallback_form_is_weight_only_unless_surely_slower(loads, wo_ms, chosen, why, warned):
    decision = _decision(loads, wo_ms)
    record, warnings, measured = _judged()
    outcome = SimpleNamespace(metrics=None, checks=None)
    form = record(decision, outcome, SIZES)
    assert form["chosen"] == chosen and form["verdict"] == decision.verdict and form["timing"]["timings"]
    assert why in form["why"] and form["weight_bytes"] == SIZES
    # the budget is asked of weight-only wherever it is kept, and never where it is surely slower
    assert measured == (["wo.onnx"] if chosen == "weight-only" else [])
    if chosen == "weight-only":
        assert form["model"] == "wo.onnx" and (outcome.metrics, outcome.checks) == ({"snr_db": 40.0}, ["ok"])
    else:
        assert "model" not in form and outcome.metrics is None
    if "as fast" in why:
        assert "33.0 MiB smaller; kept the budget" in form["why"]
    assert len(warnings) == (0 if warned is None else 1)
    if warned:
        assert "within noise after 3 rounds" in warnings[0] and warned in warnings[0] and "\n" not in warnings[0]


@pytest.mark.parametrize(
    "loads,wo_ms,warned",
    [
        ((3.1,), [80], True),  # within noise (a busy host)
        ((0.3,), [90, 110, 95, 105, 100], True),  # within noise (the spread)
        ((0.3,), [99], False),  # faster by less than FORM_MARGIN
        ((0.3,), [80], False),  # surely faster: the speed win needs the budget too
    ],
)
def test_a_weight_only_form_that_misses_the_budget_leaves_the_fallbacks_fp32(loads, wo_ms, warned):
    decision = _decision(loads, wo_ms)
    record, warnings, measured = _judged(passes=False)
    outcome = SimpleNamespace(metrics={"snr_db": 30.0}, checks=["fp32 fallbacks ok"])
    form = record(decision, outcome, SIZES)
    assert form["chosen"] == "float" and "model" not in form and measured == ["wo.onnx"]
    assert "missed the budget" in form["why"]
    assert (outcome.metrics, outcome.checks) == ({"snr_db": 30.0}, ["fp32 fallbacks ok"])  # the FP32 form's
    assert len(warnings) == (1 if warned else 0)
    if warned:
        assert warnings[0].endswith("kept FP32 fallbacks (weight-only missed the budget)")


def test_a_tie_with_nothing_to_save_keeps_the_fp32_fallbacks_unmeasured():
    record, warnings, measured = _judged()
    outcome = SimpleNamespace(metrics=None, checks=None)
    form = record(_decision((0.3,), [99]), outcome, {"float": 1000, "weight-only": 1000})
    assert form["chosen"] == "float" and measured == [] and "no smaller" in form["why"]
