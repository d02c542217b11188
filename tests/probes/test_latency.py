from __future__ import annotations

import time

import numpy as np
import pytest

from edgekit.errors import UsageError
from edgekit.probes.latency import (
    BreakdownStats,
    DecodeTiming,
    MeasureConfig,
    TimedRuntime,
    measure,
    summarize,
)
from edgekit.runtimes.base import BaseRuntime, Runtime
from edgekit.spec import TensorSpec

MS = 1_000_000


# ---------------------------------------------------------------------------------------------
# summarize


def test_summarize_known_array_exact_percentiles_and_both_warnings():
    stats = summarize([k * MS for k in range(1, 11)])  # 1..10 ms
    assert stats.n == 10
    assert stats.mean_ms == pytest.approx(5.5)
    assert stats.median_ms == pytest.approx(5.5)
    # numpy linear interpolation: rank = q * (n - 1)
    assert stats.p90_ms == pytest.approx(9.1)
    assert stats.p95_ms == pytest.approx(9.55)
    assert stats.p99_ms == pytest.approx(9.91)
    assert (stats.min_ms, stats.max_ms) == (1.0, 10.0)
    assert stats.std_ms == pytest.approx(np.std(np.arange(1, 11), ddof=1))
    assert stats.cv == pytest.approx(stats.std_ms / 5.5)
    cv_warning = [w for w in stats.warnings if "coefficient of variation" in w]
    assert cv_warning and f"{stats.cv:.3f}" in cv_warning[0]
    drift = [w for w in stats.warnings if "drifted" in w]
    # first third 1,2,3 -> median 2; last third 8,9,10 -> median 9
    assert drift and "9.000 ms" in drift[0] and "2.000 ms" in drift[0] and "+350.0%" in drift[0]


def test_summarize_steady_samples_have_no_warnings():
    stats = summarize([5 * MS] * 30)
    assert stats.warnings == ()
    assert stats.cv == 0.0 and stats.std_ms == 0.0
    assert stats.p99_ms == stats.median_ms == 5.0


def test_summarize_drift_without_high_cv():
    samples = [10 * MS] * 10 + [11 * MS] * 10 + [12 * MS] * 10
    stats = summarize(samples)
    assert stats.cv < 0.1
    assert len(stats.warnings) == 1
    assert "12.000 ms vs 10.000 ms" in stats.warnings[0] and "+20.0%" in stats.warnings[0]


def test_summarize_high_cv_without_drift():
    stats = summarize([5 * MS, 15 * MS] * 15)  # every third has median 10 ms
    assert stats.cv > 0.4
    assert [w for w in stats.warnings if "drift" in w] == []
    assert any("coefficient of variation" in w for w in stats.warnings)


def test_summarize_single_sample_and_small_n():
    one = summarize([3 * MS])
    assert (one.n, one.median_ms, one.p99_ms, one.std_ms, one.cv) == (1, 3.0, 3.0, 0.0, 0.0)
    assert any("only 1 sample" in w for w in one.warnings)
    two = summarize([1 * MS, 100 * MS])  # too few for thirds: no drift check, but CV warns
    assert not any("drift" in w for w in two.warnings)
    with pytest.raises(ValueError):
        summarize([])


def test_latency_stats_to_json_roundtrips_fields():
    doc = summarize([1 * MS, 2 * MS, 3 * MS]).to_json()
    assert doc["n"] == 3 and doc["median_ms"] == 2.0 and isinstance(doc["warnings"], list)


# ---------------------------------------------------------------------------------------------
# measure


def test_measure_keeps_going_until_min_seconds_for_fast_calls():
    calls = []
    cfg = MeasureConfig(warmup_iters=2, warmup_seconds=0.05, iters=5, min_seconds=0.1, max_iters=1_000_000)
    m = measure(lambda: calls.append(1), cfg)
    assert m.wall_ns >= 0.1e9
    assert m.stats.n > 5  # time, not count, was the binding rule
    assert m.warmup_ns >= 0.05e9 and m.warmup_iters > 2
    assert len(calls) == m.warmup_iters + m.stats.n
    assert not m.capped


def test_measure_keeps_going_until_iters_for_slow_calls():
    calls = []

    def slow():
        calls.append(1)
        time.sleep(0.01)

    cfg = MeasureConfig(warmup_iters=3, warmup_seconds=0.0, iters=5, min_seconds=0.001)
    m = measure(slow, cfg)
    assert m.warmup_iters == 3 and m.stats.n == 5 and len(calls) == 8
    assert all(s >= 0.01e9 for s in m.samples_ns)
    assert m.stats.min_ms >= 10.0


