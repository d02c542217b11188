"""Token -> frame streams on one device: threads that overlap token generation and chunked flow
decoding, every network call serialised through one ``Device`` (one accelerator, or the CPU's
cores given to one session at a time), waiting calls served earliest deadline first.

Per stream and utterance: a token thread runs the generator (MaskGIT: after each step the
tokens that became final; AR: after each token) into a ``TokenFeed``; the stream's own thread
waits for each chunk's tokens (a prefix: the window's), asks the policy for (solver, steps),
decodes the chunk and records when it was ready, started, done and due. A stream owns one
token thread and one set of buffers (``StreamBuffers``) for all its utterances.

Deadlines follow a playback clock: the first chunk has none (time to first chunk is measured
instead, and its calls are keyed ready + ``deadline_ms``); chunk k is due ``deadline_ms`` after
chunk k−1 was due, or after it arrived when it was late (the listener's buffer ran dry and
playback resumed with it). Utterances of a stream run back to back, each its own request.
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Callable, Mapping
from contextlib import nullcontext
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from edgekit.decode.ar import ARDecodeConfig, decode_ar
from edgekit.decode.chunked import ChunkSpec, decode_chunk, plan_chunks, utterance_noise
from edgekit.decode.flow import FlowDecodeConfig
from edgekit.decode.masked import MaskedDecodeConfig, decode_masked
from edgekit.runtimes.base import Runtime
from edgekit.stream.device import Clock, Device


class TokenFeed:
    """Tokens of one utterance as they become final: ``ready`` = length of the final prefix.
    A stream keeps one feed (its token buffer, int64 [1, L]) and ``reset``s it per utterance."""

    def __init__(self, length: int):
        self.tokens = np.zeros((1, length), dtype=np.int64)
        self.ready = 0
        self.error: BaseException | None = None
        self.finished = True  # the generator of the current utterance returned
        self._cond = threading.Condition()

    def reset(self) -> None:
        """Ready for the next utterance (its generator must have finished)."""
        with self._cond:
            if not self.finished:
                raise RuntimeError("TokenFeed.reset() while its generator is still running")
            self.tokens.fill(0)
            self.ready, self.error, self.finished = 0, None, False

    def finish(self) -> None:
        with self._cond:
            self.finished = True
            self._cond.notify_all()

    def wait_finished(self) -> None:
        with self._cond:
            self._cond.wait_for(lambda: self.finished)

    def publish(self, tokens: np.ndarray, ready: int) -> None:
        ready = min(ready, self.tokens.shape[1])  # a longer generator feeds the utterance's first tokens
        with self._cond:
            self.tokens[:, :ready] = tokens[:, :ready]
            self.ready = max(self.ready, ready)
            self._cond.notify_all()

    def fail(self, exc: BaseException) -> None:
        with self._cond:
            self.error = exc
            self._cond.notify_all()

    def wait_for(self, n: int) -> None:
        with self._cond:
            self._cond.wait_for(lambda: self.ready >= n or self.error is not None)
            if self.error is not None:
                raise self.error


@dataclass(frozen=True)
class TokenSource:
    """The token stage: a masked or AR bundle's runtime, meta and decode config."""

    kind: str  # "masked" | "ar"
    runtime: Runtime
    meta: Mapping[str, Any]
    config: Any  # MaskedDecodeConfig | ARDecodeConfig (its seed is replaced per utterance)
    cond: Mapping[str, np.ndarray]  # class_id etc. [1, ...]

    def generate(self, feed: TokenFeed, seed: int) -> None:
        """Fill ``feed``, then mark it finished (runs in the stream's token thread)."""
        try:
            if self.kind == "masked":
                mask_id = int(self.meta["mask_id"])
                cfg = _reseed(self.config, seed, MaskedDecodeConfig)

                def on_step(state) -> None:
                    unknown = np.flatnonzero(state.tokens[0] == mask_id)
                    feed.publish(state.tokens, int(unknown[0]) if unknown.size else state.tokens.shape[1])

                decode_masked(self.runtime, self.meta, self.cond, cfg, callback=on_step)
            else:
                cfg = _reseed(self.config, seed, ARDecodeConfig)
                decode_ar(self.runtime, self.meta, self.cond, cfg, on_token=lambda i, toks: feed.publish(toks, i + 1))
        except BaseException as exc:  # the stream thread re-raises it
            feed.fail(exc)
        finally:
            feed.finish()


