"""The MaskGIT mask schedule in float32, as MaskGIT's JAX code (x64 off) and the common PyTorch
port compute it: ``mask_len = floor(N0 * schedule((step + 1) / K))`` with every operand float32.
At L = 64, K = 12, step 8, 64·cos(π/3) is 32.0 in float64 but 31.999998 in float32."""

from __future__ import annotations

import math

import numpy as np
import pytest

from edgekit.decode.schedules import masked_floor
from edgekit.export.fused import masked_mask_counts

LENGTHS = (7, 16, 64, 100, 256)
SCHEDULES = ("cosine", "linear", "square", "cubic", "pow1.5", "log", "exp")


def reference_floor(method: str, step: int, num_iter: int, n0: int) -> int:
    """maskgit/libml/mask_schedule.py + parallel_decode.py transcribed with float32 operands."""
    f = np.float32
    ratio = f(1.0) * f(step + 1) / f(num_iter)
    unknown = f(n0)
    if method in ("linear", "uniform"):
        mask_ratio = f(1.0) - ratio
    elif method in ("square", "cubic") or method.startswith("pow"):
        exponent = {"square": 2.0, "cubic": 3.0}.get(method) or float(method.replace("pow", ""))
        mask_ratio = f(1.0) - ratio ** f(exponent)
    elif method == "cosine":
        mask_ratio = np.cos(f(math.pi / 2.0) * ratio)
    elif method == "log":
        mask_ratio = -np.log2(ratio) / np.log2(unknown)
    else:  # exp
        mask_ratio = f(1.0) - np.exp2(-np.log2(unknown) * (f(1.0) - ratio))
    mask_ratio = np.clip(mask_ratio, f(1e-6), f(1.0))
    return int(np.floor(unknown * mask_ratio))


def test_the_issue_case_differs_from_float64():
    assert masked_floor("cosine", 7, 12, 64) == 31  # 64·cos(π/3): 31.999998 in float32, floor 31
    assert math.floor(64 * math.cos(math.pi / 2 * 8 / 12)) == 32  # what float64 gave


@pytest.mark.parametrize("schedule", SCHEDULES)
def test_every_k_up_to_32_matches_a_float32_transcription(schedule):
    for n0 in LENGTHS:
        for k in range(1, 33):
            got = [int(masked_floor(schedule, s, k, n0)) for s in range(k)]
            want = [reference_floor(schedule, s, k, n0) for s in range(k)]
            assert got == want, (schedule, n0, k)
            # per-row N0 arrays take the same path
            rows = masked_floor(schedule, k - 1, k, np.array([n0, n0]))
            assert rows.tolist() == [want[-1]] * 2


@pytest.mark.parametrize("schedule", ("cosine", "linear", "log"))
def test_fused_graph_counts_agree_with_the_host_rule(schedule):
    for n0 in LENGTHS:
        for k in range(1, 33):
            unknown, want = n0, []
            for s in range(k - 1):
                unknown = max(1, min(unknown - 1, reference_floor(schedule, s, k, n0)))
                want.append(unknown)
            assert masked_mask_counts(k, schedule, n0).tolist() == want + [0], (schedule, n0, k)
