"""quantize states its plan before it starts and how far each long step is (plan.py): the ETA
lines come from a stand-in clock, never a timed assertion."""

from __future__ import annotations

import shutil

import pytest

from edgekit.quantize import QuantizeConfig, quantize_bundle
from edgekit.quantize.plan import Eta, Plan, clock_text


class FakeClock:
    def __init__(self):
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_eta_speaks_at_most_every_interval_from_the_mean_pace():
    clock, said = FakeClock(), []
    eta = Eta("held-out FP32 decode", 10, said.append, clock=clock, interval=10.0)
    for done, now in ((1, 4.0), (2, 8.0), (3, 12.0), (4, 16.0), (5, 20.0), (10, 40.0)):
        clock.now = now
        eta(done)
    # 12 s: the first line (3 of 10 at 4 s each: 28 s left); 16 s: too soon; 20 s: 8 s after... no, 8 < 10
    assert said == ["held-out FP32 decode 3/10: 0:12 so far, about 0:28 left"]
    clock.now = 32.0
    eta(8)
    assert said[-1] == "held-out FP32 decode 8/10: 0:32 so far, about 0:08 left"


def test_the_plan_counts_the_decodes_and_prices_them_from_one():
    plan = Plan(calibration=4, heldout=8, per_candidate=16, speed=12)
    e = plan.estimate(2.0)
    assert e == {"fp32_decodes_s": 24.0, "calibrate_s": 8.0, "per_candidate_s": 32.0, "speed_s": 24.0}
    text = plan.describe(2.0)
    assert "4 calibration + 8 held-out FP32 decodes (2.0 s each)" in text and clock_text(64.0) in text
    assert clock_text(3725) == "1:02:05"


def test_the_plan_says_the_fallback_form_may_add_candidates():
    """cpu profile: where weight-only fallbacks miss the budget, the form tries weight-only with up
    to FORM_EXTRA more layers, one candidate each: the plan says they may follow, and counts them."""
    from edgekit.quantize.cpu.form import FORM_EXTRA

    plan = Plan(calibration=4, heldout=8, per_candidate=16, speed=12, form_extra=FORM_EXTRA)
    assert f"up to {FORM_EXTRA} more candidates may follow for the fallbacks' form" in plan.describe(2.0)
    assert plan.to_json(2.0)["form_extra_candidates"] == FORM_EXTRA
    assert "fallbacks' form" not in Plan(4, 8, 16, 12).describe(2.0)


def test_the_plan_says_method_auto_may_calibrate_and_judge_percentile_ranges():
    """--method auto: where minmax's all-INT8 model misses the budget, one more calibration pass and
    one more candidate follow (Sana-600M: 5:30 of percentile calibration, then two passes over the
    recorded calls, and 3:10 of INT8 decodes the plan did not mention). One pass now: the minmax
    pass keeps the ranges the histograms are binned within."""
    plan = Plan(calibration=4, heldout=8, per_candidate=16, speed=12, method_alternative=True)
    text = plan.describe(2.0)
    assert f"about {clock_text(8.0 + 32.0)} more to calibrate and judge percentile ranges (--method auto)" in text
    assert plan.to_json(2.0)["method_extra_candidates"] == 1
    assert "percentile" not in Plan(4, 8, 16, 12).describe(2.0)
    assert Plan(4, 8, 16, 12).to_json(2.0)["method_extra_candidates"] == 0
    # in fetch groups the percentile pass runs more than one forward a call (calibrator.histogram_forwards)
    grouped = Plan(4, 8, 16, 12, method_alternative=True, histogram_forwards=2.5)
    assert f"about {clock_text(8.0 * 2.5 + 32.0)} more to calibrate" in grouped.describe(2.0)
    assert grouped.to_json(2.0)["histogram_forwards"] == 2.5