class TokenWorker:
    """A stream's token thread, started once and fed one utterance at a time: a thread per
    utterance would leave the allocator a new thread's arena to fill every time."""

    def __init__(self, source: TokenSource, name: str):
        self.source = source
        self._jobs: queue.Queue[tuple[TokenFeed, int] | None] = queue.Queue()
        self._thread = threading.Thread(target=self._loop, name=name, daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        while (job := self._jobs.get()) is not None:
            self.source.generate(*job)

    def submit(self, feed: TokenFeed, seed: int) -> None:
        feed.reset()
        self._jobs.put((feed, seed))

    def close(self) -> None:
        self._jobs.put(None)
        self._thread.join()


def _reseed(cfg, seed: int, cls):
    return replace(cfg if isinstance(cfg, cls) else cls(), seed=seed)


@dataclass
class ChunkRecord:
    stream: int
    utterance: int
    chunk: int
    solver: str
    steps: int
    nfe: int
    ready_ns: int  # its tokens were final
    start_ns: int
    done_ns: int
    due_ns: int | None  # None for the first chunk of an utterance
    in_flight: int

    @property
    def latency_ms(self) -> float:
        return (self.done_ns - self.ready_ns) / 1e6

    @property
    def missed(self) -> bool:
        return self.due_ns is not None and self.done_ns > self.due_ns


@dataclass
class UtteranceRecord:
    stream: int
    utterance: int
    request_ns: int
    first_chunk_ns: int
    done_ns: int
    chunks: int
    quality: Mapping[str, float] | None  # the scorer's figures for the frames (None: no scorer)


@dataclass
class Flight:
    """Chunks now being decoded on the device (the cost model's queue depth)."""

    count: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)

    def enter(self) -> int:
        with self.lock:
            self.count += 1
            return self.count

    def leave(self) -> None:
        with self.lock:
            self.count -= 1


@dataclass
class StreamContext:
    """What every stream of one load run shares."""

    tokens: TokenSource
    flow: Runtime
    device: Device
    flow_meta: Mapping[str, Any]
    flow_cfg: FlowDecodeConfig
    policy: Any  # FixedPolicy | AdaptivePolicy
    # (tokens int64 [1, L], frames float32 [1, T, C]) -> quality figures, scored as each utterance
    # ends so no utterance's frames outlive it (RSS stays flat over a long run)
    score: Callable[[np.ndarray, np.ndarray], Mapping[str, float]] | None
    deadline_ms: float
    clock: Clock
    flight: Flight = field(default_factory=Flight)
    chunks: list[ChunkRecord] = field(default_factory=list)
    utterances: list[UtteranceRecord] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)


