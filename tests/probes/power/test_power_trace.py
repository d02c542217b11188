from __future__ import annotations

import json

import pytest

from edgekit.probes.power.trace import PowerSample, PowerTrace, energy_per_decode_mj

S = 1_000_000_000  # ns per second


def trace(samples, start=0, stop=2 * S, total="total", **kw) -> PowerTrace:
    return PowerTrace("test", start, stop, tuple(samples), total, "test total", **kw)


RAMP = [PowerSample(0, {"total": 1000.0}), PowerSample(S, {"total": 3000.0}), PowerSample(2 * S, {"total": 3000.0})]


def test_trapezoid_energy_and_average():
    t = trace(RAMP)
    # 0.5*(1000+3000)*1 s + 3000*1 s = 5000 mJ over 2 s
    assert t.energy_mj == pytest.approx(5000.0)
    assert t.total_average_mw == pytest.approx(2500.0)
    assert t.energy_source.startswith("integrated")
    assert t.all_notes == ()


def test_rails_that_come_and_go_average_over_the_intervals_they_cover():
    samples = [
        PowerSample(0, {"total": 10.0, "a": 4.0, "b": 6.0}),
        PowerSample(S, {"total": 10.0, "a": 4.0, "b": 2.0}),
        PowerSample(2 * S, {"total": 10.0, "a": 4.0}),  # b vanished
        PowerSample(3 * S, {"total": 10.0, "a": 4.0, "b": 100.0, "c": 7.0}),  # b back, c appears
    ]
    t = trace(samples, stop=3 * S)
    avg = t.rail_average_mw()
    assert avg["a"] == pytest.approx(4.0)
    assert avg["b"] == pytest.approx(4.0)  # only [0, 1 s] has b at both ends
    assert avg["c"] == pytest.approx(7.0)  # one sample: its value, no energy claimed for it
    assert t.rails == ["a", "b", "c", "total"]
    assert t.energy_mj == pytest.approx(30.0)


def test_counter_energy_is_the_difference_across_the_window():
    samples = [
        PowerSample(0, {}, {"total": 1_000.0}),
        PowerSample(S, {"total": 400.0}, {"total": 1_400.0}),
        PowerSample(2 * S, {"total": 600.0}, {"total": 2_000.0}),
    ]
    t = trace(samples, power_from_counters=True)
    assert t.energy_mj == pytest.approx(1_000.0)
    assert t.total_average_mw == pytest.approx(500.0)
    assert t.energy_source == "energy counter (test)"
    assert t.rail_average_mw()["total"] == pytest.approx(500.0)


def test_a_counter_that_did_not_advance_is_not_reported_as_zero():
    stuck = [PowerSample(t, {"total": 150_000.0}, {"total": 5.0}) for t in (0, S // 100)]
    # With an independent power reading (NVML) the energy falls back to integration.
    t = trace(stuck, stop=S // 100)
    assert t.energy_mj == pytest.approx(1500.0)
    assert t.energy_source.startswith("integrated")
    assert any("did not advance" in n and "not reported as 0" in n for n in t.all_notes)
    # Where power is derived from the counter itself (RAPL, ODPM), there is nothing to fall back on.
    derived_samples = [PowerSample(0, {}, {"total": 5.0}), PowerSample(S // 100, {"total": 0.0}, {"total": 5.0})]
    derived = trace(derived_samples, stop=S // 100, power_from_counters=True)
    assert derived.energy_mj is None and derived.total_average_mw is None
    assert any("did not advance" in n for n in derived.all_notes)


def test_single_sample_gives_no_energy_and_says_why():
    t = trace([PowerSample(S, {"total": 900.0})])
    assert t.energy_mj is None and t.total_average_mw is None
    assert any("fewer than two power samples" in n for n in t.all_notes)
    assert t.rail_average_mw() == {"total": 900.0}


def test_partial_coverage_is_extrapolated_and_noted():
    t = trace([PowerSample(S, {"total": 2000.0}), PowerSample(2 * S, {"total": 2000.0})], stop=2 * S)
    assert t.energy_mj == pytest.approx(4000.0)  # 2 W over the 2 s window
    assert any("cover 50% of the window" in n for n in t.all_notes)


def test_no_total_rail():
    t = trace([PowerSample(0, {"a": 1.0}), PowerSample(S, {"a": 1.0})], total=None)
    assert t.energy_mj is None and t.energy_source == "unavailable"


def test_energy_per_decode_gross_and_above_idle():
    run = trace(RAMP)
    idle = trace([PowerSample(0, {"total": 1000.0}), PowerSample(S, {"total": 1000.0})], stop=S)
    e = energy_per_decode_mj(run, 10, idle)
    assert e.gross_mj == pytest.approx(500.0)
    assert e.idle_mw == pytest.approx(1000.0)
    assert e.above_idle_mj == pytest.approx((5000.0 - 1000.0 * 2) / 10)
    assert energy_per_decode_mj(run, 10).above_idle_mj is None
    empty = energy_per_decode_mj(trace([PowerSample(0, {"total": 1.0})]), 4)
    assert empty.gross_mj is None and "fewer than two" in empty.reason
    with pytest.raises(ValueError):
        energy_per_decode_mj(run, 0)


def test_to_json_is_serialisable_and_relative_in_time():
    t = trace([PowerSample(5 * S, {"total": 1.0}), PowerSample(6 * S, {"total": 3.0})], start=5 * S, stop=6 * S)
    doc = json.loads(json.dumps(t.to_json()))
    assert doc["energy_mj"] == pytest.approx(2.0)
    assert [s["t_ms"] for s in doc["samples"]] == [0.0, 1000.0]
    assert doc["total_rail"] == "total" and doc["available"] is True
    assert "samples" not in t.to_json(samples=False)


@pytest.mark.parametrize("idle_mw", [2500.0, 3000.0])  # equal to the run's 2.5 W average, and above it
def test_a_draw_no_higher_than_idle_has_no_above_idle_energy_but_says_why(idle_mw):
    run = trace(RAMP)  # 5000 mJ over 2 s: 2500 mW average
    idle = trace([PowerSample(0, {"total": idle_mw}), PowerSample(S, {"total": idle_mw})], stop=S)
    e = energy_per_decode_mj(run, 10, idle)
    assert e.gross_mj == pytest.approx(500.0)  # the gross figure is a measurement and stays
    assert e.above_idle_mj is None
    assert e.reason == (
        f"the decode drew no more than the idle baseline (2500 mW average vs {idle_mw:.0f} mW idle): "
        "no energy above idle to report"
    )
    # A draw a little above idle is still a figure, however small.
    above = energy_per_decode_mj(run, 10, trace([PowerSample(0, {"total": 2400.0}), PowerSample(S, {"total": 2400.0})]))
    assert above.above_idle_mj == pytest.approx(100.0 * 2 / 10) and above.reason is None
