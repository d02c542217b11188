"""Token -> frame streams on one device: threads that overlap token generation and chunked flow
decoding, every network call serialised through one ``Device`` (one accelerator, or the CPU's
cores given to one session at a time), waiting calls served earliest deadline first.

Per stream and utterance: a token thread runs the generator (MaskGIT: after each step the
tokens that became final; AR: after each token) into a ``TokenFeed``; the stream's own thread
waits for each chunk's tokens (a prefix: the window's), asks the policy for (solver, steps),
decodes the chunk and records when it was ready, started, done and due.

Deadlines follow a playback clock: the first chunk has none (time to first chunk is measured
instead, and its calls are keyed ready + ``deadline_ms``); chunk k is due ``deadline_ms`` after
chunk k−1 was due, or after it arrived when it was late (the listener's buffer ran dry and
playback resumed with it). Utterances of a stream run back to back, each its own request.
"""

from __future__ import annotations

import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from typing import Any, Callable, Iterator, Mapping

import numpy as np

from edgekit.decode.ar import ARDecodeConfig, decode_ar
from edgekit.decode.chunked import ChunkSpec, decode_chunk, plan_chunks, utterance_noise
from edgekit.decode.flow import FlowDecodeConfig
from edgekit.decode.masked import MaskedDecodeConfig, decode_masked
from edgekit.runtimes.base import Runtime, RuntimeProxy

Clock = Callable[[], int]


class Device:
    """One device: every network call holds it, one at a time, and the time it was held
    (utilisation). Waiting calls go earliest deadline first: a chunk call's key is its chunk's
    due time (``set_deadline`` in the calling thread), a token call's is +inf — the token stage
    only has to stay ahead of the chunks, and a stream that is ahead of its playback yields to one
    that is behind."""

    def __init__(self, clock: Clock = time.perf_counter_ns):
        self.clock = clock
        self.busy_ns = 0
        self.calls = 0
        self.waiting: list[float] = []  # keys of the callers waiting now
        self._busy = False
        self._cond = threading.Condition()
        self._local = threading.local()

    def set_deadline(self, due_ns: float) -> None:
        """The key of this thread's next calls (the chunk it decodes is due then)."""
        self._local.key = float(due_ns)

    @contextmanager
    def hold(self, key: float | None = None) -> Iterator[None]:
        key = getattr(self._local, "key", float("inf")) if key is None else key
        with self._cond:
            self.waiting.append(key)
            self._cond.notify_all()
            try:
                self._cond.wait_for(lambda: not self._busy and key <= min(self.waiting))
            finally:
                self.waiting.remove(key)
            self._busy = True
        t0 = self.clock()
        try:
            yield
        finally:
            with self._cond:
                self.busy_ns += self.clock() - t0
                self.calls += 1
                self._busy = False
                self._cond.notify_all()