@dataclass
class StreamBuffers:
    """Everything an utterance writes, allocated once per stream and reused for every utterance
    and chunk (RSS stays flat however long the stream runs): the token buffer (``feed``), the
    noise draw (float32 [1, T, C]) and its float64 scratch, the frame buffer (float32 [1, T, C];
    each chunk's frames are decoded into its slice). ``nbytes`` is what one utterance would
    allocate without them."""

    feed: TokenFeed
    noise: np.ndarray
    noise_scratch: np.ndarray
    frames: np.ndarray

    @classmethod
    def for_meta(cls, flow_meta: Mapping[str, Any]) -> StreamBuffers:
        spec = ChunkSpec.from_meta(flow_meta)
        total = int(flow_meta.get("utterance_frames", flow_meta["frames"]))
        shape = (1, total, int(flow_meta["channels"]))
        return cls(
            TokenFeed(total // spec.frames_per_token),
            np.zeros(shape, np.float32),
            np.zeros(shape, np.float64),
            np.zeros(shape, np.float32),
        )

    @property
    def nbytes(self) -> int:
        return self.feed.tokens.nbytes + self.noise.nbytes + self.noise_scratch.nbytes + self.frames.nbytes


def run_utterance(
    ctx: StreamContext,
    stream: int,
    utterance: int,
    seed: int,
    buffers: StreamBuffers | None = None,
    worker: TokenWorker | None = None,
) -> UtteranceRecord:
    """One utterance of one stream: tokens in the stream's token thread (``worker``; a thread
    for this utterance when None), chunks here as their tokens arrive, into ``buffers`` (new
    ones when None)."""
    spec = ChunkSpec.from_meta(ctx.flow_meta)
    buf = buffers if buffers is not None else StreamBuffers.for_meta(ctx.flow_meta)
    own_worker = worker is None
    if own_worker:
        worker = TokenWorker(ctx.tokens, f"tokens-{stream}")
    feed = buf.feed
    request = ctx.clock()
    worker.submit(feed, seed)
    flow_cfg = replace(ctx.flow_cfg, seed=seed)
    noise = utterance_noise(buf.noise.shape, flow_cfg, out=buf.noise, scratch=buf.noise_scratch)
    out = buf.frames
    cond = {spec.tokens_input: feed.tokens}
    due: int | None = None
    first = 0
    records: list[ChunkRecord] = []
    step_ns = int(ctx.deadline_ms * 1e6)
    try:
        for chunk in plan_chunks(out.shape[1], spec):
            feed.wait_for(chunk.tokens_needed(spec))
            ready = ctx.clock()
            slack_ms = (due - ready) / 1e6 if due is not None else ctx.deadline_ms
            in_flight = ctx.flight.enter()
            try:
                ctx.device.set_deadline(due if due is not None else ready + step_ns)
                choice = ctx.policy.choose(stream, chunk.index, slack_ms, in_flight)
                cfg = replace(flow_cfg, solver=choice.solver, steps=choice.steps)
                with ctx.device.first_chunk() if due is None else nullcontext():
                    start = ctx.clock()
                    _, nfe = decode_chunk(
                        ctx.flow,
                        ctx.flow_meta,
                        spec,
                        chunk,
                        cond,
                        noise,
                        out,
                        cfg,
                        out=out[:, chunk.start : chunk.stop],
                    )
                    done = ctx.clock()
            finally:
                ctx.flight.leave()
            ctx.policy.observe(choice, (done - start) / 1e6, in_flight)
            records.append(
                ChunkRecord(
                    stream, utterance, chunk.index, choice.solver, choice.steps, nfe, ready, start, done, due, in_flight
                )
            )
            if due is None:
                first = done
            due = max(due if due is not None else done, done) + step_ns
        feed.wait_finished()
    finally:
        if own_worker:
            worker.close()
    quality = ctx.score(feed.tokens, out) if ctx.score is not None else None
    rec = UtteranceRecord(stream, utterance, request, first, records[-1].done_ns, len(records), quality)
    with ctx.lock:
        ctx.chunks.extend(records)
        ctx.utterances.append(rec)
    return rec


class WarmGate:
    """Calls ``on_warm`` once, when each of ``streams`` streams has finished its first utterance
    (its buffers and token thread exist and have run once: RSS growth from then on is a leak)."""

    def __init__(self, streams: int, on_warm: Callable[[], None] | None):
        self._left, self._on_warm, self._lock = streams, on_warm, threading.Lock()

    def arrive(self) -> None:
        with self._lock:
            self._left -= 1
            fire = self._left == 0 and self._on_warm is not None
        if fire:
            self._on_warm()


def run_stream(
    ctx: StreamContext,
    stream: int,
    start_ns: int,
    stop_ns: int,
    seed: int,
    errors: list[BaseException],
    warm: WarmGate | None = None,
) -> None:
    """Utterances back to back from ``start_ns`` until ``stop_ns`` (the last one finishes), all
    in one set of ``StreamBuffers`` with one token thread."""
    try:
        buffers = StreamBuffers.for_meta(ctx.flow_meta)
        worker = TokenWorker(ctx.tokens, f"tokens-{stream}")
        try:
            while ctx.clock() < start_ns:
                time.sleep(min(0.005, (start_ns - ctx.clock()) / 1e9))
            utterance = 0
            while True:
                run_utterance(ctx, stream, utterance, seed + 1000 * stream + utterance, buffers, worker)
                if utterance == 0 and warm is not None:
                    warm.arrive()
                utterance += 1
                if ctx.clock() >= stop_ns:
                    break
        finally:
            worker.close()
    except BaseException as exc:
        errors.append(exc)


def run_streams(
    ctx: StreamContext, offsets_s: list[float], duration_s: float, seed: int, on_warm: Callable[[], None] | None = None
) -> float:
    """Run one stream per offset (seconds after now) for ``duration_s``; returns the wall seconds.
    ``on_warm()`` runs once every stream has finished its first utterance."""
    t0 = ctx.clock()
    stop = t0 + int(duration_s * 1e9)
    errors: list[BaseException] = []
    warm = WarmGate(len(offsets_s), on_warm)
    threads = [
        threading.Thread(
            target=run_stream,
            args=(ctx, i, t0 + int(off * 1e9), stop, seed, errors, warm),
            name=f"stream-{i}",
            daemon=True,
        )
        for i, off in enumerate(offsets_s)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise errors[0]
    return (ctx.clock() - t0) / 1e9
