"""The qnn profile's promotion search: the smallest prefix of the promotion order that holds the
budget, found on the CPU EP's QDQ simulation and decided on the HTP backend, with every candidate
checked against that simulation first (``disagreeing``). The functions take the ``QnnProfile``
whose ``build``, ``measure``, ``open_candidate``, ``open_simulation`` and ``disagreeing`` they call."""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from edgekit.quantize.budget import check
from edgekit.quantize.config import BUDGET_RULES

# The graph with no promotion this many dB below its simulation on the HTP backend
# (``refusals.disagreeing`` measures it): an op the HTP computes unlike QDQ at 8 bit, which no
# promotion fixes, so none is blamed and the search stops; the HTP backend decides what it has.
# A user's masked transformer was 22 dB below: the search went on refusing tensors for 1.6 dB
# over that, 14 min into its 6-min bound when stopped.
HTP_UNFIXABLE_DB = 6.0

# Past the search's bounds, at most this many more refusals (``refused_one``: a bisection on the HTP
# backend each, 3.5 min on a 10 M-parameter model) are found before the prefix that agreed goes
# to the HTP as it is. Each takes a kind of tensor along (``refusals.refuse``); unbounded, a user's
# model went 12 min past the 6-min bound one (mis-blamed) refusal at a time.
LATE_REFUSALS = 2

# A promotion: a tensor at 16 bit in every step bucket's graph, or (bucket, tensor) in that one's only.
Promotion = str | tuple[int, str]


def tensor_of(p: Promotion) -> str:
    return p if isinstance(p, str) else p[1]


def tensors_in(promoted: Sequence[Promotion], bucket: int) -> list[str]:
    """The tensors at 16 bit in step bucket ``bucket``'s graph."""
    return [tensor_of(p) for p in promoted if isinstance(p, str) or p[0] == bucket]


def promotion_label(p: Promotion) -> str:
    return p if isinstance(p, str) else f"{p[1]} (bucket {p[0]})"


@dataclass(frozen=True)
class SearchBounds:
    """What the promotion search may spend before it stops searching: candidates decoded on the
    CPU simulation, held-out decodes on the HTP backend (the last one's verdict is final), and
    seconds of wall time from the search's start. Past a bound the search says so in one line and
    goes on with the smallest count that held on the simulation (else the largest it decoded),
    which the HTP backend then decides. Measured on the flow demo (16 held-out rows, 2-core AMD
    EPYC): a simulated candidate costs ~9 s (8 bucket graphs built, 16 decodes), the held-out
    decode on the HTP backend's x86 emulation 4-5 min with 401 promotions (two sessions); the
    search found its count in 10 simulated candidates (90 s), and the whole run took 6.9 min."""

    simulated: int = 24
    htp: int = 6
    seconds: float = 360.0


class _Spent(Exception):
    """A bound of ``SearchBounds`` was reached (the message says which)."""


def promote(
    profile: Any,
    order: Sequence[Promotion],
    start: tuple[bool, dict[str, Any]],
    guess: int | None = None,
    bounds: SearchBounds = SearchBounds(),
    clock: Callable[[], float] = time.perf_counter,
    decided: tuple[bool, dict[str, Any], list[dict[str, Any]]] | None = None,
):
    """Promote the first tensors of ``order`` until the budget holds; returns (model, promoted,
    passed, metrics, rows) of the HTP backend's verdict (``PromotionSearch``). ``start``: the
    simulation's (passed, metrics) of no promotion (``profile.forced`` only); ``guess``: the count
    the ranking predicts (``sensitivity.predicted_count``; None: 1); ``decided``: the HTP
    backend's (failing) verdict on no promotion, where the simulation passed it."""
    return PromotionSearch(profile, order, start, bounds, clock).decide(guess, decided)


