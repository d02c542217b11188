"""The qnn profile's promotion search: the smallest prefix of the promotion order that holds the
budget, found on the CPU EP's QDQ simulation and decided on the HTP backend, with every candidate
checked against that simulation first (``disagreeing``). The functions take the ``QnnProfile``
whose ``build``, ``measure``, ``open_candidate``, ``open_simulation`` and ``disagreeing`` they call."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from edgekit.evaluate import snr_db
from edgekit.quantize.budget import check
from edgekit.quantize.config import BUDGET_RULES

# A candidate the HTP backend computes this many dB below its CPU simulation (one recorded call,
# both against FP32) has a tensor whose 16-bit form the HTP does not implement as QDQ says. On
# the flow demo's 8 bucket graphs (402 promotions by bucket) the two agreed within 0.8 dB at
# every step but the last, which was 23.9 dB apart; the last step weighs most in the result, so
# a gap under 3 dB there could still cost the budget.
HTP_AGREE_DB = 1.5

# A promotion: a tensor at 16 bit in every step bucket's graph, or (bucket, tensor) in that one's only.
Promotion = str | tuple[int, str]


def tensor_of(p: Promotion) -> str:
    return p if isinstance(p, str) else p[1]


def tensors_in(promoted: Sequence[Promotion], bucket: int) -> list[str]:
    """The tensors at 16 bit in step bucket ``bucket``'s graph."""
    return [tensor_of(p) for p in promoted if isinstance(p, str) or p[0] == bucket]


def promotion_label(p: Promotion) -> str:
    return p if isinstance(p, str) else f"{p[1]} (bucket {p[0]})"


