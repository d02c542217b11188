"""A ``Runtime`` wrapper that records the feeds of every call it forwards, with where in the decode
loop each came from: what quantize calibrates on, what debug replays teacher-forced, what the
profiler calibrates its sweep models on."""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, overload

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


class SpilledFeeds(Sequence[dict[str, np.ndarray]]):
    """Recorded feeds kept on disk, one ``.npz`` per call in ``folder``, read back (a fresh copy)
    each time one is asked for: memory holds the call being read, never the recording. An AR
    step's feeds hold its whole KV cache (50 MB a call for a 300 M-parameter GPT at 256 tokens):
    quantize's recording, capped at 2 GiB, sat in memory beside the FP32 session and, to the end
    of the run, beside both speed-timed sessions (3.1x the weights, docs/large-models.md)."""

    def __init__(self, folder: Path, files: Sequence[tuple[Path, tuple[str, ...]]] = ()):
        """``files``: (path, input names) of calls already in ``folder`` (a ``subset``'s view)."""
        self.folder = folder
        folder.mkdir(parents=True, exist_ok=True)
        self._files: list[tuple[Path, tuple[str, ...]]] = list(files)
        # The next call's file name: past every one in the folder, so an append never overwrites
        # a call that this recording, or the one a view was taken from, still reads.
        self._made = 1 + max((int(p.stem) for p in folder.glob("*.npz") if p.stem.isdigit()), default=-1)

    def append(self, feed: Mapping[str, np.ndarray]) -> None:
        path = self.folder / f"{self._made}.npz"
        self._made += 1
        # Positional arrays: an input may be named anything (np.savez's own ``file``, a '/').
        np.savez(path, *feed.values())
        self._files.append((path, tuple(feed)))

    def keep(self, indices: Sequence[int]) -> None:
        """Keep only the calls at ``indices`` (in that order); the others' files go."""
        kept = [self._files[i] for i in indices]
        for path, _ in set(self._files) - set(kept):
            path.unlink(missing_ok=True)
        self._files = kept

    def subset(self, indices: Sequence[int]) -> SpilledFeeds:
        """The calls at ``indices``, read from the same files (a view: the recording owns them)."""
        return SpilledFeeds(self.folder, [self._files[i] for i in indices])

    def __len__(self) -> int:
        return len(self._files)

    @overload
    def __getitem__(self, index: int) -> dict[str, np.ndarray]: ...

    @overload
    def __getitem__(self, index: slice) -> list[dict[str, np.ndarray]]: ...

    def __getitem__(self, index: int | slice) -> dict[str, np.ndarray] | list[dict[str, np.ndarray]]:
        if isinstance(index, slice):
            return [self[i] for i in range(*index.indices(len(self)))]
        path, names = self._files[index]
        with np.load(path) as data:
            return {name: data[f"arr_{j}"] for j, name in enumerate(names)}

    def __iter__(self) -> Iterator[dict[str, np.ndarray]]:
        for i in range(len(self)):
            yield self[i]


class RecordingRuntime(RuntimeProxy):
    """A ``Runtime`` proxy: forwards every ``run`` to ``runtime`` and keeps a copy of its feeds
    (the loops reuse their buffers, so a reference would be overwritten by the next step).

    ``every``: keep the feeds of every ``every``-th call of a decode only (calls 0, every, ...).
    An AR step's feeds hold its whole KV cache: one 1024-token decode of the demo AR baseline at
    batch 8 recorded 1024 copies of a 33 MB cache and ran a 24 GiB host out of memory.

    ``max_bytes``: when the kept feeds pass it, ``every`` doubles and the kept calls that are not
    multiples of it are dropped (from every decode alike), so the recording stays under it
    whatever the sequence length. (With guidance that alternates conditional and unconditional
    calls, an even ``every`` keeps one kind only: the cap is for long decodes, not the usual sizes.)

    ``spill``: a folder where the kept feeds wait on disk (``SpilledFeeds``) instead of in memory."""

    def __init__(
        self,
        runtime: Runtime,
        kind: str,
        meta: Mapping[str, Any],
        every: int = 1,
        max_bytes: int | None = None,
        spill: Path | None = None,
    ):
        super().__init__(runtime, name=f"recording({runtime.name})")
        self.kind = kind
        self.meta = meta
        self.every = max(1, int(every))
        self.max_bytes = max_bytes
        self.feeds: list[dict[str, np.ndarray]] | SpilledFeeds = [] if spill is None else SpilledFeeds(spill)
        self.calls: list[RecordedCall] = []
        self._sizes: list[int] = []
        self._decode = -1
        self._call = 0

    def begin_decode(self) -> None:
        """Mark the start of a new decode: call indices restart at 0."""
        self._decode += 1
        self._call = 0

    def run(self, feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        if self._decode < 0:
            self.begin_decode()
        if self._call % self.every == 0:
            if isinstance(self.feeds, SpilledFeeds):  # written out now: the loop's buffers can be read as they are
                kept = dict(feeds)
            else:
                kept = {name: np.array(arr, copy=True) for name, arr in feeds.items()}
            self.feeds.append(kept)
            self.calls.append(RecordedCall(self._decode, self._call, step_position(self.kind, kept, self.meta)))
            self._sizes.append(sum(a.nbytes for a in kept.values()))
            del kept
            # Each decode's first call stays whatever the bound (thinning never drops it): past the
            # bound with those alone, it stops (it looped for good, each decode's call 0 kept).
            while self.max_bytes is not None and sum(self._sizes) > self.max_bytes and any(c.call for c in self.calls):
                self._thin()
        self._call += 1
        return self.inner.run(feeds)

    def _thin(self) -> None:
        """Double ``every`` and keep only the recorded calls that are multiples of it."""
        self.every *= 2
        keep = [i for i, c in enumerate(self.calls) if c.call % self.every == 0]
        if isinstance(self.feeds, SpilledFeeds):
            self.feeds.keep(keep)
        else:
            self.feeds = [self.feeds[i] for i in keep]
        self.calls = [self.calls[i] for i in keep]
        self._sizes = [self._sizes[i] for i in keep]


def pick(feeds: Sequence[dict[str, np.ndarray]], indices: Sequence[int]) -> Sequence[dict[str, np.ndarray]]:
    """The feeds at ``indices``: a view of a spilled recording (nothing read), else a list."""
    if isinstance(feeds, SpilledFeeds):
        return feeds.subset(indices)
    return [feeds[i] for i in indices]