class PromotionSearch:
    """The smallest prefix of the promotion order that holds the budget. The count is searched
    on the CPU EP's QDQ simulation (emulating 16-bit tensors costs the HTP backend up to 10x per
    forward, and its forward is ~50x the simulation's): galloping up from the first guess or,
    where the guess holds already, down from it, then bisecting between the last failing and the
    first holding count (doubling alone promoted 32 where 17 might do).

    Before the HTP backend decodes a candidate, one recorded call per step bucket checks that it
    computes what the simulation does (``disagreeing``); a tensor whose promotion it does not is
    left at 8 bit and the count searched again. The HTP backend then decides. Where it fails a
    count the simulation passed, its shortfall on each budget key (``htp_offset``) tightens the
    simulation's budget and the count is searched again from there; a quarter more where the
    shortfall is on a key the simulation does not measure. ``bounds`` (``SearchBounds``, read on
    ``clock``) stop the search with one line."""

    def __init__(
        self,
        profile: Any,
        order: Sequence[Promotion],
        start: tuple[bool, dict[str, Any]],
        bounds: SearchBounds,
        clock: Callable[[], float],
    ):
        self.profile, self.run, self.bounds, self.clock = profile, profile.run, bounds, clock
        self.forced: list[Promotion] = list(profile.forced)
        self.order: list[Promotion] = [t for t in order if t not in self.forced]
        self.start = start
        self.offset: dict[str, float] = {}  # per budget key: how far the HTP backend fell short of the simulation
        # (count, the prefix behind it) -> the simulation's (passed, metrics): each prefix decoded once
        self.simulated: dict[tuple[int, tuple[Promotion, ...]], tuple[bool, dict[str, Any]]] = {(0, ()): start}
        self.began = clock()
        self.spent = {"simulated": 0, "htp": 0}
        cap = self.run.cfg.max_fallback
        self.limit = len(self.order) if cap is None else min(cap, len(self.order))

    # ---- the simulation --------------------------------------------------------------------------
    def bound_reached(self) -> str | None:
        if self.spent["simulated"] >= self.bounds.simulated:
            return f"{self.spent['simulated']} simulated candidates"
        if self.clock() - self.began >= self.bounds.seconds:
            return f"{self.clock() - self.began:.0f} s (bound {self.bounds.seconds:.0f} s)"
        return None

    def simulation(self, k: int) -> tuple[bool, dict[str, Any]]:
        """(budget met, metrics) of the first ``k`` of the order on the CPU simulation."""
        key = (k, tuple(self.order[:k]))  # a refusal changes the prefix behind a count
        if key not in self.simulated:
            why = self.bound_reached()
            if why is not None:
                raise _Spent(why)
            self.spent["simulated"] += 1
            promoted = self.forced + self.order[:k]
            self.simulated[key] = self.profile.measure(self.profile.build(promoted), promoted, backend="cpu")[:2]
            shown = ", ".join(
                f"{name} {value:.3g}"
                for name, value in self.simulated[key][1].items()
                if name in self.run.budget and isinstance(value, (int, float))
            )
            self.run.say(
                f"simulated {len(promoted)} tensor(s) at 16 bit: {'holds' if self.holds_on_cpu(k) else 'fails'}"
                f"{' (' + shown + ')' if shown else ''}; candidate {self.spent['simulated']} of at most "
                f"{self.bounds.simulated}, {self.clock() - self.began:.0f} s"
            )
        return self.simulated[key]

    def holds_on_cpu(self, k: int) -> bool:
        passed, metrics = self.simulation(k)
        return passed and check(metrics, tightened(self.run.budget, self.offset))[0]

    def search(self, failing: int, k: int) -> tuple[int, int]:
        """(the last failing, the smallest holding) count in (failing, limit] on the simulation:
        from the first guess ``k``, galloping up (steps double from ``failing``) while it fails,
        or down (steps double from 1/16 of the way) while it holds, then bisecting."""
        holds, limit = self.holds_on_cpu, self.limit
        base, k = failing, min(max(k, failing + 1), limit)
        if holds(k):
            step = max(1, (k - failing) // 16)
            while k - step > failing:
                if not holds(k - step):
                    failing = k - step
                    break
                k, step = k - step, 2 * step
        else:
            while k < limit and not holds(k):
                failing, k = k, min(base + 2 * (k - base), limit)
        if k - failing > 1 and (k < limit or holds(k)):
            while k - failing > 1:  # more promotions never hurt: bisect (failing, k]
                mid = (failing + k) // 2
                failing, k = (failing, mid) if holds(mid) else (mid, k)
        return failing, k

    def searched(self, failing: int, k: int) -> int:
        """The count ``search`` finds or, where a bound stops it, the smallest count that held so
        far (else the largest decoded), said in one line."""
        try:
            return self.search(failing, k)[1]
        except _Spent as spent_on:
            mine = [c for (c, prefix) in self.simulated if prefix == tuple(self.order[:c])]
            held = [c for c in mine if self.holds_on_cpu(c)]
            k = min(held) if held else min(max(mine + [k]), self.limit)
            which = "the smallest count that held on the simulation" if held else "none held: the largest decoded"
            self.run.say(
                f"search bound reached ({spent_on}): the HTP backend decides {len(self.forced) + k} tensor(s) at "
                f"16 bit, {which}"
            )
            return k

    # ---- the HTP backend -------------------------------------------------------------------------
    def decide(self, guess: int | None, decided: tuple[bool, dict[str, Any], list[dict[str, Any]]] | None = None):
        """(model, promoted, passed, metrics, rows): the search from ``guess``, decided on the HTP
        backend; ``decided``: its failing verdict on no promotion (the search goes on from there)."""
        run, order = self.run, self.order
        if order and (not self.start[0] or decided is not None):
            run.say(
                f"promotion search over {self.limit} candidate(s): the count on the CPU simulation (at most "
                f"{self.bounds.simulated} decoded), decided on the HTP backend (at most {self.bounds.htp} held-out "
                f"decodes), within {self.bounds.seconds / 60:.0f} min"
            )
        if decided is not None:
            self.spent["htp"] += 1
            k = self.next_count(0, decided[1])
        else:
            k = 0 if self.start[0] or not order else self.searched(0, guess or 1)
        final, late = False, 0  # past the bounds: refusals found, and whether what agreed goes to the HTP as it is
        while True:
            if k > 0 and not final and self.refused_one(k):  # a count may bring a tensor the HTP computes unlike QDQ
                k = min(k, self.limit)
                why = self.bound_reached()
                late += why is not None
                if why is not None and late > LATE_REFUSALS:  # each is one more bisection on the HTP backend
                    k, final = min(self.agreed, self.limit), True
                    run.say(
                        f"search bound reached ({why}): the HTP backend decides the {len(self.forced) + k} "
                        "tensor(s) at 16 bit that agreed with its simulation"
                    )
                elif (k, tuple(self.order[:k])) not in self.simulated or not self.holds_on_cpu(k):
                    k = self.searched(k - 1, k)  # the count that held, checked again
                continue
            if not final and (self.profile.base_gap_db or 0.0) > HTP_UNFIXABLE_DB:
                final = True  # no promotion fixes it: what the search has goes to the HTP as it is
                run.say(
                    f"the HTP backend is {self.profile.base_gap_db:.1f} dB below its simulation with no promotion, "
                    f"past what promotions fix: it decides the {len(self.forced) + k} tensor(s) at 16 bit as they are"
                )
            promoted = self.forced + self.order[:k]
            run.say(f"promote {len(promoted)} tensor(s) to 16 bit")
            model = self.profile.build(promoted)
            decoding = self.clock()
            passed, metrics, rows = self.profile.measure(model, promoted)
            self.spent["htp"] += 1
            if passed or final or k >= self.limit or self.out_of_time(decoding, len(promoted)):
                return model, promoted, passed, metrics, rows  # the HTP backend's verdict on the last count
            k = self.next_count(k, metrics)

    def refused_one(self, k: int) -> bool:
        """Whether the HTP backend computes a tensor of the first ``k`` unlike its simulation
        (``disagreeing``); that tensor is then left out of the order."""
        before = self.order[:k]
        bad = self.profile.disagreeing(self.forced, before)
        if bad is None:
            return False
        self.order = self.profile.refuse(bad, self.order)
        self.limit = min(self.limit, len(self.order))
        kept = set(self.order)  # the prefix before the tensor agreed (the bisection's), less what went with it
        self.agreed = sum(1 for p in before[: before.index(bad[0])] if p in kept)
        return True

    def out_of_time(self, decoding: float, promoted: int) -> bool:
        """No HTP decode past ``bounds.htp``, nor one that would end past ``bounds.seconds`` (it
        costs about what the last one did); said in one line."""
        now = self.clock()
        if self.spent["htp"] < self.bounds.htp and 2 * now - decoding - self.began <= self.bounds.seconds:
            return False
        self.run.say(
            f"search bound reached ({self.spent['htp']} HTP decode(s), {now - self.began:.0f} s of "
            f"{self.bounds.seconds:.0f}, {now - decoding:.0f} s each): {promoted} tensor(s) at 16 bit "
            "miss the budget on the HTP backend"
        )
        return True

    def next_count(self, k: int, metrics: Mapping[str, Any]) -> int:
        """After the HTP backend failed count ``k``: its shortfall against the simulation tightens
        the simulation's budget and the count is searched again, or a quarter more where the
        shortfall is on a key the simulation does not measure."""
        try:
            learned = htp_offset(self.offset, self.run.budget, self.simulation(k)[1], metrics)
        except _Spent:  # no simulation left to set the HTP's figures against
            learned = False
        if learned:
            return self.searched(k, k + max(1, k // 32))  # the count that holds the tightened budget
        return min(k + max(1, k // 4), self.limit)


def needed_gain_db(metrics: Mapping[str, Any], budget: Mapping[str, float]) -> float | None:
    """How many dB the INT8 model's error against FP32 must fall for ``metrics`` (the simulation's,
    of a candidate) to meet ``budget``'s flow keys, if that error adds in power to the rest:
    ``snr_db`` by its shortfall; ``gt_snr_drop_db`` (the ground-truth SNR lost) from the drop D
    now to the limit d, 10 log10((10^(D/10) - 1) / (10^(d/10) - 1)): the drop is FP32's own error
    against the ground truth plus INT8's against FP32. None where no such key was measured (token
    kinds, a model without ground truth). The search's first guess (``sensitivity.predicted_count``)."""
    needs = []
    if "snr_db" in budget and isinstance(metrics.get("snr_db"), (int, float)) and math.isfinite(metrics["snr_db"]):
        needs.append(float(budget["snr_db"]) - float(metrics["snr_db"]))
    drop = metrics.get("gt_snr_drop_db")
    if "gt_snr_drop_db" in budget and isinstance(drop, (int, float)) and math.isfinite(drop):
        limit = float(budget["gt_snr_drop_db"])
        if drop <= limit:
            needs.append(0.0)
        elif limit <= 0:
            needs.append(math.inf)
        else:
            needs.append(10 * math.log10((10 ** (drop / 10) - 1) / (10 ** (limit / 10) - 1)))
    return max(needs) if needs else None


def _better(key: str) -> int:
    """+1 where a higher value of budget key ``key`` is better (``>=``), -1 where lower is."""
    return 1 if BUDGET_RULES[key][0] == ">=" else -1


def tightened(budget: Mapping[str, float], offset: Mapping[str, float]) -> dict[str, float]:
    """``budget`` with each key's limit moved by ``offset`` against the metric: a ``>=`` key's
    up, a ``<=`` key's down."""
    return {key: limit + _better(key) * offset.get(key, 0.0) for key, limit in budget.items()}


def htp_offset(
    offset: dict[str, float], budget: Mapping[str, float], simulated: Mapping[str, Any], htp: Mapping[str, Any]
) -> bool:
    """Raise ``offset`` to the HTP backend's shortfall against its simulation on each budget
    key both measured (the largest seen so far is kept); True where one grew."""
    grew = False
    for key in budget:
        sim, dev = simulated.get(key), htp.get(key)
        if sim is None or dev is None:
            continue
        short = _better(key) * (sim - dev)
        if short > offset.get(key, 0.0):
            offset[key], grew = float(short), True
    return grew
