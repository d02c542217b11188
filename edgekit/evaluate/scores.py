"""Quality of a decode output: ground-truth scores where the model has them (the demo corpus),
a user's metric hook (``--metric module:function``), and which direction is better."""

from __future__ import annotations

from collections.abc import Callable, Mapping

import numpy as np

from edgekit._userhooks import load_callable
from edgekit.bundle import Bundle
from edgekit.errors import EdgekitError
from edgekit.models.corpus import score as corpus_score

# Ground-truth metrics (edgekit.models.corpus) and whether a higher value is better. A user
# metric hook's metrics count as higher-is-better (return -loss for a loss).
HIGHER_IS_BETTER: dict[str, bool] = {
    "validity": True,
    "event_accuracy": True,
    "nll_per_token": False,
    "snr_db": True,
    "l1": False,
}


def power_ratio_db(signal: float, noise: float) -> float:
    """10·log10(signal / noise) of two powers (sums of squares); +inf for no noise (an exact
    match), -inf for no signal."""
    if noise <= 0:
        return float("inf")
    if signal <= 0:
        return float("-inf")
    return float(10 * np.log10(signal / noise))


def snr_db(reference: np.ndarray, candidate: np.ndarray, *, floor: float = 0.0) -> float:
    """SNR in dB of ``candidate`` against ``reference`` (same shape, any dtype; float64 sums
    over all elements): 10·log10(Σ reference² / Σ (candidate − reference)²). ``floor``: both
    powers at least this (1e-30 keeps an exact match a finite number that a JSON document holds)."""
    ref = np.asarray(reference, dtype=np.float64)
    err = np.asarray(candidate, dtype=np.float64) - ref
    return power_ratio_db(max(float(np.sum(ref**2)), floor), max(float(np.sum(err**2)), floor))


def score(bundle: Bundle, output: np.ndarray, cond: Mapping[str, np.ndarray]) -> dict[str, float] | None:
    """Ground-truth quality of a decode output, where the bundle's model has one (demo models)."""
    if not bundle.ground_truth:
        return None
    return corpus_score(bundle.ground_truth, output, cond)


def output_name(kind: str) -> str:
    return "frames" if kind == "flow" else "tokens"


MetricHook = Callable[[np.ndarray, Mapping[str, np.ndarray]], Mapping[str, float]]


def load_metric_hook(ref: str) -> MetricHook:
    """Import a user quality metric ``package.module:function`` or ``path/file.py:function``.

    THIS RUNS USER CODE (the module is imported, the function called on every check). The
    function takes (output, cond): output int64 [N, L] tokens or float32 [N, T, C] frames, cond
    {conditioning input: array [N, ...]}, and returns {metric name: float}, higher = better
    (return -loss for a loss). Its metrics are compared like the demo models' ground truth.
    """

    return load_callable(ref, "metric hook")


def run_metric_hook(hook: MetricHook, ref: str, output: np.ndarray, cond: Mapping[str, np.ndarray]) -> dict[str, float]:
    """Call a user metric and check what it returned: {name: finite-or-nan float}."""
    try:
        result = hook(output, cond)
    except (Exception, SystemExit) as exc:  # a sys.exit() in user code must not end edgekit with no word
        raise EdgekitError(f"metric hook {ref!r} raised {type(exc).__name__}: {exc}") from exc
    if not isinstance(result, Mapping) or not result:
        raise EdgekitError(
            f"metric hook {ref!r} returned {type(result).__name__}; valid: a non-empty dict of name -> float"
        )
    out: dict[str, float] = {}
    for name, value in result.items():
        try:
            out[str(name)] = float(value)
        except (TypeError, ValueError):
            raise EdgekitError(f"metric hook {ref!r} returned {name!r} = {value!r}; valid: a float") from None
    return out