class DeviceRuntime(RuntimeProxy):
    """``inner`` run while holding the device (at the calling thread's deadline, see
    ``Device.set_deadline``). Outputs are copied before the device is released: a backend may
    reuse its output buffers on the next call, which another stream makes."""

    def __init__(self, inner: Runtime, device: Device):
        super().__init__(inner, owns_inner=False)
        self._device = device

    def run(self, feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        with self._device.hold():
            return {k: np.array(v) for k, v in self.inner.run(feeds).items()}


class TokenFeed:
    """Tokens of one utterance as they become final: ``ready`` = length of the final prefix."""

    def __init__(self, length: int):
        self.tokens = np.zeros((1, length), dtype=np.int64)
        self.ready = 0
        self.error: BaseException | None = None
        self._cond = threading.Condition()

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
        """Fill ``feed`` (runs in the token thread)."""
        try:
            if self.kind == "masked":
                mask_id = int(self.meta["mask_id"])
                cfg = _reseed(self.config, seed, MaskedDecodeConfig)

                def on_step(state) -> None:
                    unknown = np.flatnonzero((state.tokens[0] == mask_id))
                    feed.publish(state.tokens, int(unknown[0]) if unknown.size else state.tokens.shape[1])

                decode_masked(self.runtime, self.meta, self.cond, cfg, callback=on_step)
            else:
                cfg = _reseed(self.config, seed, ARDecodeConfig)
                decode_ar(self.runtime, self.meta, self.cond, cfg, on_token=lambda i, toks: feed.publish(toks, i + 1))
        except BaseException as exc:  # the stream thread re-raises it
            feed.fail(exc)


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


def run_utterance(ctx: StreamContext, stream: int, utterance: int, seed: int) -> UtteranceRecord:
    """One utterance of one stream: tokens in a thread, chunks here as their tokens arrive."""
    spec = ChunkSpec.from_meta(ctx.flow_meta)
    total = int(ctx.flow_meta.get("utterance_frames", ctx.flow_meta["frames"]))
    length = total // spec.frames_per_token
    channels = int(ctx.flow_meta["channels"])
    feed = TokenFeed(length)
    request = ctx.clock()
    producer = threading.Thread(target=ctx.tokens.generate, args=(feed, seed), name=f"tokens-{stream}", daemon=True)
    producer.start()
    flow_cfg = replace(ctx.flow_cfg, seed=seed)
    noise = utterance_noise((1, total, channels), flow_cfg)
    out = np.zeros((1, total, channels), dtype=np.float32)
    cond = {spec.tokens_input: feed.tokens}
    due: int | None = None
    first = 0
    records: list[ChunkRecord] = []
    step_ns = int(ctx.deadline_ms * 1e6)
    for chunk in plan_chunks(total, spec):
        feed.wait_for(chunk.tokens_needed(spec))
        ready = ctx.clock()
        slack_ms = (due - ready) / 1e6 if due is not None else ctx.deadline_ms
        in_flight = ctx.flight.enter()
        try:
            ctx.device.set_deadline(due if due is not None else ready + step_ns)
            choice = ctx.policy.choose(stream, chunk.index, slack_ms, in_flight)
            cfg = replace(flow_cfg, solver=choice.solver, steps=choice.steps)
            start = ctx.clock()
            frames, nfe = decode_chunk(ctx.flow, ctx.flow_meta, spec, chunk, cond, noise, out, cfg)
            done = ctx.clock()
        finally:
            ctx.flight.leave()
        ctx.policy.observe(choice, (done - start) / 1e6, in_flight)
        out[:, chunk.start : chunk.stop] = frames
        records.append(ChunkRecord(stream, utterance, chunk.index, choice.solver, choice.steps, nfe, ready, start, done, due, in_flight))
        if due is None:
            first = done
        due = max(due if due is not None else done, done) + step_ns
    producer.join()
    quality = ctx.score(feed.tokens, out) if ctx.score is not None else None
    rec = UtteranceRecord(stream, utterance, request, first, records[-1].done_ns, len(records), quality)
    with ctx.lock:
        ctx.chunks.extend(records)
        ctx.utterances.append(rec)
    return rec


def run_stream(ctx: StreamContext, stream: int, start_ns: int, stop_ns: int, seed: int, errors: list[BaseException]) -> None:
    """Utterances back to back from ``start_ns`` until ``stop_ns`` (the last one finishes)."""
    try:
        while ctx.clock() < start_ns:
            time.sleep(min(0.005, (start_ns - ctx.clock()) / 1e9))
        utterance = 0
        while True:
            run_utterance(ctx, stream, utterance, seed + 1000 * stream + utterance)
            utterance += 1
            if ctx.clock() >= stop_ns:
                break
    except BaseException as exc:
        errors.append(exc)


def run_streams(ctx: StreamContext, offsets_s: list[float], duration_s: float, seed: int) -> float:
    """Run one stream per offset (seconds after now) for ``duration_s``; returns the wall seconds."""
    t0 = ctx.clock()
    stop = t0 + int(duration_s * 1e9)
    errors: list[BaseException] = []
    threads = [
        threading.Thread(target=run_stream, args=(ctx, i, t0 + int(off * 1e9), stop, seed, errors), name=f"stream-{i}", daemon=True)
        for i, off in enumerate(offsets_s)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise errors[0]
    return (ctx.clock() - t0) / 1e9