def test_an_emulated_device_s_int8_decodes_are_not_priced_as_fp32_ones():
    """qnn: a held-out decode on the HTP emulator takes minutes where the FP32 one takes seconds;
    the plan said "about 0:20 more for each fallback"."""
    why = "the HTP backend is emulated on this CPU"
    plan = Plan(calibration=4, heldout=8, per_candidate=16, speed=0, emulated=why)
    text = plan.describe(2.0)
    assert "4 calibration + 8 held-out FP32 decodes (2.0 s each)" in text and clock_text(32.0) in text
    assert "16 INT8 decodes per candidate on an emulated device" in text and why in text
    assert "until the first candidate" not in text and "for each fallback" not in text
    assert plan.to_json(2.0)["int8_decodes_emulated"] == why
    assert "int8_decodes_emulated" not in Plan(4, 8, 16, 12).to_json(2.0)


@pytest.mark.parametrize("kind", ["masked", "flow"])
def test_quantize_says_its_plan_and_records_what_it_cost_in_fp32_decodes(kind, tiny_bundles, tmp_path):
    said = []
    s = quantize_bundle(
        shutil.copytree(tiny_bundles[kind], tmp_path / kind),
        QuantizeConfig(calib_samples=4, eval_samples=4),
        progress=said.append,
    )
    batch = 2
    assert any(line.startswith("plan: 2 calibration + 2 held-out FP32 decodes") for line in said), said
    plan = s["plan"]
    assert plan["calibration_decodes"] == 4 // batch and plan["heldout_decodes"] == 4 // batch
    assert plan["int8_decodes_per_candidate"] == 2 * plan["heldout_decodes"]
    assert plan["fp32_decode_s"] > 0
    assert plan["method_extra_candidates"] == 1  # --method auto, the default, with the search
    # the unit is a warm FP32 decode: (under 5 held-out decodes) the speed timing's median where it
    # ran, else the first decode
    assert plan["heldout_decodes"] < 5
    unit = s["speed"]["fp32_ms_per_decode"] / 1000 if s["speed"].get("measured") else plan["fp32_decode_s"]
    assert s["fp32_decode_unit"]["seconds"] == pytest.approx(unit)
    assert s["fp32_decodes"] == pytest.approx(s["timing_s"]["total_s"] / unit, rel=0.01)
    # each held-out FP32 decode's time is kept; under 3 of them, no median beside the unit
    assert len(s["heldout_fp32_decode_s"]) == plan["heldout_decodes"] and min(s["heldout_fp32_decode_s"]) > 0
    assert "heldout_median_s" not in s["fp32_decode_unit"]


def test_five_held_out_decodes_or_more_are_the_unit_and_the_speed_timing_is_counted_beside():
    """The held-out FP32 decodes' median is the unit from HELDOUT_UNIT_MIN of them (whole decodes
    as deployed: the steadier); the speed timing's median where fewer, and the first decode where
    neither; the run is counted in each unit it has."""
    from edgekit.quantize.record import HELDOUT_UNIT_MIN, fp32_decodes

    assert HELDOUT_UNIT_MIN == 5
    summary = {
        "speed": {"measured": True, "fp32_ms_per_decode": 12_000.0},
        "plan": {"fp32_decode_s": 20.0},
        "heldout_fp32_decode_s": [16.0, 13.0, 13.5, 12.5, 14.0],  # the first pays the session's first run
    }
    out = fp32_decodes(summary, 780.0)
    unit = out["fp32_decode_unit"]
    assert out["fp32_decodes"] == pytest.approx(57.8) and unit["seconds"] == 13.5
    assert unit["from"].startswith("held-out FP32 decodes (median of 5")
    assert unit["heldout_median_s"] == 13.5 and unit["heldout_decodes"] == 5
    assert unit["fp32_decodes_by_heldout"] == pytest.approx(57.8)
    assert unit["speed_timing_s"] == 12.0 and unit["fp32_decodes_by_speed_timing"] == 65.0
    # four held-out decodes: the speed timing is the unit, their median beside it
    out = fp32_decodes(summary | {"heldout_fp32_decode_s": [13.0] * 4}, 780.0)
    assert out["fp32_decodes"] == 65.0 and out["fp32_decode_unit"]["from"] == "speed timing (warm median)"
    assert out["fp32_decode_unit"]["fp32_decodes_by_heldout"] == 60.0
    # no speed timing (an emulated device) and 3 held-out decodes: the first decode, the median beside
    out = fp32_decodes(
        {"speed": {"measured": False}, "plan": {"fp32_decode_s": 20.0}, "heldout_fp32_decode_s": [13.0] * 3}, 780.0
    )
    assert out["fp32_decodes"] == 39.0 and out["fp32_decode_unit"]["fp32_decodes_by_heldout"] == 60.0
    assert "speed_timing_s" not in out["fp32_decode_unit"]


