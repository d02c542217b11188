"""The bucket count ``--step-buckets auto`` keeps: the smallest that meets the budget, else the best
margin; the qnn profile tries up to 8 buckets (a bucket costs scales, a 16-bit promotion costs the
NPU at every call), the cpu profile up to 4 (each bucket is one more session's memory)."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np

from edgekit.quantize.bucketing import BucketState
from edgekit.quantize.buckets import AUTO_COUNTS, AUTO_COUNTS_QNN
from edgekit.quantize.qnn import QnnProfile

SNR_LIMIT = 30.0


def _choose(auto: tuple[int, ...], snr_by_count: dict[int, float]) -> tuple[BucketState, list[int]]:
    """A flow run over 8 calls at distinct t whose ranges shrink with t; the candidate built with
    n buckets measures ``snr_by_count[n]`` against a 30 dB budget."""
    run = SimpleNamespace(cfg=SimpleNamespace(step_buckets="auto"), kind="flow", say=lambda msg: None,
                          budget={"snr_db": SNR_LIMIT})
    run.judge = lambda metrics: (metrics["snr_db"] >= SNR_LIMIT, [])
    state = BucketState(run, auto=auto)
    t = np.linspace(0.0, 0.875, 8)
    state.drift = SimpleNamespace(positions=t, amax=np.exp(-3.0 * t)[:, None] * np.array([[1.0, 4.0]]))
    built: list[int] = []

    def build():
        built.append(1 if state.current is None else state.current.n)
        return built[-1]

    state.choose(build, lambda n: {"snr_db": snr_by_count[n]})
    return state, built


def test_auto_keeps_the_smallest_count_that_meets_the_budget():
    state, built = _choose(AUTO_COUNTS_QNN, {1: 20.0, 2: 31.0, 4: 35.0, 8: 38.0})
    assert built == [1, 2] and state.current is not None and state.current.n == 2


def test_where_no_count_meets_the_budget_the_qnn_profile_goes_on_to_8_buckets():
    snr = {1: 20.0, 2: 22.0, 3: 23.0, 4: 24.0, 8: 27.0}
    state, built = _choose(AUTO_COUNTS_QNN, snr)
    assert built == [1, 2, 4, 8] and state.current.n == 8
    assert [t["n"] for t in state.tried] == [1, 2, 4, 8] and not any(t["passed"] for t in state.tried)
    # The cpu profile stops at 4 and keeps its best margin there.
    state, built = _choose(AUTO_COUNTS, snr)
    assert built == [1, 2, 3, 4] and state.current.n == 4


def test_the_profiles_try_their_own_counts():
    run = SimpleNamespace(cfg=SimpleNamespace(target=None, step_buckets="auto"))
    assert QnnProfile(run).buckets.counts() == AUTO_COUNTS_QNN == (1, 2, 4, 8)
    assert max(AUTO_COUNTS) == 4
