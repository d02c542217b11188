"""Speed decisions that say how they were measured, and when they cannot tell.

Every choice edgekit makes from a timing (quantize: INT8 against FP32 per decode, weight-only
against float fallbacks; ``build --precision auto`` ships what the first chose; ``profile``: the
fastest engine, each ratio) goes through here:

    decide(fns, rounds) -> measure_round (latency.interleaved inside a Watch) -> compare(a, b)
        unsure (load over the cores, spread not below the difference, too few samples)?
        -> measure again, at most EXTRA_ROUNDS more -> Decision (verdict, ratio, why unsure, Timings)

A ``Timing`` keeps the samples, their median and spread, the load average before and after, this
process's own CPU use while measuring, the cores and the CPU class; a ``Decision`` keeps both
Timings. The caller keeps its safe choice (FP32, the engine the bundle recorded) when the verdict
is "within noise", and says so in one warning; the quantize fallback form decides such a tie on
size and the budget instead (``quantize/cpu/form.py``).

Every reading of the host is injectable (``HostProbe``): tests pass a stand-in clock and load,
so no test asserts a time and no verdict depends on the machine running it.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from edgekit.host import HostFacts
from edgekit.probes.latency import interleaved
from edgekit.vocabulary import SPEED_VERDICTS

FASTER, SLOWER, WITHIN_NOISE = SPEED_VERDICTS
# Measuring rounds after the first when a decision is unsure: a load that comes and goes may be
# gone; one that stays is said, and the safe choice kept. Bounded: each round costs the whole
# comparison again (quantize: 2 x 6 decodes).
EXTRA_ROUNDS = 2
# Fewer samples than this have no spread worth the name (the quartiles are the extremes).
MIN_SAMPLES = 3
# The load average counts this process's own threads too: the host is busy only where the load
# exceeds the cores and at least this much of it (in cores) is other processes' work.
OTHERS_BUSY = 0.5


def load_average() -> float | None:
    """The 1-minute load average (runnable threads, the whole machine), None where there is none."""
    try:
        return float(os.getloadavg()[0])
    except (OSError, AttributeError):  # Windows; a container without /proc/loadavg
        return None


def machine_cores() -> int:
    """The cores the load average is counted over: the machine's, not this process's affinity
    (in a container pinned to 2 of 64 cores the load average is still the host's)."""
    return os.cpu_count() or 1


def host_cpu_class() -> str:
    return HostFacts.detect().isa_class


@dataclass(frozen=True)
class HostProbe:
    """How a measurement reads the host: the clock its samples are timed on (ns), the load
    average, this process's CPU seconds (all threads), the cores and the CPU class. Tests pass
    stand-ins for each."""

    clock: Callable[[], int] = time.perf_counter_ns
    load: Callable[[], float | None] = load_average
    cpu_time: Callable[[], float] = time.process_time
    cores: int = field(default_factory=machine_cores)
    cpu_class: str = field(default_factory=host_cpu_class)


class Watch:
    """The host around one measurement: the load and this process's CPU time when it starts;
    ``stop`` reads them again and returns what a ``Timing`` records of the window."""

    def __init__(self, probe: HostProbe):
        self.probe = probe
        self.load_before = probe.load()
        self._cpu, self._start = probe.cpu_time(), probe.clock()

    def stop(self) -> dict[str, Any]:
        wall_s = (self.probe.clock() - self._start) / 1e9
        own = (self.probe.cpu_time() - self._cpu) / wall_s if wall_s > 0 else None
        return {
            "load_before": self.load_before,
            "load_after": self.probe.load(),
            "own_cores": own,
            "cores": self.probe.cores,
            "cpu_class": self.probe.cpu_class,
        }


def relative_spread(values: Sequence[float]) -> float | None:
    """Interquartile range over the median (robust to one outlier); None below MIN_SAMPLES."""
    if len(values) < MIN_SAMPLES:
        return None
    q1, med, q3 = np.percentile(np.asarray(values, dtype=np.float64), [25, 50, 75])
    return float((q3 - q1) / med) if med > 0 else None


@dataclass(frozen=True)
class Timing:
    """One candidate's timing and the host it was taken on (``to_json`` is what reports and the
    manifest record)."""

    n: int
    median_ms: float
    spread: float | None  # interquartile range / median of the samples
    load_before: float | None  # 1-minute load average (None: the host has none)
    load_after: float | None
    own_cores: float | None  # this process's CPU use while measuring, in cores
    cores: int
    cpu_class: str
    samples_ms: tuple[float, ...] = ()  # empty when read back from a report that left them out

    @classmethod
    def of(cls, samples_ms: Sequence[float], window: Mapping[str, Any]) -> Timing:
        samples = tuple(float(s) for s in samples_ms)
        median = float(np.median(samples)) if samples else 0.0
        return cls(len(samples), median, relative_spread(samples), samples_ms=samples, **window)

    @property
    def load(self) -> float | None:
        known = [x for x in (self.load_before, self.load_after) if x is not None]
        return max(known) if known else None

    def busy(self) -> str | None:
        """Why the host was too busy to trust this timing (load over the cores, and not only
        this process's), or None."""
        load = self.load
        if load is None or load <= self.cores:
            return None
        others = load - (self.own_cores or 0.0)
        if others < OTHERS_BUSY:
            return None
        return f"load {load:.1f} on {self.cores} cores ({others:.1f} of it other processes)"

    def to_json(self, samples: bool = True) -> dict[str, Any]:
        doc = {
            "n": self.n,
            "median_ms": self.median_ms,
            "spread": self.spread,
            "load_before": self.load_before,
            "load_after": self.load_after,
            "own_cores": self.own_cores,
            "cores": self.cores,
            "cpu_class": self.cpu_class,
        }
        return doc | ({"samples_ms": list(self.samples_ms)} if samples else {})

    @classmethod
    def from_json(cls, doc: Any) -> Timing | None:
        """A recorded timing, or None where ``doc`` is not one (an older report)."""
        if not isinstance(doc, Mapping) or not isinstance(doc.get("median_ms"), (int, float)):
            return None
        num = lambda key: doc[key] if isinstance(doc.get(key), (int, float)) else None  # noqa: E731
        samples = doc.get("samples_ms")
        return cls(
            n=int(doc["n"]) if isinstance(doc.get("n"), int) else 0,
            median_ms=float(doc["median_ms"]),
            spread=num("spread"),
            load_before=num("load_before"),
            load_after=num("load_after"),
            own_cores=num("own_cores"),
            cores=int(doc["cores"]) if isinstance(doc.get("cores"), int) else 1,
            cpu_class=str(doc.get("cpu_class") or "unknown"),
            samples_ms=tuple(float(s) for s in samples) if isinstance(samples, list) else (),
        )


@dataclass(frozen=True)
class Decision:
    """``a`` against ``b``: ``verdict`` (``SPEED_VERDICTS``: a is faster, slower, or the timings
    cannot tell), ``ratio`` = a's median time over b's (below 1: a is faster), the spread the
    difference was judged against, why the verdict is unsure, and the timings it came from."""

    a: str
    b: str
    verdict: str
    ratio: float | None
    noise: float | None
    unsure: tuple[str, ...]
    timings: Mapping[str, Timing]
    rounds: int = 1  # measuring rounds made (the verdict is the last one's)
    earlier: tuple[str, ...] = ()  # why each earlier round was measured again

    @property
    def sure(self) -> bool:
        return self.verdict != WITHIN_NOISE

    @property
    def speedup(self) -> float | None:
        """b's time over a's (above 1: a is faster)."""
        return 1.0 / self.ratio if self.ratio else None

    def why(self) -> str:
        return "; ".join(self.unsure)

    def to_json(self, samples: bool = True) -> dict[str, Any]:
        return {
            "a": self.a,
            "b": self.b,
            "verdict": self.verdict,
            "ratio": self.ratio,
            "noise": self.noise,
            "unsure": list(self.unsure),
            "rounds": self.rounds,
            "earlier": list(self.earlier),
            "timings": {name: t.to_json(samples) for name, t in self.timings.items()},
        }


def compare(a_name: str, a: Timing, b_name: str, b: Timing, paired: bool = False) -> Decision:
    """``a`` against ``b``. ``paired``: the two were timed round-robin (``interleaved``), so the
    spread is that of the per-round ratios (load that comes and goes hits both alike); otherwise
    the larger of the two spreads. Within noise where a host was busy, where either has fewer than
    MIN_SAMPLES samples, or where the spread is not below the difference."""
    unsure: list[str] = []
    for t in (a, b):
        busy = t.busy()
        if busy is not None and busy not in unsure:
            unsure.append(busy)
    if min(a.n, b.n) < MIN_SAMPLES:
        unsure.append(f"{min(a.n, b.n)} sample(s), fewer than {MIN_SAMPLES}")
    ratio = a.median_ms / b.median_ms if b.median_ms > 0 else None
    if paired and a.n == b.n and len(a.samples_ms) == len(b.samples_ms) == a.n and all(b.samples_ms):
        noise = relative_spread([x / y for x, y in zip(a.samples_ms, b.samples_ms)])
    else:
        spreads = [s for s in (a.spread, b.spread) if s is not None]
        noise = max(spreads) if len(spreads) == 2 else None
    if ratio is None:
        unsure.append(f"{b_name} measured no time")
    elif noise is not None and noise >= abs(1.0 - ratio):
        diff = abs(1.0 - ratio)
        unsure.append(f"spread {noise:.1%} {'>' if noise > diff else '='} difference {diff:.1%}")
    verdict = WITHIN_NOISE if unsure or ratio is None else FASTER if ratio < 1.0 else SLOWER
    return Decision(a_name, b_name, verdict, ratio, noise, tuple(unsure), {a_name: a, b_name: b})


def measure_round(
    fns: Mapping[str, Callable[[], object]],
    rounds: int,
    warmup: int = 1,
    gap_s: float = 0.0,
    probe: HostProbe | None = None,
    enough: Callable[[Mapping[str, Timing]], bool] | None = None,
) -> dict[str, Timing]:
    """Each fn timed round-robin ``rounds`` times (``latency.interleaved``), with the host's
    load and this process's CPU use around the whole round. ``enough``: asked after the first
    MIN_SAMPLES rounds; True ends the round there (what is timed is already clear)."""
    probe = probe or HostProbe()
    watch = Watch(probe)
    first = rounds if enough is None else min(rounds, MIN_SAMPLES)
    samples = interleaved(fns, first, warmup=warmup, gap_s=gap_s, clock=probe.clock)
    if first < rounds:
        window = watch.stop()
        timings = {name: Timing.of(ms, window) for name, ms in samples.items()}
        if enough is not None and enough(timings):
            return timings
        more = interleaved(fns, rounds - first, warmup=0, gap_s=gap_s, clock=probe.clock)
        samples = {name: ms + more[name] for name, ms in samples.items()}
    window = watch.stop()
    return {name: Timing.of(ms, window) for name, ms in samples.items()}


# A difference this many times the spread of MIN_SAMPLES paired rounds is clear: the rounds left
# would not turn the verdict (INT8 against FP32 on aMUSEd-256: 2.5x apart, spread 1-2 %), and at
# real size each round is two whole decodes (30 s there).
CLEAR_MARGIN = 3.0


def clear(decision: Decision) -> bool:
    """A sure verdict whose difference is at least CLEAR_MARGIN times its spread."""
    return (
        decision.sure
        and decision.ratio is not None
        and decision.noise is not None
        and abs(1.0 - decision.ratio) >= CLEAR_MARGIN * decision.noise
    )


Pair = Callable[[Mapping[str, Timing]], tuple[str, str]]


def decide(
    fns: Mapping[str, Callable[[], object]],
    rounds: int,
    *,
    pair: Pair | None = None,
    warmup: int = 1,
    gap_s: float = 0.0,
    extra: int = EXTRA_ROUNDS,
    probe: HostProbe | None = None,
    early: bool = False,
) -> Decision:
    """Time ``fns`` round-robin and compare the two ``pair`` names (default: the first two of
    ``fns``, a against b); while unsure, time them again, at most ``extra`` more rounds (the
    sessions are warm by then: no warm-up). The verdict is the last round's; ``earlier`` says
    why each round before it was not enough. ``early``: a round stops after MIN_SAMPLES of its
    ``rounds`` where the difference is already ``clear`` (for timings of whole decodes)."""
    probe = probe or HostProbe()
    earlier: list[str] = []

    def names(timings: Mapping[str, Timing]) -> tuple[str, str]:
        if pair is not None:
            return pair(timings)
        first, second = tuple(fns)[:2]
        return first, second

    def enough(timings: Mapping[str, Timing]) -> bool:
        a, b = names(timings)
        return clear(compare(a, timings[a], b, timings[b], paired=True))

    for attempt in range(extra + 1):
        timings = measure_round(fns, rounds, warmup if attempt == 0 else 0, gap_s, probe, enough if early else None)
        a, b = names(timings)
        decision = compare(a, timings[a], b, timings[b], paired=True)
        decision = replace(decision, timings=timings, rounds=attempt + 1, earlier=tuple(earlier))
        if decision.sure or attempt == extra:
            return decision
        earlier.append(decision.why())
    raise AssertionError("unreachable")  # the loop returns on its last attempt
