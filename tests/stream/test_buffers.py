"""A stream's preallocated buffers (stream/pipeline.py ``StreamBuffers``): the same arrays and
the same token thread for every utterance, the frames they produce equal a fresh chunked decode,
and RSS stays flat over many utterances (a soak in one process). Fake numpy networks, no ONNX."""

from __future__ import annotations

import gc
import threading

import numpy as np
import pytest

from edgekit.decode.chunked import decode_chunked, utterance_noise
from edgekit.decode.flow import FlowDecodeConfig
from edgekit.decode.masked import MaskedDecodeConfig
from edgekit.probes.memory import memory_snapshot
from edgekit.runtimes.base import BaseRuntime
from edgekit.spec import TensorSpec
from edgekit.stream.device import Device, DeviceRuntime
from edgekit.stream.pipeline import StreamBuffers, StreamContext, TokenSource, TokenWorker, run_utterance
from edgekit.stream.policy import FixedPolicy, rung

R, V = 2, 4  # frames per token, vocabulary


class WindowFlow(BaseRuntime):
    """x float32[1, W, C], t float32[1], tokens int64[1, W/r] -> v = table[token] − x·t, one reused output."""

    name = "window-flow"

    def __init__(self, window: int, channels: int):
        super().__init__(
            {
                "x": TensorSpec((1, window, channels), "float32"),
                "t": TensorSpec((1,), "float32"),
                "tokens": TensorSpec((1, window // R), "int64"),
            },
            {"v": TensorSpec((1, window, channels), "float32")},
        )
        self.table = np.random.default_rng(0).normal(size=(V + 1, channels)).astype(np.float32)
        self._out = np.empty((1, window, channels), dtype=np.float32)

    def _run_impl(self, feeds):
        np.multiply(feeds["x"], -feeds["t"][0], out=self._out)
        self._out += self.table[np.repeat(feeds["tokens"], R, axis=1)]
        return {"v": self._out}


class PositionMasked(BaseRuntime):
    """tokens int64[1, L] -> logits float32[1, L, V] favouring id (position mod V); records its threads."""

    name = "position-masked"

    def __init__(self, length: int):
        super().__init__(
            {"tokens": TensorSpec((1, length), "int64")}, {"logits": TensorSpec((1, length, V), "float32")}
        )
        self._out = np.zeros((1, length, V), dtype=np.float32)
        self._out[0, np.arange(length), np.arange(length) % V] = 3.0
        self.threads: set[int] = set()

    def _run_impl(self, feeds):
        self.threads.add(threading.get_ident())
        return {"logits": self._out}


def _context(frames: int, channels: int, chunk: int, scores: list | None = None):
    flow_meta = {
        "channels": channels,
        "frames": 2 * chunk,
        "frames_per_token": R,
        "utterance_frames": frames,
        "conditioning": {"tokens": {"uncond": V}},
        "chunk": {"frames": chunk, "context": chunk, "lookahead": 0},
    }
    length = frames // R
    masked_meta = {"vocab_size": V, "mask_id": V, "seq_len": length, "conditioning": {}}
    device = Device()
    masked = PositionMasked(length)
    tokens = TokenSource("masked", DeviceRuntime(masked, device), masked_meta, MaskedDecodeConfig(steps=2), {})
    score = None if scores is None else (lambda toks, x: scores.append((toks, x, np.array(toks), np.array(x))) or {})
    ctx = StreamContext(
        tokens,
        DeviceRuntime(WindowFlow(2 * chunk, channels), device),
        device,
        flow_meta,
        FlowDecodeConfig(steps=2, solver="midpoint"),
        FixedPolicy(rung("midpoint", 2)),
        score,
        1e3,
        device.clock,
    )
    return ctx, masked


def test_a_stream_reuses_its_buffers_and_token_thread_for_every_utterance():
    scores: list = []
    ctx, masked = _context(frames=32, channels=3, chunk=8, scores=scores)
    buffers = StreamBuffers.for_meta(ctx.flow_meta)
    arrays = (buffers.feed.tokens, buffers.noise, buffers.noise_scratch, buffers.frames)
    worker = TokenWorker(ctx.tokens, "tokens-0")
    try:
        for u in range(3):
            run_utterance(ctx, 0, u, seed=10 + u, buffers=buffers, worker=worker)
    finally:
        worker.close()
    assert all(
        a is b for a, b in zip(arrays, (buffers.feed.tokens, buffers.noise, buffers.noise_scratch, buffers.frames))
    )
    assert all(toks is buffers.feed.tokens and x is buffers.frames for toks, x, _, _ in scores)  # scored in place
    assert len(masked.threads) == 1  # one token thread for the three utterances
    np.testing.assert_array_equal(buffers.noise, utterance_noise(buffers.noise.shape, FlowDecodeConfig(seed=12)))
    for u, (_, _, toks, x) in enumerate(scores):  # in-place decoding == a fresh chunked decode of the same tokens
        cfg = FlowDecodeConfig(steps=2, solver="midpoint", seed=10 + u)
        fresh, _ = decode_chunked(ctx.flow, ctx.flow_meta, {"tokens": toks}, 32, cfg)
        np.testing.assert_array_equal(x, fresh)
    assert not np.array_equal(scores[0][3], scores[1][3])  # each utterance its own noise


def _soak(ctx, utterances: int, warmup: int, leak: list | None) -> int:
    """RSS growth (bytes) over ``utterances`` after ``warmup`` utterances of one stream."""
    buffers = StreamBuffers.for_meta(ctx.flow_meta)
    worker = TokenWorker(ctx.tokens, "tokens-0")
    try:
        for u in range(warmup + utterances):
            if u == warmup:
                gc.collect()
                before = memory_snapshot().rss_bytes
            run_utterance(ctx, 0, u, seed=u, buffers=buffers, worker=worker)
            if leak is not None:  # what per-utterance buffers kept alive would cost
                leak.append(
                    [np.array(a) for a in (buffers.feed.tokens, buffers.noise, buffers.noise_scratch, buffers.frames)]
                )
            ctx.chunks.clear()  # the records are the measurement, not the stream's memory
            ctx.utterances.clear()
    finally:
        worker.close()
    gc.collect()
    return memory_snapshot().rss_bytes - before


def _soak_growths() -> dict[str, int]:
    """One utterance's buffers and the RSS growth over 60 utterances without and with a leak."""
    ctx, _ = _context(frames=512, channels=128, chunk=32)
    per_utterance = StreamBuffers.for_meta(ctx.flow_meta).nbytes  # ~1 MiB: tokens, noise (+ scratch), frames
    leaked: list = []
    return {
        "per_utterance": per_utterance,
        "growth": _soak(ctx, utterances=60, warmup=5, leak=None),
        "leaky": _soak(ctx, utterances=60, warmup=5, leak=leaked),
    }


@pytest.mark.skipif(memory_snapshot().rss_bytes is None, reason="needs /proc/self/status (current RSS)")
def test_rss_stays_flat_over_many_utterances_and_a_leak_would_show():
    """60 utterances after 5 of warm-up: RSS grows by less than 4 utterances' buffers, while
    keeping one utterance's buffers per utterance (the leak the buffers prevent) exceeds that.
    Measured in a fresh interpreter: in the suite's process, what earlier tests left to the
    allocator (freed heap that grows back, thread arenas) moved the RSS by more than the bound."""
    import json
    import subprocess
    import sys
    from pathlib import Path

    code = "import json; from tests.stream.test_buffers import _soak_growths; print(json.dumps(_soak_growths()))"
    root = Path(__file__).resolve().parents[2]
    out = subprocess.run([sys.executable, "-c", code], cwd=root, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-2000:]
    m = json.loads(out.stdout.strip().splitlines()[-1])
    bound = 4 * m["per_utterance"]
    assert m["growth"] < bound, f"RSS grew {m['growth']} B over 60 utterances; bound {bound} B (4 utterances' buffers)"
    assert m["leaky"] > bound, (
        f"a leak of {m['per_utterance']} B per utterance grew RSS only {m['leaky']} B: the bound would not catch it"
    )
