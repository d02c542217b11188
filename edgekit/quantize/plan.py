"""What a quantize run will cost, said before it starts, and how far each long step is.

A 600 M-parameter model decodes in tens of seconds on a small CPU, and quantize decodes it many
times: the plan counts those decodes (calibration, the held-out reference, two INT8 passes per
candidate) and, once the first FP32 decode is timed, says about how long each part will take;
``Eta`` then says, at most every ``INTERVAL_S``, how far a step of many decodes is and about when
it ends. The summary keeps the plan beside what the run really cost, in FP32 decodes of the model
(``fp32_decodes``): the unit a user can compare across machines.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

# A step that runs longer than this says how far it is (and no more often than this).
INTERVAL_S = 10.0


def clock_text(seconds: float) -> str:
    """``1:05`` / ``1:02:05``."""
    seconds = max(0, int(round(seconds)))
    h, rest = divmod(seconds, 3600)
    m, s = divmod(rest, 60)
    return f"{h}:{m:02d}:{s:02d}" if h else f"{m}:{s:02d}"


class Eta:
    """``eta(done)`` after each of ``total`` units of a step (decodes, layers): says, at most every
    ``interval`` seconds, "label done/total, elapsed, about T left", from the mean time per unit so
    far. ``clock``: a stand-in in tests."""

    def __init__(
        self,
        label: str,
        total: int,
        say: Callable[[str], None],
        clock: Callable[[], float] = time.perf_counter,
        interval: float = INTERVAL_S,
    ):
        self.label, self.total, self.say, self.clock, self.interval = label, total, say, clock, interval
        self.start = self.last = clock()

    def __call__(self, done: int) -> None:
        now = self.clock()
        if done <= 0 or done >= self.total or now - self.last < self.interval:
            return
        self.last = now
        elapsed = now - self.start
        left = elapsed / done * (self.total - done)
        self.say(f"{self.label} {done}/{self.total}: {clock_text(elapsed)} so far, about {clock_text(left)} left")


@dataclass(frozen=True)
class Plan:
    """The decodes one quantize run makes, in graph batches of the model."""

    calibration: int  # FP32 decodes whose every call is recorded
    heldout: int  # FP32 decodes of the held-out set: the reference every candidate is judged against
    per_candidate: int  # INT8 decodes per candidate (its own decode; its answers on FP32's trajectory)
    # decodes timing INT8 against FP32 at the end (0: not timed, an emulated device); one round: a
    # timing within noise is measured again, up to probes.speed.EXTRA_ROUNDS more rounds; in whole
    # decodes' worth where shorter ones are timed (a long AR decode: quantize.stage.speed_tokens)
    speed: float
    # Why the candidates' INT8 decodes cannot be priced from an FP32 one (they run on an emulated
    # device: the qnn profile's HTP backend in x86 emulation takes minutes per held-out decode
    # where the FP32 one takes seconds); None: priced as FP32 decodes.
    emulated: str | None = None
    # Candidates the fallback form may add after the search (cpu profile: weight-only with up to
    # cpu.form.FORM_EXTRA more layers where weight-only missed the budget), per_candidate each
    form_extra: int = 0
    # --method auto (cpu and trt profiles, with the search): where the minmax ranges' all-INT8 model
    # misses the budget, the percentile ranges are calibrated (one more pass over the recorded calls:
    # each call's histograms within the ranges the minmax pass kept) and their all-INT8 model judged
    # (one more candidate)
    method_alternative: bool = False
    # The percentile pass in forwards of the graph per recorded call (``calibrator.histogram_forwards``:
    # over one fetch group, each group's graph runs the layers up to its last tensor)
    histogram_forwards: float = 1.0

    def estimate(self, decode_s: float) -> dict[str, float]:
        """Seconds per part, from one FP32 decode's time (INT8 decodes counted as FP32 ones: an
        upper bound where INT8 is faster). Calibration reads every recorded call once more."""
        return {
            "fp32_decodes_s": (self.calibration + self.heldout) * decode_s,
            "calibrate_s": self.calibration * decode_s,
            "per_candidate_s": self.per_candidate * decode_s,
            "speed_s": self.speed * decode_s,
        }

    def describe(self, decode_s: float) -> str:
        e = self.estimate(decode_s)
        if self.emulated:
            return (
                f"plan: {self.calibration} calibration + {self.heldout} held-out FP32 decodes ({decode_s:.1f} s each), "
                f"about {clock_text(e['fp32_decodes_s'] + e['calibrate_s'])} with calibration; then "
                f"{self.per_candidate} INT8 decodes per candidate on an emulated device, not priced from "
                f"FP32 ({self.emulated}): each says how far it is"
            )
        first = e["fp32_decodes_s"] + e["calibrate_s"] + e["per_candidate_s"]
        return (
            f"plan: {self.calibration} calibration + {self.heldout} held-out FP32 decodes ({decode_s:.1f} s each), "
            f"then {self.per_candidate} INT8 decodes per candidate (FP32 answered from the reference): about "
            f"{clock_text(first)} until the first candidate is judged, about {clock_text(e['per_candidate_s'])} more "
            "for each fallback the budget needs"
            + (
                f"; if all-INT8 misses it with minmax ranges, about "
                f"{clock_text(e['calibrate_s'] * self.histogram_forwards + e['per_candidate_s'])} more to calibrate "
                "and judge percentile "
                "ranges (--method auto)"
                if self.method_alternative
                else ""
            )
            + (
                f", and up to {self.form_extra} more candidates may follow for the fallbacks' form"
                if self.form_extra
                else ""
            )
        )

    def to_json(self, decode_s: float | None) -> dict[str, Any]:
        doc: dict[str, Any] = {
            "calibration_decodes": self.calibration,
            "heldout_decodes": self.heldout,
            "int8_decodes_per_candidate": self.per_candidate,
            "speed_decodes": self.speed,
            "form_extra_candidates": self.form_extra,
            "method_extra_candidates": int(self.method_alternative),
            "histogram_forwards": self.histogram_forwards,
            "fp32_decode_s": decode_s,
        }
        if decode_s:
            doc["estimate_s"] = self.estimate(decode_s)
        if self.emulated:
            doc["int8_decodes_emulated"] = self.emulated
        return doc


def counting(fns: Mapping[str, Callable[[], object]], each: Callable[[int], None]) -> dict[str, Callable[[], object]]:
    """``fns`` that call ``each(n)`` after the n-th call of any of them: progress through a timing
    (``probes.speed.decide``) without the timing knowing."""
    done = [0]

    def wrap(fn: Callable[[], object]) -> Callable[[], object]:
        def call() -> object:
            out = fn()
            done[0] += 1
            each(done[0])
            return out

        return call

    return {name: wrap(fn) for name, fn in fns.items()}