def test_measure_caps_at_max_iters_and_reports_it():
    cfg = MeasureConfig(warmup_iters=0, warmup_seconds=0.0, iters=1, min_seconds=10.0, max_iters=50)
    m = measure(lambda: None, cfg)
    assert m.stats.n == 50 and m.capped


def test_measure_progress_reports_each_call_with_a_total_estimate():
    seen = []
    cfg = MeasureConfig(warmup_iters=0, warmup_seconds=0.0, iters=7, min_seconds=0.0)
    m = measure(lambda: None, cfg, progress=lambda done, total: seen.append((done, total)))
    assert [d for d, _ in seen] == list(range(1, m.stats.n + 1))
    assert all(total >= done for done, total in seen)


class TenSecondDecodes:
    """A stand-in clock and a callable that advances it 10 s a call (a 90 M-parameter Llama's
    256-token decode on 2 cores): no test waits or times anything."""

    def __init__(self):
        self.now, self.calls = 0, 0

    def clock(self):
        return self.now

    def decode(self):
        self.calls += 1
        self.now += 10 * 10**9


def test_a_slow_decode_stops_at_max_seconds_once_five_are_measured():
    slow = TenSecondDecodes()
    seen = []
    m = measure(slow.decode, MeasureConfig(), progress=lambda done, total: seen.append(total), clock=slow.clock)
    # Warm-up: 3 calls asked, stopped after a quarter of 60 s with one call run (20 s > 15 s).
    assert m.warmup_iters == 2 and m.warmup_ns == 20 * 10**9
    assert m.stats.n == 6 and m.bounded and not m.capped  # 60 s: 6 of the 20 decodes
    assert m.to_json()["bounded_at_max_seconds"] is True
    assert seen[0] == 6  # the progress total says where the bound will stop it
    # A bound shorter than five decodes still measures five: a median and a spread.
    slow = TenSecondDecodes()
    m = measure(slow.decode, MeasureConfig(max_seconds=15.0), clock=slow.clock)
    assert m.stats.n == 5 and m.bounded and m.warmup_iters == 1
    # 0: no bound, every one of --iters.
    slow = TenSecondDecodes()
    m = measure(slow.decode, MeasureConfig(max_seconds=0.0), clock=slow.clock)
    assert m.stats.n == 20 and not m.bounded and m.warmup_iters == 3


@pytest.mark.parametrize(
    "kwargs", [{"iters": 0}, {"iters": 20, "max_iters": 10}, {"min_seconds": -1.0}, {"max_seconds": -1.0}]
)
def test_measure_config_rejects_bad_values(kwargs):
    with pytest.raises(UsageError):
        MeasureConfig(**kwargs)


# ---------------------------------------------------------------------------------------------
# TimedRuntime


class SleepyRuntime(BaseRuntime):
    """A backend whose run() takes a known time (sleeping, or advancing a fake clock)."""

    name = "sleepy"

    def __init__(self, seconds: float = 0.0, clock=None, step_ns: int = 0):
        super().__init__({"x": TensorSpec((2,), "float32")}, {"y": TensorSpec((2,), "float32")})
        self.device = "fake-npu"
        self.seconds, self.clock, self.step_ns = seconds, clock, step_ns
        self.closed = False

    def _run_impl(self, feeds):
        if self.seconds:
            time.sleep(self.seconds)
        if self.clock is not None:
            self.clock.t += self.step_ns
        return {"y": feeds["x"] * 2}

    def _close_impl(self):
        self.closed = True


class FakeClock:
    def __init__(self):
        self.t = 0

    def __call__(self) -> int:
        return self.t


FEEDS = {"x": np.ones(2, np.float32)}


def decode_loop(runtime, steps: int, host_work=lambda: None):
    """Stands in for a decode loop in edgekit.decode: it only sees a Runtime."""
    x = FEEDS
    for _ in range(steps):
        host_work()
        x = {"x": runtime.run(x)["y"] / 2}
    return x


def test_timed_runtime_is_a_runtime_with_the_inner_identity():
    inner = SleepyRuntime()
    timed = TimedRuntime(inner)
    assert isinstance(timed, Runtime)
    assert (timed.name, timed.device) == ("sleepy", "fake-npu")
    assert (timed.inputs, timed.outputs) == (inner.inputs, inner.outputs)
    # Only what the Runtime protocol declares is forwarded (#41: no __getattr__ forwarding); a
    # backend's own attributes are reached through ``inner``.
    inner.providers = ["CPUExecutionProvider"]
    assert timed.inner.providers == ["CPUExecutionProvider"]
    assert not hasattr(timed, "providers")
    with timed as rt:
        np.testing.assert_array_equal(rt.run(FEEDS)["y"], [2.0, 2.0])
    assert inner.closed


