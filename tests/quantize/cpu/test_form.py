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


# ---- weight-only with one or two more fallbacks (form.widen) ---------------------------------------
S = ["a", "b", "c", "d", "e"]  # the search's INT8 nodes after its fallbacks; "c", then "e", are ranked next


def _widened(holds, wo_ms_wider=(99,), max_fallback=None, wo_s_holds=False):
    """``form_record`` on a weight-only form of S that ties with FP32-S (as fast within 3 %) and
    holds the budget where ``wo_s_holds``; weight-only with extra layers holds it for the sets in
    ``holds`` (frozensets of the extra layers) and times ``wo_ms_wider`` against FP32-S's 100 ms.
    Returns (record, outcome, measured models, progress lines, warnings)."""
    from edgekit.quantize.cpu.form import form_record, next_fallbacks, widen
    from edgekit.quantize.cpu.search import BudgetOutcome

    measured, said, warnings = [], [], []

    def build(nodes):  # a weight-only candidate is named by the layers it adds to S
        return "wo+" + ",".join(n for n in S if n not in nodes)

    def measure(model):
        measured.append(model)
        extra = frozenset(x for x in model.removeprefix("wo+").split(",") if x)
        return {"snr_db": 40.0 if (extra in holds or (not extra and wo_s_holds)) else 12.0, "model": model}

    run = SimpleNamespace(
        warn=warnings.append,
        judge=lambda m: (m["snr_db"] >= 20, [{"key": "snr_db", "value": m["snr_db"], "limit": 20}]),
    )
    outcome = BudgetOutcome(
        True,
        {"snr_db": 25.0},
        ["fp32-S ok"],
        list(S),
        fallback=[{"node": f"f{i}", "label": f"F{i}", "reason": "search"} for i in range(4)],
        ranking={"c": {"isolated_output_sqnr_db": 21.5}, "e": {"added_sqnr_db": 30.0}},
        next_up=["c", "e", "a"],
    )
    extra = next_fallbacks(outcome.next_up, len(outcome.fallback), max_fallback)
    timed = []

    def time_against(model):
        timed.append(model)
        return _decision((0.3,), list(wo_ms_wider))

    def wider():
        return widen(
            extra,
            outcome.quantized,
            build,
            measure,
            run.judge,
            time_against,
            lambda model: {"float": 44 << 20, "weight-only": 12 << 20},
            said.append,
            {"c": "blocks.0.mlp.fc", "e": "head"},
        )

    form = form_record(
        _decision((0.3,), [99]), build(S), outcome, run, measure, "openvino", SIZES, wider if extra else None
    )
    return form, outcome, measured, said, warnings, timed


def test_weight_only_that_holds_the_budget_with_s_tries_no_more():
    form, outcome, measured, said, _, timed = _widened(holds=set(), wo_s_holds=True)
    assert form["chosen"] == "weight-only" and form["model"] == "wo+" and form["budget"] == "met"
    assert measured == ["wo+"] and timed == [] and said == [] and "wider" not in form
    assert outcome.quantized == S and len(outcome.fallback) == 4


def test_weight_only_with_the_next_ranked_layer_that_holds_the_budget_and_ties_is_kept():
    form, outcome, measured, said, warnings, timed = _widened(holds={frozenset({"c"})})
    assert measured == ["wo+", "wo+c"] and timed == ["wo+c"]  # only the set that held it is timed
    assert form["checks"][0]["value"] == 12.0  # weight-only with S: the budget's numbers it missed by
    assert form["chosen"] == "weight-only" and form["model"] == "wo+c" and form["budget"] == "missed"
    wider = form["wider"]
    assert [(t["extra"], t["budget"]) for t in wider["tried"]] == [(["c"], "met")]
    assert wider["tried"][0]["checks"][0]["value"] == 40.0  # the budget's verdict, with its numbers
    assert wider["verdict"] == "faster" and wider["timing"]["timings"] and wider["weight_bytes"]["float"] == 44 << 20
    assert "missed the budget; weight-only with blocks.0.mlp.fc held the budget" in form["why"]
    assert "as fast within 3%" in form["why"] and "32.0 MiB smaller" in form["why"]
    # the manifest's fallback list names the final set: the search's four, then the one the form added
    assert [f["node"] for f in outcome.fallback] == ["f0", "f1", "f2", "f3", "c"]
    added = outcome.fallback[-1]
    assert added["label"] == "blocks.0.mlp.fc" and added["isolated_output_sqnr_db"] == 21.5
    assert added["reason"].startswith("budget fallback #5: alone in INT8 it leaves 21.5 dB")
    assert "fallback form" in added["reason"]
    assert outcome.quantized == ["a", "b", "d", "e"] and outcome.metrics["model"] == "wo+c"
    assert outcome.checks[0]["value"] == 40.0
    assert any("trying weight-only with 1 more: blocks.0.mlp.fc" in line for line in said)
    assert warnings == []


