"""Speed decisions that say how they were measured (issue #44.3), on a stand-in clock and load:
a busy host is measured again, then said once and the safe choice kept; a quiet host with a clear
difference decides; a spread not below the difference is within noise. No time is asserted."""

from __future__ import annotations

import json

import pytest

from edgekit.probes.speed import (
    EXTRA_ROUNDS,
    MIN_SAMPLES,
    Decision,
    Timing,
    clear,
    compare,
    decide,
    relative_spread,
)
from tests.fakes.host import StandInHost


def _timing(samples, load=0.5, own=1.0, cores=2) -> Timing:
    window = {"load_before": load, "load_after": load, "own_cores": own, "cores": cores, "cpu_class": "avx2"}
    return Timing.of(samples, window)


def test_a_quiet_host_and_a_clear_difference_decide_in_one_round():
    host = StandInHost(loads=(0.3,))
    fns = {"fp32": host.call("fp32", [100, 102, 98]), "int8": host.call("int8", [70, 71, 69])}
    d = decide(fns, rounds=5, pair=lambda t: ("int8", "fp32"), probe=host.probe)
    assert (d.verdict, d.sure, d.rounds, d.unsure, d.earlier) == ("faster", True, 1, (), ())
    assert d.ratio == pytest.approx(70 / 100) and d.speedup == pytest.approx(100 / 70)
    assert host.calls == {"fp32": 6, "int8": 6}  # one warm-up round, five timed
    t = d.timings["int8"]
    assert (t.n, t.median_ms, t.cores, t.cpu_class, t.load_before, t.load_after) == (5, 70.0, 2, "avx2", 0.3, 0.3)
    assert t.own_cores == pytest.approx(1.0)  # the stand-in process used one core while the clock moved


def test_early_stops_a_clear_difference_after_three_rounds_and_not_a_close_one():
    """``early``: whole decodes are costly, so a round stops after MIN_SAMPLES when the difference
    is CLEAR_MARGIN times the spread; a close one is timed to the end of its rounds."""
    host = StandInHost(loads=(0.3,))
    fns = {"fp32": host.call("fp32", [100, 102, 98]), "int8": host.call("int8", [40, 41, 39])}
    d = decide(fns, rounds=5, pair=lambda t: ("int8", "fp32"), probe=host.probe, early=True)
    assert (d.verdict, d.rounds) == ("faster", 1) and d.timings["int8"].n == MIN_SAMPLES
    assert host.calls == {"fp32": 1 + MIN_SAMPLES, "int8": 1 + MIN_SAMPLES}
    assert clear(d)

    host = StandInHost(loads=(0.3,))
    fns = {"fp32": host.call("fp32", [100]), "int8": host.call("int8", [92, 90, 99, 94, 97, 92])}  # 1st: warm-up
    d = decide(fns, rounds=5, pair=lambda t: ("int8", "fp32"), probe=host.probe, early=True)
    assert d.timings["int8"].n == 5 and host.calls == {"fp32": 6, "int8": 6}  # not clear at 3: all five
    assert not clear(d)
    # without early, a clear difference is timed to the end too
    host = StandInHost(loads=(0.3,))
    fns = {"fp32": host.call("fp32", [100, 102, 98]), "int8": host.call("int8", [40, 41, 39])}
    assert decide(fns, rounds=5, pair=lambda t: ("int8", "fp32"), probe=host.probe).timings["int8"].n == 5


def test_a_busy_host_is_measured_again_then_said_and_left_to_the_caller():
    host = StandInHost(loads=(3.1,), own_cores=1.0)
    fns = {"fp32": host.call("fp32", [100]), "int8": host.call("int8", [70])}
    d = decide(fns, rounds=5, pair=lambda t: ("int8", "fp32"), probe=host.probe)
    assert d.verdict == "within noise" and not d.sure
    assert d.rounds == 1 + EXTRA_ROUNDS and len(d.earlier) == EXTRA_ROUNDS  # bounded: no fourth round
    assert host.calls == {"fp32": 1 + 5 * (1 + EXTRA_ROUNDS), "int8": 1 + 5 * (1 + EXTRA_ROUNDS)}  # warm-up once
    assert d.unsure == ("load 3.1 on 2 cores (2.1 of it other processes)",)
    assert d.ratio == pytest.approx(0.7)  # the measured figure is still recorded


