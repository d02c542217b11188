"""The one device every stream's network calls share: one call at a time, earliest deadline
first (token calls last, and not at all while a first chunk is decoded), and the runtime proxy
that routes a stream's calls through it."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager

import numpy as np

from edgekit.runtimes.base import Runtime, RuntimeProxy

Clock = Callable[[], int]


class Device:
    """One device: every network call holds it, one at a time, and the time it was held
    (utilisation). Waiting calls go earliest deadline first: a chunk call's key is its chunk's
    due time (``set_deadline`` in the calling thread), a token call's is +inf — the token stage
    only has to stay ahead of the chunks, and a stream that is ahead of its playback yields to one
    that is behind. While a first chunk is being decoded (``first_chunk``), token calls wait
    altogether: otherwise one slips into every gap between the chunk's calls (the solver's host
    work) and the chunk waits out each of them — time to first chunk paid for tokens nobody is
    waiting for yet."""

    def __init__(self, clock: Clock = time.perf_counter_ns):
        self.clock = clock
        self.busy_ns = 0
        self.calls = 0
        self.waiting: list[float] = []  # keys of the callers waiting now
        self.first_chunks = 0  # first chunks being decoded now: token calls wait while > 0
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
                self._cond.wait_for(
                    lambda: (
                        not self._busy and key <= min(self.waiting) and (key != float("inf") or not self.first_chunks)
                    )
                )
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

    @contextmanager
    def first_chunk(self) -> Iterator[None]:
        """Hold token calls back while the calling thread decodes a first chunk."""
        with self._cond:
            self.first_chunks += 1
        try:
            yield
        finally:
            with self._cond:
                self.first_chunks -= 1
                self._cond.notify_all()


class DeviceRuntime(RuntimeProxy):
    """``inner`` run while holding the device (at the calling thread's deadline, see
    ``Device.set_deadline``). Outputs are copied before the device is released (a backend may
    reuse its output buffers on the next call, which another stream makes) into buffers the
    calling thread owns, two per output used in turn: allocated on a thread's first calls and
    reused for every later one, and an output stays valid for one more call, so a loop may feed
    it straight back (``outputs_stay_valid`` = 2, as ORT's IOBinding)."""

    outputs_stay_valid = 2

    def __init__(self, inner: Runtime, device: Device):
        super().__init__(inner, owns_inner=False)
        self._device = device
        self._local = threading.local()

    def run(self, feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        local = self._local
        if not hasattr(local, "slots"):
            local.slots, local.turn = ({}, {}), 0
        slot = local.slots[local.turn]
        local.turn ^= 1
        with self._device.hold():
            outs = self.inner.run(feeds)
            for name, arr in outs.items():
                buf = slot.get(name)
                if buf is None or buf.shape != arr.shape or buf.dtype != arr.dtype:
                    buf = slot[name] = np.empty_like(arr)
                np.copyto(buf, arr)
        return {name: slot[name] for name in outs}
