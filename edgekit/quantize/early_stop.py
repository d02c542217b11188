"""Stopping a candidate's held-out decodes once it cannot meet the budget's SNR.

Flow's ``snr_db`` pools every held-out row: 10·log10(S / N), S the FP32 frames' power summed over
all n rows (known before any INT8 decode: the reference is decoded once per quantize), N the INT8
error's power summed over them. N only grows as rows are decoded, so after k rows
10·log10(S / N_k) is an upper bound on the candidate's final SNR: once it is under the limit the
candidate fails whatever the other n - k rows do, and decoding them is wasted. On Sana-600M both
all-INT8 candidates of ``--method auto`` missed 30 dB by 11-13 dB, 16 rows of ~6 s each.

A stopped measurement keeps what its rows say: ``snr_db`` over the rows decoded (at most the bound,
so it fails the budget as the whole set would), the bound, and each decoded row's signal and noise
powers (``row_power``), so two candidates are compared on the rows both decoded
(``compare_on_common_rows``). At least ``min_rows`` rows are decoded before a stop (EARLY_MIN_ROWS:
a comparison of two candidates on fewer says little). ``numpy`` only.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from edgekit.evaluate.scores import power_ratio_db

# The fewest held-out rows a candidate is judged on before it may stop: a quarter of the default
# flow set (16 rows), so that --method auto compares its two range sets on 4 rows at least.
EARLY_MIN_ROWS = 4
FLOOR = 1e-30  # as budget.compare's snr_db: an exact match stays a finite number


class Hopeless(Exception):
    """Raised inside a held-out decode by ``SnrWatch`` once the candidate cannot reach the limit;
    ``metrics``: what the decoded rows say (``SnrWatch.metrics``)."""

    def __init__(self, metrics: dict[str, Any]):
        super().__init__(metrics["stopped_early"])
        self.metrics = metrics


@dataclass
class SnrWatch:
    """Watches a candidate's held-out decode batch by batch (``evaluate(after_batch=...)``) against
    the FP32 ``reference`` outputs [n, ...] and raises ``Hopeless`` once ``snr_db`` >= ``limit``
    cannot hold (after ``min_rows`` rows at least, and never after the last)."""

    reference: np.ndarray
    limit: float
    min_rows: int = EARLY_MIN_ROWS
    row_power: list[tuple[float, float]] = field(default_factory=list)  # (signal, noise) per decoded row

    def __post_init__(self) -> None:
        ref = np.asarray(self.reference, dtype=np.float64)
        self.signal = float(np.sum(ref**2))
        self.rows = int(ref.shape[0])

    def after_batch(self, i: int, output: np.ndarray) -> None:
        """Batch ``i``'s output [batch, ...] (the last batch padded past n: those rows are dropped)."""
        start = len(self.row_power)
        got = np.asarray(output, dtype=np.float64)[: self.rows - start]
        ref = np.asarray(self.reference[start : start + len(got)], dtype=np.float64)
        for r, g in zip(ref, got):
            self.row_power.append((float(np.sum(r**2)), float(np.sum((g - r) ** 2))))
        done = len(self.row_power)
        if done >= max(self.min_rows, 1) and done < self.rows and self.bound() < self.limit:
            raise Hopeless(self.metrics())

    def bound(self) -> float:
        """The highest ``snr_db`` the whole set can still reach: no error on every row left."""
        return power_ratio_db(max(self.signal, FLOOR), max(sum(n for _, n in self.row_power), FLOOR))

    def metrics(self) -> dict[str, Any]:
        """The budget metrics of the rows decoded so far (flow: ``snr_db``; the ground-truth drop
        needs every row's output: not measured)."""
        done = len(self.row_power)
        return {
            "snr_db": rows_snr_db(self.row_power),
            "snr_db_bound": self.bound(),
            "rows_judged": done,
            "rows": self.rows,
            "row_power": [list(p) for p in self.row_power],
            "stopped_early": (
                f"after {done} of {self.rows} held-out rows: at most {self.bound():.2f} dB SNR over all "
                f"{self.rows} (no error on the rest), under the budget's {self.limit:g} dB"
            ),
            "gt_snr_drop_db": None,
            "quality_fp32": None,
            "quality_int8": None,
        }


def rows_snr_db(row_power: Sequence[Sequence[float]]) -> float:
    """``snr_db`` pooled over the rows whose (signal, noise) powers are given."""
    return power_ratio_db(max(sum(s for s, _ in row_power), FLOOR), max(sum(n for _, n in row_power), FLOOR))


def compare_on_common_rows(a: Mapping[str, Any], b: Mapping[str, Any]) -> tuple[float, float, int] | None:
    """(a's snr_db, b's snr_db, rows) over the first rows both decoded, where either measurement
    stopped early and both kept their rows' powers; None where both judged every row (their own
    ``snr_db`` compare as they are)."""
    if "rows_judged" not in a and "rows_judged" not in b:
        return None
    pa, pb = a.get("row_power"), b.get("row_power")
    if not pa or not pb:
        return None
    k = min(len(pa), len(pb))
    return rows_snr_db(pa[:k]), rows_snr_db(pb[:k]), k
