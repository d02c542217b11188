from __future__ import annotations

import threading
import time

import pytest

from edgekit.probes.power.sampler import MAX_ERRORS, PowerSampler, Reading, measure_idle


class ConstantSampler(PowerSampler):
    probe = "const"

    def __init__(self, mw=1000.0, fail_on=(), interval_s=0.005):
        super().__init__(interval_s)
        self.mw, self.fail_on, self.calls = mw, set(fail_on), 0
        self.total_rail = "board"
        self.threads: set[str] = set()

    def read(self) -> Reading:
        self.calls += 1
        self.threads.add(threading.current_thread().name)
        if self.calls in self.fail_on:
            raise OSError(5, "Input/output error")
        return Reading({"board": self.mw})


def test_samples_are_windowed_to_start_and_stop_on_a_daemon_thread():
    s = ConstantSampler()
    s.start()
    assert s._thread.daemon
    time.sleep(0.1)
    t = s.stop()
    assert len(t.samples) >= 5
    assert all(t.start_ns <= x.t_ns <= t.stop_ns for x in t.samples)
    # One synchronous reading at each end: the trace spans the whole window.
    assert t.samples[0].t_ns - t.start_ns < 0.05e9 and t.stop_ns - t.samples[-1].t_ns < 0.05e9
    assert s.sample_count == len(t.samples)
    assert t.energy_mj == pytest.approx(1000.0 * t.duration_s, rel=1e-6)
    assert "edgekit-power-const" in s.threads
    assert t.errors == ()


def test_a_read_that_raises_mid_run_is_recorded_and_sampling_goes_on():
    s = ConstantSampler(fail_on={3, 4, 5})
    s.start()
    time.sleep(0.08)
    t = s.stop()  # must not raise
    assert len(t.errors) == 3 and all("OSError" in e and "Input/output error" in e for e in t.errors)
    assert t.errors[0].startswith("+")
    assert len(t.samples) == s.calls - 3
    assert t.energy_mj == pytest.approx(1000.0 * t.duration_s, rel=1e-6)


def test_errors_are_capped_with_a_count():
    s = ConstantSampler(fail_on=set(range(2, 10_000)), interval_s=0.001)
    s.start()
    time.sleep(0.1)
    t = s.stop()
    assert len(t.errors) == MAX_ERRORS + 1
    assert t.errors[-1].startswith("... and ") and "more sampler errors" in t.errors[-1]


def test_start_stop_pairing_and_reuse():
    s = ConstantSampler()
    with pytest.raises(RuntimeError):
        s.stop()
    s.start()
    with pytest.raises(RuntimeError):
        s.start()
    first = s.stop()
    s.start()
    second = s.stop()
    assert second.start_ns > first.stop_ns
    assert all(x.t_ns >= second.start_ns for x in second.samples)


def test_power_is_derived_from_counter_differences():
    class Counter(PowerSampler):
        probe = "counter"

    s = Counter(0.01)
    s.add_reading(0, Reading(counters_mj={"pkg": 1_000.0}))
    s.add_reading(500_000_000, Reading(counters_mj={"pkg": 1_250.0}))
    s.add_reading(1_000_000_000, Reading({"pkg": 7.0}, {"pkg": 1_300.0}))  # a read power wins
    first, second, third = s._samples
    assert first.rails_mw == {}
    assert second.rails_mw == {"pkg": pytest.approx(500.0)}  # 250 mJ / 0.5 s
    assert third.rails_mw == {"pkg": 7.0}


def test_measure_idle_runs_for_the_requested_time():
    t = measure_idle(ConstantSampler(mw=400.0), 0.05)
    assert t.duration_s >= 0.05
    assert t.total_average_mw == pytest.approx(400.0)


def test_interval_must_be_positive():
    with pytest.raises(ValueError):
        ConstantSampler(interval_s=0)
