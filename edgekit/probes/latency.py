"""Latency timing and statistics on the host clock (``time.perf_counter_ns`` only).

``measure`` warms up by count and by time, then measures by count and by minimum duration (the
MLPerf single-stream rule, with smaller defaults for edge devices). The timed callable must finish
its device work before it returns (runtimes sync before handing back outputs).

``TimedRuntime`` wraps any ``Runtime`` so the decode loops run unchanged while the wrapper records
the time spent inside ``Runtime.run``; the rest of a decode is host overhead (numpy sampling,
scheduling, feed preparation).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from edgekit.errors import UsageError
from edgekit.limits import check_options
from edgekit.runtimes.base import Runtime, RuntimeProxy

# trtexec warns when the coefficient of variation passes 10 %; the same bound flags drift between
# the first and last third of a run (thermal throttling, governor ramps, background load).
CV_WARN = 0.10
DRIFT_WARN = 0.10
# Below this many samples tail percentiles are interpolated between the slowest few samples.
FEW_SAMPLES = 10
# MeasureConfig.max_seconds stops a slow callable only once this many samples are in: a median and
# a spread, if not a tail.
BOUNDED_MIN_SAMPLES = 5

Progress = Callable[[int, int], None]


@dataclass(frozen=True)
class MeasureConfig:
    # A few calls allocate buffers, page in weights and pick kernels; they are not steady state.
    warmup_iters: int = 3
    # Clocks and caches need wall time, not calls, to settle: a 1 ms model gets 200 warm-up calls.
    warmup_seconds: float = 0.2
    # Enough samples for p90/p95 to mean something on a slow model.
    iters: int = 20
    # Fast models need many samples and a window long enough to average power sensors.
    min_seconds: float = 1.0
    # Bounds a microsecond-scale callable that would otherwise run millions of times.
    max_iters: int = 10_000
    # Bounds a slow one: once this long and BOUNDED_MIN_SAMPLES measured, stop short of ``iters``
    # (20 decodes of a 90 M-parameter Llama at 256 tokens took 3.5 min a variant); the warm-up
    # likewise stops after a quarter of it once one call ran. 0: no bound (every ``iters``).
    max_seconds: float = 60.0

    def __post_init__(self) -> None:
        # limits.OPTION_BOUNDS: the CLI checked them already; a config built in code is held to the same.
        check_options(
            {
                "--warmup": self.warmup_iters,
                "--iters": self.iters,
                "warmup_seconds": self.warmup_seconds,
                "--min-seconds": self.min_seconds,
                "--max-seconds": self.max_seconds,
            }
        )
        if not isinstance(self.max_iters, int) or self.max_iters < 1:
            raise UsageError(f"MeasureConfig.max_iters={self.max_iters!r} must be an int >= 1")
        if self.iters > self.max_iters:
            raise UsageError(f"MeasureConfig.iters={self.iters} exceeds max_iters={self.max_iters}; raise max_iters")


@dataclass(frozen=True)
class LatencyStats:
    """Per-call latency summary. Percentiles use linear interpolation (numpy's default); ``std_ms``
    is the sample standard deviation (ddof=1; 0 for a single sample) and ``cv`` = std / mean."""

    n: int
    mean_ms: float
    median_ms: float
    p90_ms: float
    p95_ms: float
    p99_ms: float
    min_ms: float
    max_ms: float
    std_ms: float
    cv: float
    warnings: tuple[str, ...] = ()

    def to_json(self) -> dict[str, Any]:
        doc = asdict(self)
        doc["warnings"] = list(self.warnings)
        return doc


def summarize(samples_ns: Sequence[int]) -> LatencyStats:
    """Statistics of per-call durations in nanoseconds, with trtexec-style warnings."""
    if len(samples_ns) == 0:
        raise ValueError("summarize() needs at least one sample")
    ms = np.asarray(samples_ns, dtype=np.float64) / 1e6
    n = int(ms.size)
    p50, p90, p95, p99 = np.percentile(ms, [50, 90, 95, 99])
    mean = float(ms.mean())
    std = float(ms.std(ddof=1)) if n > 1 else 0.0
    cv = std / mean if mean > 0 else 0.0
    warnings: list[str] = []
    if n < FEW_SAMPLES:
        warnings.append(f"only {n} sample(s): percentiles and CV are rough; measure more iterations")
    if cv > CV_WARN:
        warnings.append(f"high variance: coefficient of variation {cv:.3f} > {CV_WARN:.2f}; results may be unstable")
    third = n // 3
    if third >= 3:  # a median of fewer than three samples is one outlier away from anything
        first = float(np.median(ms[:third]))
        last = float(np.median(ms[-third:]))
        drift = (last - first) / first if first > 0 else 0.0
        if abs(drift) > DRIFT_WARN:
            warnings.append(
                f"latency drifted: median of the last third {last:.3f} ms vs {first:.3f} ms in the first "
                f"third ({drift:+.1%}); check thermal throttling and CPU/GPU frequency before and after"
            )
    return LatencyStats(
        n=n,
        mean_ms=mean,
        median_ms=float(p50),
        p90_ms=float(p90),
        p95_ms=float(p95),
        p99_ms=float(p99),
        min_ms=float(ms.min()),
        max_ms=float(ms.max()),
        std_ms=std,
        cv=cv,
        warnings=tuple(warnings),
    )


@dataclass(frozen=True)
class Measurement:
    """Measured per-call durations (warm-up discarded) and their summary."""

    samples_ns: tuple[int, ...]
    stats: LatencyStats
    warmup_iters: int  # calls actually spent warming up (count and time rule)
    warmup_ns: int
    wall_ns: int  # wall time of the measured phase, including the gaps between calls
    capped: bool  # stopped at max_iters before min_seconds was reached
    bounded: bool = False  # stopped at max_seconds before iters were measured

    def to_json(self) -> dict[str, Any]:
        return {
            "stats": self.stats.to_json(),
            "warmup_iters": self.warmup_iters,
            "warmup_s": self.warmup_ns / 1e9,
            "wall_s": self.wall_ns / 1e9,
            "capped_at_max_iters": self.capped,
            "bounded_at_max_seconds": self.bounded,
            "samples_ms": [s / 1e6 for s in self.samples_ns],
        }


def measure(
    fn: Callable[[], object],
    cfg: MeasureConfig = MeasureConfig(),
    progress: Progress | None = None,
    clock: Callable[[], int] | None = None,
) -> Measurement:
    """Warm up until both ``warmup_iters`` and ``warmup_seconds`` are reached, then time calls
    until both ``iters`` and ``min_seconds`` are reached (at most ``max_iters``); a slow ``fn``
    stops at ``max_seconds`` once ``BOUNDED_MIN_SAMPLES`` are measured (``bounded``), and its
    warm-up after one call and a quarter of ``max_seconds``.

    ``progress(done, total_estimate)`` is called after each measured call, outside the timed
    region; the estimate grows with the observed mean so a progress bar can size itself.
    ``clock``: ns (``time.perf_counter_ns``; a stand-in in tests).
    """
    clock = clock or time.perf_counter_ns
    bound_ns = cfg.max_seconds * 1e9 if cfg.max_seconds > 0 else math.inf
    warm_start = clock()
    warm_iters = 0
    while warm_iters < cfg.warmup_iters or clock() - warm_start < cfg.warmup_seconds * 1e9:
        if warm_iters >= 1 and clock() - warm_start >= bound_ns / 4:
            break
        fn()
        warm_iters += 1
    warmup_ns = clock() - warm_start

    samples: list[int] = []
    min_ns = cfg.min_seconds * 1e9
    start = clock()
    bounded = False
    while len(samples) < cfg.max_iters and (len(samples) < cfg.iters or clock() - start < min_ns):
        if len(samples) >= BOUNDED_MIN_SAMPLES and clock() - start >= bound_ns:
            bounded = True
            break
        t0 = clock()
        fn()
        samples.append(clock() - t0)
        if progress is not None:
            progress(len(samples), _estimate_total(samples, clock() - start, cfg))
    wall_ns = clock() - start
    capped = len(samples) >= cfg.max_iters and wall_ns < min_ns
    return Measurement(tuple(samples), summarize(samples), warm_iters, warmup_ns, wall_ns, capped, bounded)


# Idle time before each timed call of ``interleaved`` when candidates keep their own thread pools:
# ONNX Runtime's threads spin for tens of ms after a run returns (about 50 ms of a core measured on
# an AMD EPYC, ORT 1.32), and a candidate timed inside that window shares its cores with them —
# whichever candidate runs after a spinning one looks slower (1.5x measured).
SPIN_GAP_S = 0.1


def interleaved(
    fns: Mapping[str, Callable[[], object]],
    rounds: int,
    warmup: int = 1,
    gap_s: float = 0.0,
    clock: Callable[[], int] | None = None,
) -> dict[str, list[float]]:
    """ms per call of each fn, called round-robin ``rounds`` times after ``warmup`` rounds: load
    that comes and goes (a shared machine, a governor ramp) hits every candidate alike, so their
    ratio holds where absolute times do not. ``gap_s``: idle seconds before each call, not timed
    (``SPIN_GAP_S`` between candidates whose threads spin-wait after a call). ``clock``: ns
    (``time.perf_counter_ns``; a stand-in in tests). A decision on the result: ``probes.speed``."""
    clock = clock or time.perf_counter_ns
    if rounds < 1 or warmup < 0 or not 0 <= gap_s <= 10:
        raise UsageError(
            f"interleaved rounds={rounds}, warmup={warmup}, gap_s={gap_s} are invalid; "
            "valid: rounds >= 1, warmup >= 0, 0 <= gap_s <= 10"
        )
    for _ in range(warmup):
        for fn in fns.values():
            fn()
    samples: dict[str, list[float]] = {name: [] for name in fns}
    for _ in range(rounds):
        for name, fn in fns.items():
            if gap_s:
                time.sleep(gap_s)
            start = clock()
            fn()
            samples[name].append((clock() - start) / 1e6)
    return samples


def _estimate_total(samples: Sequence[int], elapsed_ns: int, cfg: MeasureConfig) -> int:
    per_call = elapsed_ns / len(samples)
    by_time = math.ceil(cfg.min_seconds * 1e9 / per_call) if per_call > 0 else cfg.max_iters
    total = min(cfg.max_iters, max(cfg.iters, by_time, len(samples)))
    if cfg.max_seconds > 0 and per_call > 0:  # a slow callable stops at max_seconds
        total = min(total, max(BOUNDED_MIN_SAMPLES, len(samples), math.ceil(cfg.max_seconds * 1e9 / per_call)))
    return total


# ----------------------------------------------------------------------------------------------
# Per-decode breakdown: time inside Runtime.run vs host overhead


@dataclass(frozen=True)
class DecodeTiming:
    """One decode: wall time, the part spent inside ``Runtime.run``, and each call's duration."""

    total_ns: int
    step_ns: tuple[int, ...]  # one entry per Runtime.run call, in call order

    @property
    def calls(self) -> int:
        return len(self.step_ns)

    @property
    def runtime_ns(self) -> int:
        return sum(self.step_ns)

    @property
    def host_ns(self) -> int:
        return self.total_ns - self.runtime_ns

    @property
    def host_share(self) -> float:
        return self.host_ns / self.total_ns if self.total_ns > 0 else 0.0

    def to_json(self) -> dict[str, Any]:
        return {
            "total_ms": self.total_ns / 1e6,
            "runtime_ms": self.runtime_ns / 1e6,
            "host_ms": self.host_ns / 1e6,
            "host_share": self.host_share,
            "calls": self.calls,
            "step_ms": [s / 1e6 for s in self.step_ns],
        }


@dataclass(frozen=True)
class BreakdownStats:
    """Aggregate over decodes. ``host_overhead_share`` is Σ host / Σ total (long decodes weigh
    more, as they do in wall time)."""

    n_decodes: int
    median_total_ms: float
    median_runtime_ms: float  # per decode, inside Runtime.run
    median_step_ms: float  # per Runtime.run call, across all decodes
    p90_step_ms: float
    host_overhead_share: float
    calls_per_decode: float  # median
    calls_min: int
    calls_max: int

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_decodes(cls, decodes: Sequence[DecodeTiming]) -> BreakdownStats:
        if not decodes:
            raise ValueError("no decodes recorded: wrap the decode in TimedRuntime.decode()")
        steps = np.asarray([s for d in decodes for s in d.step_ns], dtype=np.float64) / 1e6
        total = sum(d.total_ns for d in decodes)
        calls = [d.calls for d in decodes]
        return cls(
            n_decodes=len(decodes),
            median_total_ms=float(np.median([d.total_ns for d in decodes])) / 1e6,
            median_runtime_ms=float(np.median([d.runtime_ns for d in decodes])) / 1e6,
            median_step_ms=float(np.median(steps)) if steps.size else 0.0,
            p90_step_ms=float(np.percentile(steps, 90)) if steps.size else 0.0,
            host_overhead_share=sum(d.host_ns for d in decodes) / total if total > 0 else 0.0,
            calls_per_decode=float(np.median(calls)),
            calls_min=min(calls),
            calls_max=max(calls),
        )


class TimedRuntime(RuntimeProxy):
    """A ``Runtime`` that forwards to ``inner`` and records how long each ``run`` call takes.

    Hand it to an unchanged decode loop and bracket each decode::

        timed = TimedRuntime(session)
        m = measure(timed.timed_decodes(lambda: decode(timed, cfg)), mcfg)
        breakdown = timed.breakdown(skip=m.warmup_iters)   # warm-up decodes discarded

    ``run`` calls outside a decode are forwarded but not recorded.
    """

    def __init__(self, inner: Runtime, clock: Callable[[], int] = time.perf_counter_ns):
        super().__init__(inner)
        self._clock = clock
        self._open_steps: list[int] | None = None
        self._open_start = 0
        self.decodes: list[DecodeTiming] = []

    def run(self, feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        t0 = self._clock()
        out = self.inner.run(feeds)
        if self._open_steps is not None:
            self._open_steps.append(self._clock() - t0)
        return out

    # Per-decode accounting
    def start_decode(self) -> None:
        if self._open_steps is not None:
            raise RuntimeError("start_decode() while a decode is open: call end_decode() first")
        self._open_steps = []
        self._open_start = self._clock()

    def end_decode(self) -> DecodeTiming:
        if self._open_steps is None:
            raise RuntimeError("end_decode() without start_decode()")
        timing = DecodeTiming(self._clock() - self._open_start, tuple(self._open_steps))
        self._open_steps = None
        self.decodes.append(timing)
        return timing

    @contextmanager
    def decode(self) -> Iterator[None]:
        """Bracket one decode; the timing is recorded even if the decode raises."""
        self.start_decode()
        try:
            yield
        finally:
            self.end_decode()

    def timed_decodes(self, fn: Callable[[], object]) -> Callable[[], object]:
        """``fn`` with every call recorded as one decode (to pass to ``measure``)."""

        def call() -> object:
            with self.decode():
                return fn()

        return call

    def breakdown(self, skip: int = 0) -> BreakdownStats:
        """Aggregate the recorded decodes, dropping the first ``skip`` (the warm-up)."""
        return BreakdownStats.from_decodes(self.decodes[skip:])

    def reset(self) -> None:
        self.decodes.clear()
