"""Which (solver, steps) each chunk gets: a fixed choice, or an adaptive one from a cost model.

The adaptive policy picks from a *ladder*: the bundle's measured quality-per-NFE table
(``manifest["flow_quality"]``, run.budget) reduced to its Pareto front — each rung costs more
NFE than the one below and buys more SNR. Its cost model is the per-NFE latency *under the
current load*: an exponential moving average of (chunk wall time / chunk NFE) over the chunks
every stream finished recently (a shared device makes a chunk's wall time grow with the number
of chunks in flight), scaled by how many more chunks are queued now than when it was measured.

Per chunk, with ``slack`` = ms left to the chunk's deadline:
- step down at once (to the best rung whose predicted time fits ``safety × slack``) when the
  current rung does not fit: a late chunk is an audible glitch;
- step up one rung only after ``patience`` consecutive chunks in which the next rung would have
  fit in ``headroom × slack``: hysteresis, so a rung that just fits does not flap.
Every switch is logged (stream, chunk, from, to, reason) and counted.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from edgekit.decode.dispatch import MAX_STEPS
from edgekit.decode.flow import NFE_PER_STEP, SOLVERS
from edgekit.errors import UsageError, one_of

POLICIES = ("fixed", "adaptive")


@dataclass(frozen=True)
class Rung:
    solver: str
    steps: int
    nfe: int
    snr_db: float | None = None  # vs the many-step reference, from the quality table

    @property
    def label(self) -> str:
        return f"{self.solver}x{self.steps}"


def rung(solver: str, steps: int, snr_db: float | None = None) -> Rung:
    one_of("--solver", solver, SOLVERS)
    if not 1 <= steps <= MAX_STEPS:  # the decode's own bound, checked before a stream starts
        raise UsageError(f"--steps {steps} is invalid; valid: an integer in [1, {MAX_STEPS}]")
    return Rung(solver, steps, steps * NFE_PER_STEP[solver], snr_db)


def ladder(table: Sequence[Mapping[str, Any]], max_nfe: int | None = None) -> list[Rung]:
    """The Pareto front of a quality table (rows: solver, steps, nfe, snr_db), cheapest first:
    each rung has more NFE and strictly more SNR than the one before. ``max_nfe`` caps the top."""
    rows = sorted(table, key=lambda r: (int(r["nfe"]), -float(r["snr_db"])))
    out: list[Rung] = []
    for r in rows:
        if max_nfe is not None and int(r["nfe"]) > max_nfe:
            continue
        if out and (int(r["nfe"]) == out[-1].nfe or float(r["snr_db"]) <= (out[-1].snr_db or float("-inf"))):
            continue
        out.append(Rung(str(r["solver"]), int(r["steps"]), int(r["nfe"]), float(r["snr_db"])))
    if not out:
        raise UsageError(f"the quality table has no entry with NFE <= {max_nfe}; valid: a larger cap")
    return out


@dataclass
class CostModel:
    """Per-NFE wall ms under the current load, shared by every stream (thread-safe)."""

    per_nfe_ms: float  # prior: measured on the idle device before the run
    alpha: float = 0.2  # EWMA weight of the newest chunk: adapts within a few chunks
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)
    _in_flight_at_measure: float = 1.0

    def observe(self, wall_ms: float, nfe: int, in_flight: int) -> None:
        """A chunk of ``nfe`` evaluations took ``wall_ms`` with ``in_flight`` chunks on the device."""
        if nfe <= 0:
            return
        with self._lock:
            self.per_nfe_ms += self.alpha * (wall_ms / nfe - self.per_nfe_ms)
            self._in_flight_at_measure += self.alpha * (max(in_flight, 1) - self._in_flight_at_measure)

    def predict_ms(self, nfe: int, in_flight: int) -> float:
        """Expected wall ms of a chunk of ``nfe`` evaluations started with ``in_flight`` chunks
        (itself included) on the device."""
        with self._lock:
            # The device interleaves the chunks in flight: wall time per NFE scales with their count.
            return nfe * self.per_nfe_ms * max(in_flight, 1) / max(self._in_flight_at_measure, 1.0)


@dataclass(frozen=True)
class Switch:
    stream: int
    chunk: int
    from_rung: str
    to_rung: str
    reason: str
    slack_ms: float
    predicted_ms: float


class FixedPolicy:
    """Every chunk the same (solver, steps)."""

    name = "fixed"

    def __init__(self, choice: Rung):
        self.choice = choice
        self.switches: list[Switch] = []

    def choose(self, stream: int, chunk: int, slack_ms: float, in_flight: int) -> Rung:
        return self.choice

    def observe(self, rung_: Rung, wall_ms: float, in_flight: int) -> None:
        pass

    def reset(self) -> None:
        self.switches.clear()


class AdaptivePolicy:
    """Per chunk, the best rung the cost model says meets the deadline (see module doc)."""

    name = "adaptive"

    def __init__(
        self, rungs: Sequence[Rung], cost: CostModel, *, safety: float = 0.8, headroom: float = 0.5, patience: int = 3
    ):
        if not rungs:
            raise UsageError("the adaptive policy needs at least one (solver, steps) rung")
        self.rungs = list(rungs)
        self.cost = cost
        self.safety, self.headroom, self.patience = safety, headroom, patience
        self._lock = threading.Lock()
        self._level: dict[int, int] = {}  # stream -> rung index; streams start at the top
        self._calm: dict[int, int] = {}  # stream -> consecutive chunks the next rung would have fit
        self.switches: list[Switch] = []

    def choose(self, stream: int, chunk: int, slack_ms: float, in_flight: int) -> Rung:
        with self._lock:
            top = len(self.rungs) - 1
            level = self._level.get(stream, top)
            predict = lambda i: self.cost.predict_ms(self.rungs[i].nfe, in_flight)  # noqa: E731
            new, reason = level, ""
            if predict(level) > self.safety * slack_ms:
                new = level
                while new > 0 and predict(new) > self.safety * slack_ms:
                    new -= 1
                reason = "down: predicted over the slack"
                self._calm[stream] = 0
            elif level < top and predict(level + 1) <= self.headroom * slack_ms:
                self._calm[stream] = self._calm.get(stream, 0) + 1
                if self._calm[stream] >= self.patience:
                    new, reason = level + 1, f"up: {self.patience} chunks with headroom"
                    self._calm[stream] = 0
            else:
                self._calm[stream] = 0
            if new != level:
                self.switches.append(
                    Switch(
                        stream,
                        chunk,
                        self.rungs[level].label,
                        self.rungs[new].label,
                        reason,
                        float(slack_ms),
                        float(predict(new)),
                    )
                )
            self._level[stream] = new
            return self.rungs[new]

    def observe(self, rung_: Rung, wall_ms: float, in_flight: int) -> None:
        self.cost.observe(wall_ms, rung_.nfe, in_flight)

    def reset(self) -> None:
        """Forget rungs and switches (after a warm-up); the cost model keeps what it learned."""
        with self._lock:
            self._level.clear()
            self._calm.clear()
            self.switches.clear()
