"""Chunked flow decoding: an utterance of T frames decoded F frames at a time by a window graph.

The window graph is the flow network exported at W = C + F + A frames (``export --chunk-frames F
--context C --lookahead A``; its manifest carries ``meta["chunk"]``). Chunk k emits frames
[s, s + F) (s = k·F; the last chunk may be shorter) and runs the window [w0, w0 + W) with
w0 = clamp(s − C, 0, T − W), so every call has the graph's static shape:

    [w0, s)          left context: frames already emitted, held on their flow path
    [s, s + F)       the chunk's frames, emitted
    [s + F, w0 + W)  lookahead: decoded with the chunk, discarded (the next chunk redoes them)

The first chunk has no context (its window starts at 0 and looks further ahead); the last has
more context. Context frames are pinned to the straight path the demo model was trained on,
x_t = (1 − (1 − σ)t)·z + t·x1, with their own noise z and emitted frames x1; their velocity is
the path's (x1 − (1 − σ)z), so every solver keeps them exactly on it and the network sees,
at each t, what a whole-utterance decode would have shown it there.

Noise: the stream's noise for an utterance is one draw z = temperature·N(0, 1) of shape
[B, T, C] from ``np.random.default_rng(seed)``, the same draw ``decode_flow`` makes for the
whole utterance (for B = 1 it equals drawing [1, F, C] per chunk in order), so chunked and
whole decoding start from identical noise. numpy only.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from edgekit.decode._guidance import GuidedNetwork, require_meta
from edgekit.decode.flow import NFE_PER_STEP, FlowDecodeConfig, integrate
from edgekit.decode.schedules import time_grid
from edgekit.errors import EdgekitError, UsageError
from edgekit.runtimes.base import Runtime

SIGMA_MIN = 1e-4  # the path width the demo flow model was trained with (models/train.py)


@dataclass(frozen=True)
class ChunkSpec:
    """Chunk geometry in frames, from a window bundle's ``meta["chunk"]``."""

    frames: int  # F: frames emitted per chunk
    context: int  # C: already-emitted frames the window sees on its left
    lookahead: int  # A: frames past the chunk decoded with it and discarded
    frames_per_token: int = 1  # r: tokens condition the window at 1/r of the frame rate
    tokens_input: str = "tokens"  # the conditioning input that follows the frames (sliced per window)
    sigma_min: float = SIGMA_MIN

    def __post_init__(self) -> None:
        r = self.frames_per_token
        if self.frames < 1 or self.context < 0 or self.lookahead < 0:
            raise UsageError(
                f"chunk frames={self.frames}, context={self.context}, lookahead={self.lookahead}; "
                "valid: frames >= 1, context and lookahead >= 0"
            )
        for name, value in (
            ("--chunk-frames", self.frames),
            ("--context", self.context),
            ("--lookahead", self.lookahead),
        ):
            if value % r:
                raise UsageError(
                    f"{name} {value} is not a multiple of the model's {r} frames per token; valid: multiples of {r}"
                )

    @property
    def window(self) -> int:
        return self.context + self.frames + self.lookahead

    @classmethod
    def from_meta(cls, meta: Mapping[str, Any]) -> ChunkSpec:
        chunk = meta.get("chunk")
        if not chunk:
            raise UsageError(
                "this flow bundle has no chunk window graph (meta['chunk'] is missing)",
                hint="export one with `edgekit export flow-demo -o bundles/flow-chunk --chunk-frames 16 --context 16`",
            )
        return cls(
            int(chunk["frames"]),
            int(chunk["context"]),
            int(chunk["lookahead"]),
            int(meta.get("frames_per_token", 1)),
            str(chunk.get("tokens_input", "tokens")),
            float(chunk.get("sigma_min", SIGMA_MIN)),
        )


