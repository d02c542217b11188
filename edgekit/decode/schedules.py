"""How much stays masked after each MaskGIT step, and where a flow solver evaluates time.

Both follow the public reference code (shared/reference/algorithms.md): MaskGIT's
``mask_schedule.py`` for γ(r); Matcha/CosyVoice/F5-TTS for the time grids.
"""

from __future__ import annotations

import math
import re

import numpy as np

from edgekit.errors import UsageError, one_of, unknown

# Names accepted by ``mask_ratio``; "pow<K>" (e.g. "pow3", "pow1.5") is accepted as well.
MASK_SCHEDULES: tuple[str, ...] = ("cosine", "linear", "uniform", "square", "cubic", "log", "exp")
TIME_GRIDS: tuple[str, ...] = ("uniform", "cosine", "sway")

# The sway grid t + s·(cos(π/2·t) − 1 + t) is monotone exactly for these s (derivative ≥ 0 on [0, 1]).
SWAY_RANGE: tuple[float, float] = (-1.0, 1.0 / (math.pi / 2 - 1))

_POW = re.compile(r"pow(\d+(?:\.\d+)?)")
_ALIASES = {"linear": 1.0, "uniform": 1.0, "square": 2.0, "cubic": 3.0}


def _power(schedule: str) -> float | None:
    """The exponent K of a 1 − r^K schedule, or None when ``schedule`` is not one."""
    if schedule in _ALIASES:
        return _ALIASES[schedule]
    match = _POW.fullmatch(schedule)
    return float(match.group(1)) if match and float(match.group(1)) > 0 else None


def check_mask_schedule(schedule: str) -> None:
    """Raise one line naming ``schedule`` and the valid names when it is unknown."""
    if schedule not in MASK_SCHEDULES and _power(schedule) is None:
        raise unknown("mask schedule", schedule, MASK_SCHEDULES, also=", pow<K> (e.g. pow3)")


def mask_ratio(schedule: str, r: np.ndarray | np.floating | float, total_unknown: np.ndarray | int) -> np.ndarray:
    """γ(r): the fraction of the initially unknown tokens still masked after progress ``r``.

    ``r`` in (0, 1] (a float, a numpy float such as ``step_ratio``'s, or an array);
    ``total_unknown`` is N, the unknown count at the start (int or int array [B]), used only by
    "log" and "exp". Returns **float32**, broadcast over ``r`` and ``total_unknown``, clipped to
    [1e-6, 1] as the reference does.

    float32 on purpose: MaskGIT's JAX code (x64 off) and the common PyTorch port compute γ in
    float32, and the mask count is floor(N0·γ). At L = 64, K = 12, step 8: 64·cos(π/3) is 32.0 in
    float64 but 31.999998 in float32, so the floor (and the tokens) differ from the reference.
    """
    check_mask_schedule(schedule)
    f32 = np.float32
    r = np.asarray(r, dtype=f32)
    # log2(N) is 0 for N <= 1; N = 2 keeps the formula finite, and with one unknown token the
    # step's mask length is decided by the max(1, min(unknown - 1, ·)) clamp anyway.
    log2_n = np.log2(np.maximum(np.asarray(total_unknown, dtype=f32), f32(2.0)))
    power = _power(schedule)
    if power is not None:
        gamma = f32(1.0) - r ** f32(power)
    elif schedule == "cosine":
        gamma = np.cos(f32(math.pi / 2) * r)
    elif schedule == "log":
        with np.errstate(divide="ignore"):  # r = 0 gives +inf, clipped to 1 below
            gamma = -np.log2(r) / log2_n
    else:  # "exp"
        gamma = f32(1.0) - np.exp2(-log2_n * (f32(1.0) - r))
    return np.clip(gamma * np.ones_like(log2_n), f32(1e-6), f32(1.0)).astype(f32)


def step_ratio(step: int, steps: int) -> np.float32:
    """The reference's progress after step ``step`` (0-based) of ``steps``: (step + 1) / K in float32."""
    return np.float32(step + 1) / np.float32(steps)


def masked_floor(schedule: str, step: int, steps: int, n_unknown0: np.ndarray | int) -> np.ndarray:
    """floor(N0 · γ((step + 1) / K)) as int64, the product and floor in float32 as the reference
    computes them (``unknown_number_in_the_beginning * mask_ratio``: int32 × float32)."""
    n0 = np.asarray(n_unknown0, dtype=np.float32)
    return np.floor(n0 * mask_ratio(schedule, step_ratio(step, steps), n_unknown0)).astype(np.int64)


def time_grid(grid: str, steps: int, sway: float = -1.0) -> np.ndarray:
    """The solver's time points: float64 [steps + 1], increasing from exactly 0 (noise) to 1 (data).

    "uniform": u = linspace(0, 1, steps + 1); "cosine": 1 − cos(π/2·u) (CosyVoice);
    "sway": u + s·(cos(π/2·u) − 1 + u) with s = ``sway`` (F5-TTS; s < 0 spends steps early).
    """
    one_of("time grid", grid, TIME_GRIDS)
    if not isinstance(steps, (int, np.integer)) or steps < 1:
        raise UsageError(f"steps={steps!r} is invalid; valid: an integer >= 1")
    u = np.linspace(0.0, 1.0, steps + 1)
    if grid == "cosine":
        t = 1.0 - np.cos(math.pi / 2 * u)
    elif grid == "sway":
        low, high = SWAY_RANGE
        if not low <= sway <= high:
            raise UsageError(f"sway={sway!r} gives a non-monotone time grid; valid: {low} <= sway <= {high:.4f}")
        t = u + sway * (np.cos(math.pi / 2 * u) - 1.0 + u)
    else:
        t = u
    # cos(π/2) is 6e-17, not 0: pin the endpoints so the last step lands exactly on data.
    t[0], t[-1] = 0.0, 1.0
    return t
