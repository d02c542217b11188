"""What a power sampler hands back: timestamped samples and the energy arithmetic over them.

Energy comes from cumulative counters where the platform has them (NVML total energy, RAPL,
ODPM): the difference across the window. Elsewhere it is the time-weighted average power (the
trapezoid rule between samples) times the window duration. A rail missing from some samples is
averaged over the intervals where both ends have it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from functools import cached_property
from typing import Any

# The key samplers use when the total is the sum of rails rather than one input rail.
TOTAL_KEY = "total"
# Below this share of the window covered by the total rail's samples, say the energy is extrapolated.
MIN_COVERAGE = 0.95


@dataclass(frozen=True)
class PowerSample:
    t_ns: int  # time.monotonic_ns() at the reading
    rails_mw: Mapping[str, float]
    # Cumulative energy in mJ from an arbitrary origin (already unwrapped), where the platform
    # counts energy itself. Empty for power-only sensors.
    counters_mj: Mapping[str, float] = field(default_factory=dict)


@dataclass(frozen=True)
class Unavailable:
    """No power figure from ``probe``, and why (a report prints the reason, never a number)."""

    probe: str
    reason: str

    def to_json(self) -> dict[str, Any]:
        return {"probe": self.probe, "available": False, "reason": self.reason}


@dataclass(frozen=True)
class _Energy:
    mj: float | None
    source: str
    notes: tuple[str, ...]


@dataclass(frozen=True)
class PowerTrace:
    """Samples of one measured window ``[start_ns, stop_ns]`` (``time.monotonic_ns``)."""

    probe: str
    start_ns: int
    stop_ns: int
    samples: tuple[PowerSample, ...]
    total_rail: str | None  # key in rails_mw / counters_mj that is the total draw
    total_source: str  # how the total was derived, in words
    errors: tuple[str, ...] = ()  # sampler failures during the window (the run itself went on)
    notes: tuple[str, ...] = ()  # platform caveats the report should print
    # True where rails_mw were derived from counter differences (RAPL, ODPM): then a counter that
    # did not move leaves no independent power reading to fall back on.
    power_from_counters: bool = False

    @property
    def duration_s(self) -> float:
        return (self.stop_ns - self.start_ns) / 1e9

    @property
    def rails(self) -> list[str]:
        names = {r for s in self.samples for r in s.rails_mw} | {r for s in self.samples for r in s.counters_mj}
        return sorted(names)

    def rail_average_mw(self) -> dict[str, float]:
        """Time-weighted average power per rail (counter difference / time where counted)."""
        out: dict[str, float] = {}
        for rail in self.rails:
            avg = _counter_average_mw(self.samples, rail)
            if avg is None:
                avg, _ = _trapezoid_average_mw(self.samples, rail)
            if avg is not None:
                out[rail] = avg
        return out

    @property
    def total_average_mw(self) -> float | None:
        """Energy / window duration: None exactly when the energy is unavailable."""
        if self.energy_mj is None or self.duration_s <= 0:
            return None
        return self.energy_mj / self.duration_s

    @property
    def energy_mj(self) -> float | None:
        return self._energy.mj

    @property
    def energy_source(self) -> str:
        return self._energy.source

    @property
    def all_notes(self) -> tuple[str, ...]:
        return self.notes + self._energy.notes

    @cached_property
    def _energy(self) -> _Energy:
        rail, window_s = self.total_rail, self.duration_s
        if rail is None:
            return _Energy(None, "unavailable", ("no total rail: energy not derived",))
        notes: list[str] = []
        counted = [s for s in self.samples if rail in s.counters_mj]
        if len(counted) >= 2:
            delta = counted[-1].counters_mj[rail] - counted[0].counters_mj[rail]
            if delta > 0:
                span_s = (counted[-1].t_ns - counted[0].t_ns) / 1e9
                if span_s > 0 and span_s < MIN_COVERAGE * window_s:
                    notes.append(
                        f"energy counter read over {span_s / window_s:.0%} of the window; scaled to the window"
                    )
                    delta *= window_s / span_s
                return _Energy(delta, f"energy counter ({self.probe})", tuple(notes))
            if delta < 0:
                notes.append("the energy counter went backwards during the window (driver reload?): not used")
            else:
                notes.append(
                    f"the energy counter did not advance during the {window_s * 1e3:.0f} ms window (it updates "
                    "in steps; NVML every ~20-100 ms): not reported as 0 J; run more iterations"
                )
            if self.power_from_counters:
                return _Energy(None, "unavailable", tuple(notes))
        avg, covered_s = _trapezoid_average_mw(self.samples, rail)
        if avg is None or covered_s == 0:
            notes.append(
                f"fewer than two power samples of {rail!r} in the {window_s * 1e3:.0f} ms window: "
                "run longer or sample faster"
            )
            return _Energy(None, "unavailable", tuple(notes))
        if window_s > 0 and covered_s < MIN_COVERAGE * window_s:
            notes.append(
                f"power samples cover {covered_s / window_s:.0%} of the window; "
                "energy extrapolated at the average power"
            )
        return _Energy(avg * window_s, f"integrated power samples (trapezoid) of {rail}", tuple(notes))

    def to_json(self, samples: bool = True) -> dict[str, Any]:
        doc: dict[str, Any] = {
            "probe": self.probe,
            "available": True,
            "duration_s": self.duration_s,
            "n_samples": len(self.samples),
            "total_rail": self.total_rail,
            "total_source": self.total_source,
            "total_average_mw": self.total_average_mw,
            "energy_mj": self.energy_mj,
            "energy_source": self.energy_source,
            "rail_average_mw": self.rail_average_mw(),
            "errors": list(self.errors),
            "notes": list(self.all_notes),
        }
        if samples:
            doc["samples"] = [
                {"t_ms": (s.t_ns - self.start_ns) / 1e6, "rails_mw": dict(s.rails_mw)} for s in self.samples
            ]
        return doc


def _trapezoid_average_mw(samples: Sequence[PowerSample], rail: str) -> tuple[float | None, float]:
    """(time-weighted average mW, seconds covered) over intervals whose both ends have ``rail``.
    One sample alone gives its value and zero coverage; none gives None."""
    energy = 0.0
    covered_ns = 0
    seen: list[float] = []
    prev: PowerSample | None = None
    for s in samples:
        if rail in s.rails_mw:
            seen.append(s.rails_mw[rail])
            if prev is not None and rail in prev.rails_mw:
                dt = s.t_ns - prev.t_ns
                energy += 0.5 * (prev.rails_mw[rail] + s.rails_mw[rail]) * dt
                covered_ns += dt
        prev = s
    if covered_ns > 0:
        return energy / covered_ns, covered_ns / 1e9
    if seen:
        return (seen[0] if len(seen) == 1 else sum(seen) / len(seen)), 0.0
    return None, 0.0


def _counter_average_mw(samples: Sequence[PowerSample], rail: str) -> float | None:
    counted = [s for s in samples if rail in s.counters_mj]
    if len(counted) < 2 or counted[-1].t_ns <= counted[0].t_ns:
        return None
    delta = counted[-1].counters_mj[rail] - counted[0].counters_mj[rail]
    return delta / ((counted[-1].t_ns - counted[0].t_ns) / 1e9)


@dataclass(frozen=True)
class EnergyPerDecode:
    """Energy per decode, gross and above the idle baseline (``None`` with ``reason`` when the
    trace has no energy)."""

    n_decodes: int
    gross_mj: float | None
    above_idle_mj: float | None
    idle_mw: float | None
    average_mw: float | None
    reason: str | None = None

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def energy_per_decode_mj(trace: PowerTrace, n_decodes: int, idle: PowerTrace | None = None) -> EnergyPerDecode:
    """Energy per decode = trace energy / decodes (MLPerf: average W x duration / queries);
    above idle subtracts the idle average power over the same duration, and is None with the
    reason where that leaves nothing (a draw no higher than idle is noise, not a negative energy)."""
    if n_decodes <= 0:
        raise ValueError(f"n_decodes={n_decodes} must be positive")
    energy, avg = trace.energy_mj, trace.total_average_mw
    idle_mw = idle.total_average_mw if idle is not None else None
    if energy is None:
        return EnergyPerDecode(
            n_decodes, None, None, idle_mw, avg, "; ".join(trace.all_notes) or "no energy in the trace"
        )
    above: float | None = None
    reason: str | None = None
    if idle is not None:
        if idle_mw is None:
            reason = "idle baseline has no power figure: " + ("; ".join(idle.all_notes) or "no samples")
        else:
            above = (energy - idle_mw * trace.duration_s) / n_decodes
            if above <= 0:
                # A draw at or below idle is the baseline's drift and the sensor's noise, not a
                # decode that gave energy back: no figure rather than a negative one.
                average = "unknown" if avg is None else f"{avg:.0f} mW"
                reason = (
                    f"the decode drew no more than the idle baseline ({average} average vs {idle_mw:.0f} mW idle): "
                    "no energy above idle to report"
                )
                above = None
    return EnergyPerDecode(n_decodes, energy / n_decodes, above, idle_mw, avg, reason)
