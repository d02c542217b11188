"""The sampling thread every power probe shares.

A platform implements ``read()`` (one reading now) and names its total; the base class runs it on
a daemon thread every ``interval_s`` between ``start()`` and ``stop()``, with one synchronous
reading at each end so the trace spans the whole measured window. A failing read is recorded in
``PowerTrace.errors`` and sampling goes on: a flaky sensor never aborts a measurement.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field

from edgekit.probes.power.trace import TOTAL_KEY, PowerSample, PowerTrace

# Errors kept verbatim per trace; a sensor failing at 20 Hz would otherwise fill the report.
MAX_ERRORS = 20


@dataclass(frozen=True)
class Reading:
    rails_mw: Mapping[str, float] = field(default_factory=dict)
    counters_mj: Mapping[str, float] = field(default_factory=dict)  # cumulative, unwrapped


def with_sum_total(values: Mapping[str, float]) -> dict[str, float]:
    """``values`` plus ``TOTAL_KEY`` = their sum (for boards without an input rail)."""
    out = dict(values)
    out[TOTAL_KEY] = sum(values.values())
    return out


class PowerSampler:
    """Base class: subclasses set ``probe``, ``total_rail``, ``total_source`` and implement ``read``."""

    probe = "base"
    default_interval_s = 0.05
    # Rails derived from counter differences rather than read as power (RAPL, ODPM).
    power_from_counters = False

    def __init__(self, interval_s: float | None = None):
        self.interval_s = float(interval_s if interval_s is not None else self.default_interval_s)
        if self.interval_s <= 0:
            raise ValueError(f"interval_s={interval_s} must be positive")
        self.total_rail: str | None = TOTAL_KEY
        self.total_source = "sum of rails"
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()
        self._samples: list[PowerSample] = []
        self._errors: list[str] = []
        self._n_errors = 0
        self._start_ns = 0

    # -- to implement -------------------------------------------------------------------------
    def read(self) -> Reading:
        raise NotImplementedError

    def notes(self) -> list[str]:
        """Platform caveats for the report (what the total covers, sensor update rates)."""
        return []

    # -- sampling -----------------------------------------------------------------------------
    @property
    def running(self) -> bool:
        return self._thread is not None

    @property
    def sample_count(self) -> int:
        """Samples taken so far in the current (or last) window, for progress displays."""
        return len(self._samples)

    def start(self) -> None:
        if self._thread is not None:
            raise RuntimeError(f"{self.probe} sampler already started")
        self._samples, self._errors, self._n_errors = [], [], 0
        self._stop.clear()
        self._start_ns = time.monotonic_ns()
        self._begin()
        self._thread = threading.Thread(target=self._loop, name=f"edgekit-power-{self.probe}", daemon=True)
        self._thread.start()

    def stop(self) -> PowerTrace:
        if self._thread is None:
            raise RuntimeError(f"{self.probe} sampler stop() without start()")
        self._stop.set()
        self._halt()
        self._thread.join()
        self._thread = None
        self._end()
        stop_ns = time.monotonic_ns()
        samples = tuple(s for s in self._samples if self._start_ns <= s.t_ns <= stop_ns)
        errors = list(self._errors)
        if self._n_errors > len(errors):
            errors.append(f"... and {self._n_errors - len(errors)} more sampler errors")
        return PowerTrace(
            probe=self.probe,
            start_ns=self._start_ns,
            stop_ns=stop_ns,
            samples=samples,
            total_rail=self.total_rail,
            total_source=self.total_source,
            errors=tuple(errors),
            notes=tuple(self.notes()),
            power_from_counters=self.power_from_counters,
        )

    # Polling samplers read once at each end of the window; streaming ones (tegrastats) override.
    def _begin(self) -> None:
        self.sample_once()

    def _end(self) -> None:
        self.sample_once()

    def _halt(self) -> None:
        """Unblock the sampling thread (the polling loop wakes on the stop event by itself)."""

    def _loop(self) -> None:
        while not self._stop.wait(self.interval_s):
            self.sample_once()

    def sample_once(self) -> None:
        t0 = time.monotonic_ns()
        try:
            reading = self.read()
        except Exception as exc:  # noqa: BLE001 - any sensor failure is data, not a crash
            self.record_error(exc, t0)
            return
        t1 = time.monotonic_ns()
        self.add_reading((t0 + t1) // 2, reading)  # midpoint: vcgencmd reads take milliseconds

    def add_reading(self, t_ns: int, reading: Reading) -> None:
        rails = dict(reading.rails_mw)
        prev = self._samples[-1] if self._samples else None
        if reading.counters_mj and prev is not None and t_ns > prev.t_ns:
            dt_s = (t_ns - prev.t_ns) / 1e9
            for name, value in reading.counters_mj.items():
                if name not in rails and name in prev.counters_mj:
                    rails[name] = (value - prev.counters_mj[name]) / dt_s  # mJ/s = mW
        self._samples.append(PowerSample(t_ns, rails, dict(reading.counters_mj)))

    def record_error(self, exc: BaseException | str, t_ns: int | None = None) -> None:
        self._n_errors += 1
        if len(self._errors) < MAX_ERRORS:
            at = ((t_ns or time.monotonic_ns()) - self._start_ns) / 1e6
            what = exc if isinstance(exc, str) else f"{type(exc).__name__}: {exc}"
            self._errors.append(f"+{at:.0f} ms: {what}")


def measure_idle(sampler: PowerSampler, seconds: float = 2.0) -> PowerTrace:
    """An idle baseline: the same sampler over ``seconds`` with nothing running."""
    sampler.start()
    try:
        time.sleep(seconds)
    finally:
        trace = sampler.stop()
    return trace