def promote(
    profile: Any,
    order: Sequence[Promotion],
    model: Path,
    passed: bool,
    metrics: dict[str, Any],
    rows: list[dict[str, Any]],
):
    """Promote the first tensors of ``order`` until the budget holds: the smallest count found
    by doubling groups (1, 2, 4, ...) and then bisecting between the last failing and the first
    passing group (doubling alone promoted 32 where 17 might do). Emulating 16-bit tensors
    costs the HTP backend up to 10x per forward, so that search runs on the CPU EP's QDQ
    simulation. Before the HTP backend decodes a candidate, one recorded call per step bucket checks that
    it computes what the simulation does (``disagreeing``); a tensor whose promotion it does
    not is left at 8 bit and the count searched again. The HTP backend then decides. Where it
    fails a count the simulation passed, its shortfall on each budget key (``htp_offset``)
    tightens the simulation's budget and the count is searched again from there; a quarter more
    where the shortfall is on a key the simulation does not measure."""
    run = profile.run
    forced = list(profile.forced)
    order = [t for t in order if t not in forced]
    offset: dict[str, float] = {}  # per budget key: how far the HTP backend fell short of the simulation
    simulated: dict[tuple[int, tuple[Promotion, ...]], tuple[bool, dict[str, Any]]] = {}  # by prefix

    def simulation(k: int) -> tuple[bool, dict[str, Any]]:
        """(budget met, metrics) of the first ``k`` of ``order`` on the CPU simulation, each prefix decoded once."""
        key = (k, tuple(order[:k]))  # a refusal changes the prefix behind a count
        if key not in simulated:
            simulated[key] = profile.measure(profile.build(forced + order[:k]), forced + order[:k], backend="cpu")[:2]
        return simulated[key]

    def holds_on_cpu(k: int) -> bool:
        passed, metrics = simulation(k)
        return passed and check(metrics, tightened(run.budget, offset))[0]

    def search(failing: int, k: int, limit: int) -> tuple[int, int]:
        """(the last failing, the smallest holding) count in (failing, limit] on the simulation,
        galloping from the first guess ``k`` (steps double from ``failing``), then bisecting."""
        base, k = failing, min(max(k, failing + 1), limit)
        while k < limit and not holds_on_cpu(k):
            failing, k = k, min(base + 2 * (k - base), limit)
        if k - failing > 1 and (k < limit or holds_on_cpu(k)):
            while k - failing > 1:  # more promotions never hurt: bisect (failing, k]
                mid = (failing + k) // 2
                failing, k = (failing, mid) if holds_on_cpu(mid) else (mid, k)
        return failing, k

    limit = len(order) if run.cfg.max_fallback is None else min(run.cfg.max_fallback, len(order))
    failing, k = 0, 1  # 0 promoted failed already (the caller measured it)
    while True:
        failing, k = search(failing, k, limit)  # after a refused tensor: the count that held, checked again
        bad = profile.disagreeing(forced, order[:k])
        if bad is None:
            break
        order = refuse(profile, bad, order)
        limit = min(limit, len(order))
    promoted: list[Promotion] = forced
    while not passed and len(promoted) - len(forced) < limit:
        if len(promoted) > len(forced):  # the next count may bring a tensor the HTP computes unlike QDQ
            bad = profile.disagreeing(forced, order[:k])
            if bad is not None:
                order = refuse(profile, bad, order)
                limit = min(limit, len(order))
                k = min(k, limit)
                continue
        promoted = forced + order[:k]
        run.say(f"promote {len(promoted)} tensor(s) to 16 bit")
        model = profile.build(promoted)
        passed, metrics, rows = profile.measure(model, promoted)
        if passed or k >= limit:  # the HTP backend's verdict on the last count is final
            break
        if htp_offset(offset, run.budget, simulation(k)[1], metrics):
            _, k = search(k, k + max(1, k // 32), limit)  # the count that holds the tightened budget
        else:  # short on a key the simulation does not measure
            k = min(k + max(1, k // 4), limit)
    return model, promoted, passed, metrics, rows


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


def refuse(profile: Any, bad: tuple[Promotion, float], order: list[Promotion]) -> list[Promotion]:
    """Leave ``bad``'s tensor at 8 bit in every bucket: warn, record, drop it from ``order``."""
    tensor = tensor_of(bad[0])
    profile.run.warn(
        f"the HTP backend computes {tensor} at 16 bit unlike its QDQ simulation (one recorded call, {bad[1]:.1f} dB "
        "below it): left at 8 bit"
    )
    profile.refused.append({"tensor": tensor, "htp_below_simulation_db": bad[1]})
    return [p for p in order if tensor_of(p) != tensor]


def disagreeing(
    profile: Any, forced: list[Promotion], candidates: Sequence[Promotion]
) -> tuple[Promotion, float] | None:
    """The first of ``candidates`` (promoted in order, after ``forced``) whose promotion makes the
    HTP backend's output on a recorded call more than ``HTP_AGREE_DB`` below its CPU
    simulation's (both against FP32), and that gap; None when the whole set agrees. One call
    per step bucket (its graph has its own tensors at 16 bit) is checked with every candidate;
    where one disagrees, a bisection over the prefixes finds the tensor on that call.

    On the flow demo, the GELU's tanh input at 16 bit (its Mul, the Tanh after it) gave 13.9
    dB per forward on the HTP backend against 19.8 in the simulation, and a candidate that met
    the budget in the simulation (38.7 dB) gave 18.9 dB on the HTP backend."""
    run = profile.run
    feeds = run.traj.feeds
    buckets = profile.buckets.current
    if buckets is None:
        picks = [len(feeds) // 2]  # mid-loop
    else:
        picks = [mine[len(mine) // 2] for mine in profile.buckets.calls_by_bucket(buckets) if mine]
    out = next(iter(run.bundle.outputs))
    reference = {i: np.array(run.fp32_rt.run(feeds[i])[out], copy=True) for i in picks}

    def gap(n: int, on: Sequence[int]) -> tuple[float, int]:
        model = profile.build(forced + list(candidates[:n]))
        worst = (-np.inf, on[0])
        with profile.open_candidate(model) as htp, profile.open_simulation(model) as sim:
            for i in on:
                on_htp = snr_db(reference[i], htp.run(feeds[i])[out], floor=1e-30)
                on_sim = snr_db(reference[i], sim.run(feeds[i])[out], floor=1e-30)
                worst = max(worst, (on_sim - on_htp, i))
        return worst

    if not candidates:
        return None
    top, call = gap(len(candidates), picks)
    if top <= HTP_AGREE_DB:
        return None
    run.say(f"the HTP backend and its simulation disagree by {top:.1f} dB: find the tensor")
    lo, hi = 0, len(candidates)  # prefix lo agrees (the forced set was decoded on the HTP already), hi does not
    worst = top
    while hi - lo > 1:
        mid = (lo + hi) // 2
        g, _ = gap(mid, [call])
        if g > HTP_AGREE_DB:
            hi, worst = mid, g
        else:
            lo = mid
    return candidates[hi - 1], worst