@dataclass(frozen=True)
class Chunk:
    """One chunk of an utterance: emits frames [start, stop) from the window at ``window_start``."""

    index: int
    start: int
    stop: int
    window_start: int

    def tokens_needed(self, spec: ChunkSpec) -> int:
        """Tokens (a prefix of the utterance) that must be final before this chunk can run."""
        return -(-(self.window_start + spec.window) // spec.frames_per_token)


def plan_chunks(total_frames: int, spec: ChunkSpec) -> list[Chunk]:
    """The chunks of an utterance of ``total_frames`` (>= the window)."""
    if total_frames < spec.window:
        raise UsageError(
            f"an utterance of {total_frames} frames is shorter than the {spec.window}-frame window; "
            "valid: a smaller --chunk-frames/--context/--lookahead"
        )
    out = []
    for k, s in enumerate(range(0, total_frames, spec.frames)):
        w0 = max(0, min(s - spec.context, total_frames - spec.window))
        w0 -= w0 % spec.frames_per_token  # windows start on a token boundary
        out.append(Chunk(k, s, min(s + spec.frames, total_frames), w0))
    return out


def decode_chunk(
    runtime: Runtime,
    meta: Mapping[str, Any],
    spec: ChunkSpec,
    chunk: Chunk,
    cond: Mapping[str, np.ndarray],
    noise: np.ndarray,
    emitted: np.ndarray,
    cfg: FlowDecodeConfig,
    out: np.ndarray | None = None,
) -> tuple[np.ndarray, int]:
    """Decode one chunk; returns (its frames float32 [B, stop − start, C], NFE).

    cond: the utterance's conditioning; ``spec.tokens_input`` int64 [B, T/r] is sliced to the
    window, the other inputs pass unchanged. noise: float32 [B, T, C], the utterance's draw
    (temperature applied). emitted: float32 [B, T, C]; frames [0, chunk.start) are the ones
    already emitted (the rest is not read). out: float32 [B, stop − start, C] the frames are
    written into and returned (a stream's reused buffer, e.g. ``emitted[:, start:stop]``, which
    no chunk reads before it is emitted); a new array when None.
    """
    require_meta(meta, "flow", ("channels", "frames"))
    W, r = spec.window, spec.frames_per_token
    if runtime.inputs["x"].shape[1] != W:
        raise EdgekitError(f"the graph's x is {list(runtime.inputs['x'].shape)} but the chunk window is {W} frames")
    w0, ctx = chunk.window_start, chunk.start - chunk.window_start
    tok = cond[spec.tokens_input]
    window_cond = dict(cond)
    window_cond[spec.tokens_input] = np.ascontiguousarray(tok[:, w0 // r : (w0 + W) // r])
    net = GuidedNetwork(runtime, meta, window_cond, cfg.guidance, kind="flow", batch=len(noise))
    z = noise[:, w0 : w0 + W]
    known = emitted[:, w0 : chunk.start]  # (B, ctx, C)
    a = 1.0 - spec.sigma_min
    path_velocity = known - a * z[:, :ctx]  # constant along the straight path
    t_rows = np.empty(net.batch, dtype=np.float32)

    def velocity(x: np.ndarray, t: float) -> np.ndarray:
        x = np.array(x, dtype=np.float32)
        x[:, :ctx] = (1.0 - a * t) * z[:, :ctx] + t * known  # pin the context to its path
        t_rows.fill(t)
        v = np.array(net.guide(net.run({"x": net.expand("x", x), "t": net.expand("t", t_rows)})["v"]))
        v[:, :ctx] = path_velocity
        return v

    times = time_grid(cfg.grid, cfg.steps, cfg.sway)
    x, nfe = integrate(velocity, np.asarray(z, dtype=np.float32), times, cfg.solver)
    frames = x[:, ctx : ctx + chunk.stop - chunk.start]
    if out is None:
        return np.asarray(frames, dtype=np.float32), nfe
    np.copyto(out, frames)
    return out, nfe


def utterance_noise(
    shape: tuple[int, int, int], cfg: FlowDecodeConfig, out: np.ndarray | None = None, scratch: np.ndarray | None = None
) -> np.ndarray:
    """float32 [B, T, C]: the noise ``decode_flow`` would draw for the whole utterance.

    With ``out`` (float32 ``shape``) and ``scratch`` (float64 ``shape``) the draw is made in
    place: the same numbers, no allocation (a stream reuses both for every utterance)."""
    rng = np.random.default_rng(cfg.seed)
    if out is None:
        return (cfg.temperature * rng.standard_normal(shape)).astype(np.float32)
    if scratch is None or scratch.shape != tuple(shape) or scratch.dtype != np.float64 or out.shape != tuple(shape):
        raise EdgekitError(f"in-place noise needs out float32{list(shape)} and scratch float64{list(shape)}")
    rng.standard_normal(out=scratch)
    np.multiply(scratch, cfg.temperature, out=scratch)
    np.copyto(out, scratch, casting="same_kind")
    return out


def decode_chunked(
    runtime: Runtime,
    meta: Mapping[str, Any],
    cond: Mapping[str, np.ndarray],
    total_frames: int,
    cfg: FlowDecodeConfig = FlowDecodeConfig(),
) -> tuple[np.ndarray, int]:
    """Decode a whole utterance chunk by chunk, one after another; returns (frames float32
    [B, total_frames, C], NFE). cond[tokens_input]: int64 [B, total_frames / r]."""
    spec = ChunkSpec.from_meta(meta)
    tokens = cond[spec.tokens_input]
    if tokens.shape[1] * spec.frames_per_token != total_frames:
        raise EdgekitError(
            f"{tokens.shape[1]} tokens give {tokens.shape[1] * spec.frames_per_token} frames, not {total_frames}"
        )
    b, channels = len(tokens), int(meta["channels"])
    noise = utterance_noise((b, total_frames, channels), cfg)
    out = np.zeros((b, total_frames, channels), dtype=np.float32)
    nfe = 0
    for chunk in plan_chunks(total_frames, spec):
        _, n = decode_chunk(runtime, meta, spec, chunk, cond, noise, out, cfg, out=out[:, chunk.start : chunk.stop])
        nfe += n
    return out, nfe


def chunk_nfe(solver: str, steps: int) -> int:
    return steps * NFE_PER_STEP[solver]