def test_timed_runtime_exact_accounting_with_a_fake_clock():
    clock = FakeClock()
    timed = TimedRuntime(SleepyRuntime(clock=clock, step_ns=7_000), clock=clock)

    def host():
        clock.t += 3_000

    with timed.decode():
        decode_loop(timed, 4, host)
    (d,) = timed.decodes
    assert d.total_ns == 40_000 and d.runtime_ns == 28_000 and d.host_ns == 12_000
    assert d.calls == 4 and d.step_ns == (7_000,) * 4
    assert d.host_share == pytest.approx(0.3)
    b = timed.breakdown()
    assert b.median_step_ms == pytest.approx(0.007)
    assert b.host_overhead_share == pytest.approx(0.3)
    assert b.calls_per_decode == 4.0


def test_timed_runtime_with_real_sleeps_separates_host_overhead():
    timed = TimedRuntime(SleepyRuntime(seconds=0.004))
    timed.start_decode()
    decode_loop(timed, 5, lambda: time.sleep(0.002))
    d = timed.end_decode()
    assert d.calls == 5
    assert all(s >= 4 * MS for s in d.step_ns)
    assert d.runtime_ns >= 20 * MS and d.host_ns >= 10 * MS
    assert 0.15 < d.host_share < 0.6  # ideal 1/3; generous for a loaded CI machine


def test_timed_runtime_ignores_calls_outside_a_decode_and_checks_pairing():
    timed = TimedRuntime(SleepyRuntime())
    timed.run(FEEDS)
    assert timed.decodes == []
    with pytest.raises(RuntimeError):
        timed.end_decode()
    timed.start_decode()
    with pytest.raises(RuntimeError):
        timed.start_decode()


def test_timed_runtime_records_a_decode_that_raises():
    timed = TimedRuntime(SleepyRuntime())
    with pytest.raises(ZeroDivisionError):
        with timed.decode():
            timed.run(FEEDS)
            raise ZeroDivisionError
    assert len(timed.decodes) == 1 and timed.decodes[0].calls == 1


def test_breakdown_with_measure_discards_warmup_decodes():
    timed = TimedRuntime(SleepyRuntime())
    cfg = MeasureConfig(warmup_iters=2, warmup_seconds=0.0, iters=6, min_seconds=0.0)
    m = measure(timed.timed_decodes(lambda: decode_loop(timed, 3)), cfg)
    assert len(timed.decodes) == m.warmup_iters + m.stats.n
    b = timed.breakdown(skip=m.warmup_iters)
    assert b.n_decodes == m.stats.n == 6
    assert (b.calls_per_decode, b.calls_min, b.calls_max) == (3.0, 3, 3)


def test_breakdown_stats_from_known_decodes():
    decodes = [DecodeTiming(10 * MS, (2 * MS, 2 * MS, 2 * MS)), DecodeTiming(20 * MS, (4 * MS, 4 * MS))]
    b = BreakdownStats.from_decodes(decodes)
    assert b.median_step_ms == pytest.approx(2.0)  # steps 2,2,2,4,4
    assert b.median_total_ms == pytest.approx(15.0)
    assert b.median_runtime_ms == pytest.approx(7.0)
    assert b.host_overhead_share == pytest.approx((4 + 12) / 30)
    assert (b.calls_min, b.calls_max, b.calls_per_decode) == (2, 3, 2.5)
    assert b.to_json()["n_decodes"] == 2
    with pytest.raises(ValueError):
        BreakdownStats.from_decodes([])


def test_interleaved_calls_round_robin_after_warmup():
    from edgekit.probes.latency import interleaved

    order = []
    samples = interleaved({"a": lambda: order.append("a"), "b": lambda: order.append("b")}, rounds=3, warmup=1)
    assert order == ["a", "b"] * 4 and {k: len(v) for k, v in samples.items()} == {"a": 3, "b": 3}
    assert all(ms >= 0 for v in samples.values() for ms in v)
    with pytest.raises(UsageError, match="rounds >= 1"):
        interleaved({"a": lambda: None}, rounds=0)
    with pytest.raises(UsageError, match="0 <= gap_s <= 10"):
        interleaved({"a": lambda: None}, rounds=1, gap_s=-1)


def test_interleaved_idles_before_each_timed_call_outside_the_timing(monkeypatch):
    from edgekit.probes import latency

    events = []
    monkeypatch.setattr(latency.time, "sleep", lambda s: events.append(("sleep", s)))
    latency.interleaved(
        {"a": lambda: events.append("a"), "b": lambda: events.append("b")}, rounds=2, warmup=1, gap_s=0.1
    )
    # warm-up calls run back to back; every timed call is preceded by its idle gap
    assert events == ["a", "b"] + [("sleep", 0.1), "a", ("sleep", 0.1), "b"] * 2
