"""Chunked flow decoding (decode/chunked.py): chunk geometry, and chunked == whole decoding for a
frame-local network (a network that sees no neighbours loses nothing to windows)."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from edgekit.decode.chunked import ChunkSpec, decode_chunk, decode_chunked, plan_chunks, utterance_noise
from edgekit.decode.flow import FlowDecodeConfig, decode_flow
from edgekit.errors import UsageError
from edgekit.runtimes.base import BaseRuntime
from edgekit.spec import TensorSpec


class FrameLocalFlow(BaseRuntime):
    """x float32[B, T, C], t float32[B], tokens int64[B, T/r] -> v float32[B, T, C], frame by frame:
    v = tanh(x)·(1 − t) + table[token of the frame]. Reuses one output buffer (as IOBinding does)."""

    name = "frame-local"

    def __init__(self, frames: int, channels: int = 3, r: int = 2, vocab: int = 5, seed: int = 0, batch: int = 1):
        self.r = r
        self.table = np.random.default_rng(seed).normal(size=(vocab + 1, channels)).astype(np.float32)
        super().__init__(
            {
                "x": TensorSpec((batch, frames, channels), "float32"),
                "t": TensorSpec((batch,), "float32"),
                "tokens": TensorSpec((batch, frames // r), "int64"),
            },
            {"v": TensorSpec((batch, frames, channels), "float32")},
        )
        self._out = np.empty((batch, frames, channels), dtype=np.float32)

    def _run_impl(self, feeds):
        tok = np.repeat(feeds["tokens"], self.r, axis=1)
        self._out[...] = np.tanh(feeds["x"]) * (1 - feeds["t"][:, None, None]) + self.table[tok]
        return {"v": self._out}


def meta(frames: int, window: int, context: int, lookahead: int = 0, channels: int = 3) -> dict:
    return {
        "channels": channels,
        "frames": window,
        "frames_per_token": 2,
        "utterance_frames": frames,
        "conditioning": {"tokens": {"uncond": 5}},
        "chunk": {"frames": window - context - lookahead, "context": context, "lookahead": lookahead},
    }


@pytest.mark.parametrize("total,f,c,a", [(32, 8, 8, 0), (32, 4, 8, 4), (30, 8, 4, 2), (16, 16, 0, 0)])
def test_chunks_cover_the_utterance_once_with_static_windows(total, f, c, a):
    spec = ChunkSpec(f, c, a, frames_per_token=2)
    chunks = plan_chunks(total, spec)
    emitted = np.concatenate([np.arange(ch.start, ch.stop) for ch in chunks])
    assert np.array_equal(emitted, np.arange(total))  # every frame once, in order
    for ch in chunks:
        assert 0 <= ch.window_start <= ch.start and ch.stop <= ch.window_start + spec.window <= total
        assert ch.start - ch.window_start <= max(c, spec.window - (ch.stop - ch.start))  # asked for, or the tail's
    needed = [ch.tokens_needed(spec) for ch in chunks]
    assert needed == sorted(needed) and needed[-1] == total // 2  # a prefix that only grows


def test_bad_geometry_is_a_usage_error():
    with pytest.raises(UsageError, match="multiple of"):
        ChunkSpec(3, 0, 0, frames_per_token=2)
    with pytest.raises(UsageError, match="shorter than"):
        plan_chunks(8, ChunkSpec(8, 8, 0, frames_per_token=2))
    with pytest.raises(UsageError, match="chunk window graph"):
        ChunkSpec.from_meta({"frames": 8})


@pytest.mark.parametrize("solver,steps,lookahead", [("euler", 3, 0), ("rk4", 2, 0), ("heun", 2, 2), ("midpoint", 1, 4)])
def test_chunked_equals_whole_for_a_frame_local_network(solver, steps, lookahead):
    total, window = 24, 12
    tokens = np.random.default_rng(3).integers(0, 5, size=(1, total // 2))
    cfg = FlowDecodeConfig(steps=steps, solver=solver, seed=7)
    whole = decode_flow(
        FrameLocalFlow(total),
        {"channels": 3, "frames": total, "conditioning": {"tokens": {"uncond": 5}}},
        {"tokens": tokens},
        cfg,
    ).x
    m = meta(total, window, context=4, lookahead=lookahead)
    chunked, nfe = decode_chunked(FrameLocalFlow(window), m, {"tokens": tokens}, total, cfg)
    np.testing.assert_allclose(chunked, whole, rtol=1e-5, atol=1e-5)
    n_chunks = len(plan_chunks(total, ChunkSpec.from_meta(m)))
    assert nfe == n_chunks * cfg.steps * {"euler": 1, "rk4": 4, "heun": 2, "midpoint": 2}[solver]


@pytest.mark.parametrize("graph_batch", [1, 2])  # cond and uncond rows in two calls, or in one
def test_chunked_with_guidance_equals_whole(graph_batch):
    """Classifier-free guidance (g != 1) in the window graph: each chunk's unconditional rows get
    the uncond token over its window, so a frame-local network decodes exactly as whole."""
    total, window = 24, 12
    tokens = np.random.default_rng(4).integers(0, 5, size=(1, total // 2))
    cfg = FlowDecodeConfig(steps=2, solver="midpoint", guidance=2.5, seed=5)
    whole_meta = {"channels": 3, "frames": total, "conditioning": {"tokens": {"uncond": 5}}}
    whole = decode_flow(FrameLocalFlow(total, batch=graph_batch), whole_meta, {"tokens": tokens}, cfg).x
    plain = decode_flow(FrameLocalFlow(total), whole_meta, {"tokens": tokens}, replace(cfg, guidance=1.0)).x
    assert not np.allclose(whole, plain)  # guidance changes the result: the test would see it dropped
    chunked, _ = decode_chunked(
        FrameLocalFlow(window, batch=graph_batch), meta(total, window, 4), {"tokens": tokens}, total, cfg
    )
    np.testing.assert_allclose(chunked, whole, rtol=1e-5, atol=1e-5)


def test_context_frames_stay_on_their_path():
    """The velocity the solver sees for context frames is the path's, whatever the network says:
    with emitted frames x1 and noise z, a context frame ends at x1 exactly (t = 1)."""
    total, window = 16, 8
    spec = ChunkSpec(4, 4, 0, frames_per_token=2)
    cfg = FlowDecodeConfig(steps=2, solver="rk4", seed=1)
    noise = utterance_noise((1, total, 3), cfg)
    emitted = np.random.default_rng(0).normal(size=(1, total, 3)).astype(np.float32)
    chunk = plan_chunks(total, spec)[2]  # window [4, 12): context [4, 8)
    seen = []

    class Spy(FrameLocalFlow):
        def _run_impl(self, feeds):
            seen.append(np.array(feeds["x"][:, : chunk.start - chunk.window_start]))
            return super()._run_impl(feeds)

    tokens = np.zeros((1, total // 2), dtype=np.int64)
    frames, _ = decode_chunk(Spy(window), meta(total, window, 4), spec, chunk, {"tokens": tokens}, noise, emitted, cfg)
    assert frames.shape == (1, 4, 3)
    z, x1 = noise[:, 4:8], emitted[:, 4:8]
    np.testing.assert_allclose(seen[0], z, atol=1e-6)  # t = 0: pure noise
    a = 1 - spec.sigma_min
    for x in seen:  # every evaluation sees a point on the straight path z -> x1
        t = np.mean((x - z) / (x1 - a * z))
        np.testing.assert_allclose(x, (1 - a * t) * z + t * x1, atol=1e-5)


def test_noise_drawn_per_chunk_equals_the_whole_draw():
    cfg = FlowDecodeConfig(seed=11)
    whole = utterance_noise((1, 32, 4), cfg)
    rng = np.random.default_rng(11)
    per_chunk = np.concatenate([rng.standard_normal((1, 8, 4)) for _ in range(4)], axis=1).astype(np.float32)
    np.testing.assert_array_equal(whole, per_chunk)
