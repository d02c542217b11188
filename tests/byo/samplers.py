"""Numpy-only condition samplers for the test models (``ModelSpec.condition_sampler``)."""

from __future__ import annotations

import numpy as np


def flow_conditions(rng: np.random.Generator, batch: int) -> dict[str, np.ndarray]:
    """masked_flow: a normal encoder output and prefix frame masks (3..8 valid frames), as a real
    utterance has them, instead of independent 0/1 per frame."""
    lengths = rng.integers(3, 9, batch)
    return {
        "enc": rng.standard_normal((batch, 6, 8)).astype(np.float32),
        "frame_mask": np.arange(8)[None, :] < lengths[:, None],
    }
