"""The bucket count ``--step-buckets auto`` keeps: the smallest that meets the budget, else the best
margin; the qnn profile tries up to 8 buckets (a bucket costs scales, a 16-bit promotion costs the
NPU at every call), the cpu profile up to 4 (each bucket is one more session's memory)."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

from edgekit.quantize.buckets.ranges import AUTO_COUNTS
from edgekit.quantize.buckets.state import BucketState
from edgekit.quantize.cpu.fallback import FallbackProfile
from edgekit.quantize.qnn.profile import AUTO_COUNTS_QNN, QnnProfile

SNR_LIMIT = 30.0


def _choose(
    auto: tuple[int, ...],
    snr_by_count: dict[int, float],
    memory_by_count: dict[int, float] | None = None,
    bound: float = 1.2,
    requested: int | str = "auto",
) -> tuple[BucketState, list[int]]:
    """A flow run over 8 calls at distinct t whose ranges shrink with t; the candidate built with
    n buckets measures ``snr_by_count[n]`` against a 30 dB budget and, where ``memory_by_count``
    is given, adds that ratio of one scale's memory on the budget runtime."""
    run = SimpleNamespace(
        cfg=SimpleNamespace(step_buckets=requested, bucket_memory=bound),
        kind="flow",
        say=lambda msg: None,
        budget={"snr_db": SNR_LIMIT},
        warnings=[],
    )
    run.warn = run.warnings.append
    run.judge = lambda metrics: (metrics["snr_db"] >= SNR_LIMIT, [])
    state = BucketState(run, auto=auto)
    t = np.linspace(0.0, 0.875, 8)
    state.drift = SimpleNamespace(positions=t, amax=np.exp(-3.0 * t)[:, None] * np.array([[1.0, 4.0]]))
    built: list[int] = []

    def build():
        built.append(1 if state.current is None else state.current.n)
        return built[-1]

    if memory_by_count is not None:
        state.memory_ratio = lambda model, runtime: memory_by_count[model]
    state.choose(build, lambda n: {"snr_db": snr_by_count[n]}, memory=None if memory_by_count is None else "openvino")
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


def test_auto_does_not_try_a_count_that_adds_more_memory_than_the_bound():
    """OpenVINO: every bucket is one more compiled model. A count past --bucket-memory is not
    decoded, nor any larger one; the best margin among those tried is kept, and the row says why."""
    snr = {1: 20.0, 2: 28.0, 3: 29.0, 4: 31.0}
    state, built = _choose(AUTO_COUNTS, snr, memory_by_count={2: 1.15, 3: 1.31, 4: 1.5})
    assert built == [1, 2, 3] and state.current.n == 2  # 4 would meet the budget, but 3 is already past the bound
    rows = {t["n"]: t for t in state.tried}
    assert rows[2]["memory_ratio"] == 1.15 and "margin" in rows[2]
    assert rows[3] == {
        "n": 3,
        "boundaries": rows[3]["boundaries"],
        "memory_ratio": 1.31,
        "passed": False,
        "skipped": "memory > 1.2x",
    }
    assert 4 not in rows
    # A looser bound lets 4 through, and 4 meets the budget.
    state, built = _choose(AUTO_COUNTS, snr, memory_by_count={2: 1.15, 3: 1.31, 4: 1.5}, bound=2.0)
    assert built == [1, 2, 3, 4] and state.current.n == 4


def test_an_explicit_count_is_taken_as_asked_with_a_warning_and_a_zero_bound_measures_nothing():
    snr = {1: 20.0, 2: 28.0, 3: 29.0, 4: 31.0}
    over = {2: 9.0, 3: 9.0, 4: 9.0}
    state, built = _choose(AUTO_COUNTS, snr, memory_by_count=over, requested=4)  # --step-buckets 4: as asked
    assert state.current.n == 4 and state.tried[-1]["memory_ratio"] == 9.0 and state.tried[-1]["passed"]
    assert state.run.warnings == [
        "--step-buckets 4: on openvino the 4 bucket graphs add 9.00x the memory of one scale "
        "(over --bucket-memory 1.2; --step-buckets auto keeps within it)"
    ]
    state, built = _choose(AUTO_COUNTS, snr, memory_by_count=over, bound=0)  # --bucket-memory 0
    assert built == [1, 2, 3, 4] and state.current.n == 4 and not any("memory_ratio" in t for t in state.tried)


@pytest.mark.parametrize("profile,weighed", [("cpu", "openvino"), ("trt", None)])
def test_only_the_cpu_profile_bounds_auto_by_the_budget_runtimes_memory(profile, weighed):
    """trt deploys TensorRT plans: what its budget runtime (ORT) holds says nothing of their memory
    (the entries' ``bucket_memory``)."""
    from edgekit.quantize import quantize_profile

    run = SimpleNamespace(
        cfg=SimpleNamespace(
            profile=profile,
            entry=quantize_profile(profile),
            runtime="openvino",
            settings=SimpleNamespace(),
            step_buckets="auto",
        )
    )
    fallback = FallbackProfile(run)
    seen = {}

    class Chosen(Exception):
        pass

    def choose(build, measure, note="", memory=None):
        seen["memory"] = memory
        raise Chosen

    fallback.buckets.choose = choose
    with pytest.raises(Chosen):
        fallback.search()
    assert seen == {"memory": weighed}


def test_in_use_names_the_step_that_sets_the_buckets():
    state, _ = _choose(AUTO_COUNTS, {1: 20.0, 2: 35.0})
    assert state.in_use() is state.current is not None  # 2 buckets met the budget
    state.use(1)  # one scale: no buckets
    with pytest.raises(RuntimeError, match=r"use\(n\) with n > 1 must run first"):
        state.in_use()