def test_weight_only_tries_a_second_layer_when_the_first_is_not_enough():
    form, outcome, measured, said, _, timed = _widened(holds={frozenset({"c", "e"})}, wo_ms_wider=(80,))
    assert measured == ["wo+", "wo+c", "wo+c,e"] and timed == ["wo+c,e"]
    assert [(t["labels"], t["budget"]) for t in form["wider"]["tried"]] == [
        (["blocks.0.mlp.fc"], "missed"),
        (["blocks.0.mlp.fc", "head"], "met"),
    ]
    assert form["chosen"] == "weight-only" and form["model"] == "wo+c,e" and "ran faster here (0.80x" in form["why"]
    assert [f["node"] for f in outcome.fallback][-2:] == ["c", "e"] and outcome.quantized == ["a", "b", "d"]
    assert outcome.fallback[-1]["reason"].startswith("budget fallback #6: adds noise at 30.0 dB")


def test_weight_only_that_misses_with_every_extra_layer_leaves_fp32_s():
    form, outcome, measured, _, _, timed = _widened(holds=set())
    assert measured == ["wo+", "wo+c", "wo+c,e"] and timed == []  # FORM_EXTRA = 2: never a third
    assert form["chosen"] == "float" and "model" not in form
    assert [t["budget"] for t in form["wider"]["tried"]] == ["missed", "missed"]
    assert "with up to 2 more layer(s) too: FP32-S" in form["why"]
    assert outcome.quantized == S and len(outcome.fallback) == 4 and outcome.metrics == {"snr_db": 25.0}


def test_weight_only_with_more_layers_that_runs_surely_slower_leaves_fp32_s():
    form, outcome, measured, _, _, timed = _widened(holds={frozenset({"c"}), frozenset({"c", "e"})}, wo_ms_wider=(130,))
    assert measured == ["wo+", "wo+c"] and timed == ["wo+c"]  # one more layer is no faster: not tried
    assert form["chosen"] == "float" and form["wider"]["verdict"] == "slower"
    assert "ran 1.30x FP32-S's time per forward: FP32-S" in form["why"]
    assert outcome.quantized == S and [f["node"] for f in outcome.fallback] == ["f0", "f1", "f2", "f3"]
    assert outcome.checks == ["fp32-S ok"]


@pytest.mark.parametrize(("max_fallback", "tried"), [(None, 2), (6, 2), (5, 1), (4, 0), (3, 0)])
def test_the_form_never_adds_fallbacks_past_max_fallback(max_fallback, tried):
    form, outcome, measured, _, _, _ = _widened(holds=set(), max_fallback=max_fallback)
    assert len(measured) == 1 + tried and len(form.get("wider", {}).get("tried", [])) == tried
    assert form["chosen"] == "float"


def test_next_fallbacks_follow_the_search_s_ranking():
    from edgekit.quantize.cpu.form import FORM_EXTRA, next_fallbacks

    assert next_fallbacks(["c", "e", "a"], 4, None) == ["c", "e"][:FORM_EXTRA]
    assert next_fallbacks(["c"], 4, None) == ["c"] and next_fallbacks([], 4, None) == []
    assert next_fallbacks(["c", "e"], 4, 5) == ["c"] and next_fallbacks(["c", "e"], 5, 5) == []
