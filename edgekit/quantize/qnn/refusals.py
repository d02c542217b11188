"""What the HTP backend computes unlike its QDQ simulation: the first promotion that makes it so
(``disagreeing``: one recorded call per step bucket, then a bisection over the order's prefixes)
and leaving it at 8 bit with what goes with it (``refuse``). Both take the ``QnnProfile`` whose
``build``, ``open_candidate`` and ``open_simulation`` they call and whose records they extend."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from edgekit.evaluate import snr_db
from edgekit.quantize.qnn.search import HTP_UNFIXABLE_DB, Promotion, tensor_of
from edgekit.runtimes.qnn_session import QnnCompileError

# A candidate the HTP backend computes this many dB below its CPU simulation (one recorded call,
# both against FP32) has a tensor whose 16-bit form the HTP does not implement as QDQ says. On
# the flow demo's 8 bucket graphs (402 promotions by bucket) the two agreed within 0.8 dB at
# every step but the last, which was 23.9 dB apart; the last step weighs most in the result, so
# a gap under 3 dB there could still cost the budget.
HTP_AGREE_DB = 1.5


def refuse(profile: Any, bad: tuple[Promotion, float], order: list[Promotion]) -> list[Promotion]:
    """Leave ``bad``'s tensor at 8 bit in every bucket: warn, record, drop it from ``order``; and
    with it every candidate of its kind (``GraphFacts.kinds``: the same producing op, read by the
    same ops) and every candidate whose ties take it to 16 bit, recorded as ``like``. The HTP's
    kernels are per op: the flow demo's tanh defect was three refusals of one kind, a bisection
    on the HTP each (0.5-3.5 min on a 10 M-parameter model); the final HTP decode still judges
    the set."""
    tensor = tensor_of(bad[0])
    if math.isinf(bad[1]):
        profile.run.warn(f"the HTP backend refuses the graph with {tensor} at 16 bit: left at 8 bit")
        profile.refused.append({"tensor": tensor, "htp_below_simulation_db": None, "htp_refused_graph": True})
    else:
        profile.run.warn(
            f"the HTP backend computes {tensor} at 16 bit unlike its QDQ simulation (one recorded call, "
            f"{bad[1]:.1f} dB below it): left at 8 bit"
        )
        profile.refused.append({"tensor": tensor, "htp_below_simulation_db": bad[1]})
    kinds = profile.facts.kinds
    kind = kinds.get(tensor)
    if kind is None or kind[0] == "initializer":  # a weight's kind is every MatMul's: no inference from one
        kind = None
    like = sorted({tensor_of(p) for p in order if kind and tensor_of(p) != tensor and kinds.get(tensor_of(p)) == kind})
    if like:
        profile.run.warn(
            f"{len(like)} more {kind[0]} output(s) read by {'/'.join(kind[1]) or 'nothing'} left at 8 bit with "
            f"{tensor} (the same kind, e.g. {like[0]})"
        )
    # A promotion that takes the tensor to 16 bit with it (``promotion_ties``: a Gather table's output
    # takes its table) would bring the same disagreement back, one more bisection each.
    gone = {tensor, *like}
    carry = sorted({tensor_of(p) for p in order if gone & profile.ties.get(tensor_of(p), frozenset())} - gone)
    if carry:
        profile.run.warn(f"{len(carry)} promotion(s) that take {tensor} to 16 bit left at 8 bit too (e.g. {carry[0]})")
    profile.refused_like += [{"tensor": t, "like": tensor, "why": "same kind"} for t in like]
    profile.refused_like += [{"tensor": t, "like": tensor, "why": "takes it to 16 bit"} for t in carry]
    gone |= set(carry)
    return [p for p in order if tensor_of(p) not in gone]


def disagreeing(
    profile: Any, forced: list[Promotion], candidates: Sequence[Promotion]
) -> tuple[Promotion, float] | None:
    """The first of ``candidates`` (promoted in order, after ``forced``) whose promotion makes the
    HTP backend's output on a recorded call more than ``HTP_AGREE_DB`` further below its CPU
    simulation's (both against FP32) than the graph with ``forced`` alone is, and the gap it
    adds; None when the whole set adds none. One call per step bucket (its graph has its own
    tensors at 16 bit) is checked with every candidate; where one disagrees, a bisection over the
    prefixes finds the tensor on that call.

    On the flow demo, the GELU's tanh input at 16 bit (its Mul, the Tanh after it) gave 13.9
    dB per forward on the HTP backend against 19.8 in the simulation, and a candidate that met
    the budget in the simulation (38.7 dB) gave 18.9 dB on the HTP backend. The graph with no
    promotion is measured too (once per forced set and buckets): on a user's masked transformer
    it was itself 22 dB below its simulation on the HTP, and judged by the whole gap, each
    bisection blamed whichever candidate came first (four innocent refusals, 14 minutes)."""
    run = profile.run
    feeds = run.traj.feeds
    buckets = profile.buckets.current
    if buckets is None:
        picks = [len(feeds) // 2]  # mid-loop
    else:
        picks = [mine[len(mine) // 2] for mine in profile.buckets.calls_by_bucket(buckets) if mine]
    out = next(iter(run.bundle.outputs))
    reference = {i: np.array(run.fp32_rt.run(feeds[i])[out], copy=True) for i in picks}

    def gap(n: int, on: Sequence[int]) -> dict[int, float]:
        """{call: how many dB the HTP backend is below the simulation there} with ``n`` candidates."""
        model = profile.build(forced + list(candidates[:n]))
        try:
            htp = profile.open_candidate(model)
        except QnnCompileError:
            # The HTP backend refused the graph (a 16-bit op it has no kernel for, as 16-bit
            # Transposes of a one-layer AR step were): as far from its simulation as can be.
            return {i: math.inf for i in on}
        with htp, profile.open_simulation(model) as sim:
            return {
                i: snr_db(reference[i], sim.run(feeds[i])[out], floor=1e-30)
                - snr_db(reference[i], htp.run(feeds[i])[out], floor=1e-30)
                for i in on
            }

    if not candidates:
        return None
    key = (tuple(forced), tuple(picks), repr(buckets))
    if key not in profile.base_gaps:
        profile.base_gaps[key] = base = gap(0, picks)
        if max(base.values()) > HTP_AGREE_DB:
            profile.base_gap_db = max(base.values())
            run.warn(
                f"the HTP backend computes the graph with no promotion {max(base.values()):.1f} dB below its QDQ "
                "simulation (one recorded call): an op it computes unlike QDQ at 8 bit, which no promotion fixes "
                f"(a promotion is judged by the gap it adds; `edgekit debug {run.bundle.root} --candidate qnn:int8` "
                "finds the op)"
            )
    base = profile.base_gaps[key]
    if max(base.values()) > HTP_UNFIXABLE_DB:
        return None
    top = gap(len(candidates), picks)
    call = max(picks, key=lambda i: top[i] - base[i] if math.isfinite(base[i]) else -math.inf)
    if not math.isfinite(base[call]) or top[call] - base[call] <= HTP_AGREE_DB:
        return None  # (a forced set the HTP refuses to compile leaves nothing to blame on a promotion)
    worst = top[call] - base[call]
    run.say(f"the HTP backend and its simulation disagree by {worst:.1f} dB more: find the tensor")
    lo, hi = 0, len(candidates)  # prefix lo adds no gap, hi does
    while hi - lo > 1:
        mid = (lo + hi) // 2
        g = gap(mid, [call])[call] - base[call]
        if g > HTP_AGREE_DB:
            hi, worst = mid, g
        else:
            lo = mid
    return candidates[hi - 1], worst
