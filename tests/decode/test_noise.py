"""The loops' one noise source: float32 Gumbel draws."""

from __future__ import annotations

import numpy as np

from edgekit.decode._noise import gumbel


def test_gumbel_is_float32_finite_and_standard():
    x = gumbel(np.random.default_rng(0), (1000, 1000))
    assert x.dtype == np.float32 and x.shape == (1000, 1000)
    assert np.isfinite(x).all()
    # Standard Gumbel: mean = Euler-Mascheroni 0.5772, variance pi^2/6 = 1.645 (1e6 draws: se ~1e-3).
    assert abs(float(x.mean()) - 0.5772) < 0.01
    assert abs(float(x.var()) - np.pi**2 / 6) < 0.02


def test_gumbel_is_reproducible_and_fills_out():
    a = gumbel(np.random.default_rng(3), (4, 5))
    out = np.empty((4, 5), np.float32)
    b = gumbel(np.random.default_rng(3), (4, 5), out=out)
    assert b is out
    np.testing.assert_array_equal(a, b)


def test_gumbel_zero_uniform_does_not_give_minus_infinity():
    class Zeros:
        def random(self, out, dtype):
            out[...] = 0.0
            return out

    x = gumbel(Zeros(), (3,))
    assert np.isfinite(x).all() and float(x.min()) > -5
