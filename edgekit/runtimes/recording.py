"""A ``Runtime`` wrapper that records the feeds of every call it forwards, with where in the decode
loop each came from: what quantize calibrates on, what debug replays teacher-forced, what the
profiler calibrates its sweep models on."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from edgekit.runtimes.base import Runtime, RuntimeProxy
from edgekit.spec import step_position


@dataclass(frozen=True)
class RecordedCall:
    """Where one recorded feed came from. ``position``: masked — share of mask tokens in the
    first row block (1.0 at step 0); flow — the time t; ar — the cache position."""

    decode: int  # which calibration decode (batch of conditions)
    call: int  # runtime.run call index within that decode (the same loop structure every decode)
    position: float


class RecordingRuntime(RuntimeProxy):
    """A ``Runtime`` proxy: forwards every ``run`` to ``runtime`` and keeps a copy of its feeds
    (the loops reuse their buffers, so a reference would be overwritten by the next step).

    ``every``: keep the feeds of every ``every``-th call of a decode only (calls 0, every, ...).
    An AR step's feeds hold its whole KV cache: one 1024-token decode of the demo AR baseline at
    batch 8 recorded 1024 copies of a 33 MB cache and ran a 24 GiB host out of memory.

    ``max_bytes``: when the kept feeds pass it, ``every`` doubles and the kept calls that are not
    multiples of it are dropped (from every decode alike), so the recording stays under it
    whatever the sequence length. (With guidance that alternates conditional and unconditional
    calls, an even ``every`` keeps one kind only: the cap is for long decodes, not the usual sizes.)"""

    def __init__(
        self, runtime: Runtime, kind: str, meta: Mapping[str, Any], every: int = 1, max_bytes: int | None = None
    ):
        super().__init__(runtime, name=f"recording({runtime.name})")
        self.kind = kind
        self.meta = meta
        self.every = max(1, int(every))
        self.max_bytes = max_bytes
        self.feeds: list[dict[str, np.ndarray]] = []
        self.calls: list[RecordedCall] = []
        self._decode = -1
        self._call = 0
        self._bytes = 0

    def begin_decode(self) -> None:
        """Mark the start of a new decode: call indices restart at 0."""
        self._decode += 1
        self._call = 0

    def run(self, feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        if self._decode < 0:
            self.begin_decode()
        if self._call % self.every == 0:
            kept = {name: np.array(arr, copy=True) for name, arr in feeds.items()}
            self.feeds.append(kept)
            self.calls.append(RecordedCall(self._decode, self._call, step_position(self.kind, kept, self.meta)))
            self._bytes += sum(a.nbytes for a in kept.values())
            while self.max_bytes is not None and self._bytes > self.max_bytes and len(self.feeds) > 1:
                self._thin()
        self._call += 1
        return self.inner.run(feeds)

    def _thin(self) -> None:
        """Double ``every`` and keep only the recorded calls that are multiples of it."""
        self.every *= 2
        keep = [i for i, c in enumerate(self.calls) if c.call % self.every == 0]
        self.feeds = [self.feeds[i] for i in keep]
        self.calls = [self.calls[i] for i in keep]
        self._bytes = sum(a.nbytes for f in self.feeds for a in f.values())
