"""snr_db: one implementation, one argument order (reference, candidate), for quantize's budget,
check's metrics and run's quality table."""

import math

import numpy as np
import pytest

from edgekit.evaluate import power_ratio_db, snr_db


def test_snr_db_is_reference_power_over_the_candidates_error():
    ref = np.array([[3.0, 4.0]], dtype=np.float32)  # power 25
    cand = ref + np.array([[0.0, 0.5]], dtype=np.float32)  # error power 0.25
    assert snr_db(ref, cand) == pytest.approx(20.0)
    # The order matters: the reference's power is the signal.
    assert snr_db(cand, ref) == pytest.approx(10 * math.log10((9 + 4.5**2) / 0.25))


def test_exact_match_and_no_signal():
    x = np.ones((2, 3))
    assert snr_db(x, x) == math.inf and snr_db(np.zeros(3), np.ones(3)) == -math.inf
    # With a floor an exact match is a finite number (quantize writes it into the manifest).
    assert snr_db(x, x, floor=1e-30) == pytest.approx(10 * math.log10(6 / 1e-30))
    assert power_ratio_db(1.0, 0.0) == math.inf and power_ratio_db(0.0, 1.0) == -math.inf
    assert power_ratio_db(100.0, 1.0) == pytest.approx(20.0)