def test_a_load_that_goes_away_is_measured_again_and_then_decided():
    # readings: before and after the first round busy, quiet from the second round on
    host = StandInHost(loads=(3.4, 3.4, 0.4))
    fns = {"fp32": host.call("fp32", [100]), "int8": host.call("int8", [70])}
    d = decide(fns, rounds=5, pair=lambda t: ("int8", "fp32"), probe=host.probe)
    assert (d.verdict, d.rounds) == ("faster", 2) and d.earlier == ("load 3.4 on 2 cores (2.4 of it other processes)",)


def test_this_process_s_own_threads_do_not_make_the_host_busy():
    """The load average counts this process's threads too: 2.4 on 2 cores while it used 2 of them
    is 0.4 of other work, not a busy host."""
    host = StandInHost(loads=(2.4,), own_cores=2.0)
    d = decide({"a": host.call("a", [50]), "b": host.call("b", [100])}, rounds=5, probe=host.probe)
    assert (d.verdict, d.rounds) == ("faster", 1)


def test_a_spread_wider_than_the_difference_is_within_noise():
    host = StandInHost()
    # per round: a/b ratios 0.90, 1.10, 0.95, 1.05, 1.00 -> the difference is inside their spread
    fns = {"a": host.call("a", [90, 110, 95, 105, 100]), "b": host.call("b", [100])}
    d = decide(fns, rounds=5, probe=host.probe, warmup=0)
    assert d.verdict == "within noise" and d.rounds == 1 + EXTRA_ROUNDS
    assert len(d.unsure) == 1 and d.unsure[0].startswith("spread 10.0% > difference ")


def test_interleaving_cancels_load_that_hits_both_alike():
    """Each round is slower than the last (a governor ramp), so each candidate's own spread is
    wide, but a/b is 0.8 in every round: paired, the verdict is sure; unpaired it would not be."""
    host = StandInHost()
    fns = {"a": host.call("a", [80, 120, 160, 200, 240]), "b": host.call("b", [100, 150, 200, 250, 300])}
    d = decide(fns, rounds=5, probe=host.probe, warmup=0)
    assert (d.verdict, d.noise) == ("faster", pytest.approx(0.0))
    unpaired = compare("a", d.timings["a"], "b", d.timings["b"])
    assert unpaired.verdict == "within noise" and unpaired.unsure[0].startswith("spread ")


def test_slower_and_too_few_samples():
    assert compare("a", _timing([120, 121, 119]), "b", _timing([100, 101, 99])).verdict == "slower"
    few = compare("a", _timing([50, 51]), "b", _timing([100, 101]))
    assert few.verdict == "within noise" and few.unsure == ("2 sample(s), fewer than 3",)
    assert relative_spread([1.0, 2.0]) is None and relative_spread([100, 100, 100]) == 0.0


def test_a_decision_is_one_json_document_that_reads_back():
    d = compare("int8", _timing([70, 71, 69], load=3.1, own=0.5), "fp32", _timing([100, 100, 100], load=3.1, own=0.5))
    doc = json.loads(json.dumps(d.to_json()))
    assert doc["verdict"] == "within noise" and doc["unsure"] == ["load 3.1 on 2 cores (2.6 of it other processes)"]
    assert set(doc["timings"]) == {"int8", "fp32"} and doc["timings"]["int8"]["samples_ms"] == [70, 71, 69]
    back = Timing.from_json(doc["timings"]["int8"])
    assert back == d.timings["int8"]
    lean = d.timings["fp32"].to_json(samples=False)
    assert "samples_ms" not in lean and Timing.from_json(lean).median_ms == 100.0
    assert Timing.from_json(None) is None and Timing.from_json({"median_ms": "x"}) is None
    assert isinstance(d, Decision) and d.why() == doc["unsure"][0]


def test_a_host_without_a_load_average_is_judged_on_the_spread_alone():
    t = _timing([70, 71, 69], load=None)
    assert t.load is None and t.busy() is None
    assert compare("a", t, "b", _timing([100, 101, 99], load=None)).verdict == "faster"