def test_the_plan_prices_a_decode_without_the_session_load(tiny_bundles, tmp_path, monkeypatch):
    """Opening the FP32 session (seconds for a 2 GiB model) happens before the clock starts: a
    plan priced from load + decode overstated every step by the load (aMUSEd-256: 35 s "per
    decode" against 18 s) and understated ``fp32_decodes``."""
    import types

    from edgekit.quantize import stage

    clock = FakeClock()
    real = stage.OrtRuntime

    def ticking() -> float:  # every reading moves the clock a little: decodes take time
        clock.now += 0.001
        return clock.now

    def slow_open(*args, **kwargs):
        clock.now += 1000.0  # the load, in stand-in seconds
        return real(*args, **kwargs)

    monkeypatch.setattr(stage, "time", types.SimpleNamespace(perf_counter=ticking))
    monkeypatch.setattr(stage, "OrtRuntime", slow_open)
    s = quantize_bundle(
        shutil.copytree(tiny_bundles["masked"], tmp_path / "masked"),
        QuantizeConfig(calib_samples=4, eval_samples=4, fallback=False),
    )
    assert 0 < s["plan"]["fp32_decode_s"] < 1000.0, s["plan"]


def test_every_long_step_says_how_far_it_is(tiny_bundles, tmp_path, monkeypatch):
    """Calibration, the sensitivity passes, the fallback-form and INT8-vs-FP32 timings each say
    "done/total, about T left" (at most every 10 s; here every unit: the interval set to 0)."""
    import time

    from edgekit.quantize import plan

    monkeypatch.setattr(plan.Eta.__init__, "__defaults__", (time.perf_counter, 0.0))
    said: list[str] = []
    quantize_bundle(
        shutil.copytree(tiny_bundles["masked"], tmp_path / "masked"),
        QuantizeConfig(calib_samples=4, eval_samples=4, budget={"lockstep_token_agreement": 1.01}, max_fallback=1),
        progress=said.append,
    )
    # minmax calibration is no step of its own: its ranges were kept as the FP32 decodes ran
    assert any("kept as the decodes ran" in line for line in said)
    for step in (
        "noise each node adds: graph run 1/",
        "output SQNR with one node INT8: node 1/",
        "time INT8 against FP32: decode 1/",
    ):
        assert any(line.startswith(step) and "about" in line for line in said), (step, said)


def test_quantize_keeps_its_recorded_calls_on_disk_and_reads_them_back(tiny_bundles, tmp_path, monkeypatch):
    """The calibration recording (an AR model's calls hold the KV cache: 1.5 GiB at 256 tokens,
    held in memory to the end of the run) waits on disk in the run's scratch folder."""
    import edgekit.quantize.stage as stage
    from edgekit.runtimes.recording import SpilledFeeds

    made = []
    real = stage.record_trajectories

    def spy(*args, **kwargs):
        made.append(real(*args, **kwargs))
        return made[-1]

    monkeypatch.setattr(stage, "record_trajectories", spy)
    s = quantize_bundle(
        shutil.copytree(tiny_bundles["flow"], tmp_path / "flow"), QuantizeConfig(calib_samples=4, eval_samples=4)
    )
    (traj,) = made
    assert isinstance(traj.feeds, SpilledFeeds) and len(traj.feeds) == s["calibration"]["feeds"] > 0
    assert not traj.feeds.folder.exists()  # gone with the run's scratch folder
