"""A runtime that answers a feed it has already run from what it kept, instead of running the
network again.

Quantize judges every INT8 candidate against the same FP32 decodes of the held-out set: the loop
follows FP32's trajectory (lock step), check's gate runs FP32 with the candidate shadowing it,
and both runtimes see the same seeds, so FP32 is asked the very same questions for every
candidate. Kept once, those answers cost a read instead of an FP32 decode (a 600 M-parameter
model: seconds per call); the same holds for a candidate asked twice (its free-running decode
serves both the budget and the gate).

Answers are keyed by a digest of every feed (name, dtype, shape and bytes), so a question asked
in another order, or one never asked before, is still answered right: a miss runs the network.
The network itself may be opened only on the first miss (``opener``) and closed again
(``release``), so a model over 2 GB need not stay in memory while nothing misses.

A memo may be asked from several threads, and ``lane(other)`` gives a second memo over another
open copy of the network that shares these answers: two decodes of one candidate run at once,
each on its own session (quantize's qnn profile: the HTP backend's x86 emulation runs one thread
per session), and a question one lane answered is a hit for the other.
"""

from __future__ import annotations

import hashlib
import threading
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import numpy as np

from edgekit.errors import EdgekitError
from edgekit.runtimes.base import KeyedFeeds, Runtime
from edgekit.spec import TensorSpec

# What a memo keeps in memory before it writes answers to its folder (or, without one, stops
# keeping): the masked demo's whole held-out set is ~20 MB, a 600 M model's logits 8 MB a call.
RAM_BYTES = 256 << 20


def feed_digest(feeds: Mapping[str, np.ndarray]) -> str:
    """A digest of the feeds: names, dtypes, shapes and bytes, in name order. SHA-256: the
    fastest of hashlib's here (1.4-1.7 GB/s with the CPU's SHA instructions, blake2b 0.55-0.9).
    An array whose producer vouches for its content (``KeyedFeeds``: the AR loop's KV cache) is
    digested by that key instead of its bytes; the same content fed as a plain array digests
    differently (a miss, never a wrong answer)."""
    vouched = feeds.content_keys if isinstance(feeds, KeyedFeeds) else {}
    h = hashlib.sha256()
    for name in sorted(feeds):
        arr = feeds[name]
        key = vouched.get(name)
        if key is not None:
            h.update(f"{name}|{arr.dtype.str}|{arr.shape}|key|{key}|".encode())
            continue
        arr = np.ascontiguousarray(arr)
        h.update(f"{name}|{arr.dtype.str}|{arr.shape}|".encode())
        h.update(arr.data.cast("B"))
    return h.hexdigest()


class _Answers:
    """What a memo (and its lanes) kept: in memory, then as files; one lock around both."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.ram: dict[str, dict[str, np.ndarray]] = {}
        self.ram_used = 0
        self.files: dict[str, Path] = {}


class MemoRuntime:
    """A ``Runtime`` over ``inner`` (or over what ``opener()`` opens on the first miss; with both,
    ``inner`` is the open one and ``opener`` opens it again after ``release``) that keeps
    every answer: in memory up to ``ram_bytes``, then as ``.npz`` files in ``folder`` (no folder:
    answers past the bound are not kept). Returns fresh arrays, which the caller may keep.

    ``inputs``/``outputs``: the network's IO, needed where it is opened lazily. ``hits`` and
    ``misses`` count the calls answered from the memo and by the network. ``close`` closes the
    network, the one given included (never the memo's files: whoever made the folder removes
    them)."""

    outputs_stay_valid = 1
    timing_note = None
    session_info = None

    def __init__(
        self,
        inner: Runtime | None = None,
        *,
        opener: Callable[[], Runtime] | None = None,
        inputs: Mapping[str, TensorSpec] | None = None,
        outputs: Mapping[str, TensorSpec] | None = None,
        folder: Path | None = None,
        ram_bytes: int = RAM_BYTES,
        name: str | None = None,
    ):
        if inner is None and opener is None:
            raise ValueError("give the runtime, its opener, or both (an open runtime that can be opened again)")
        self._inner, self._opener = inner, opener
        if inner is None:
            if inputs is None or outputs is None:
                raise ValueError("a lazily opened runtime needs its inputs and outputs")
            self.inputs, self.outputs = dict(inputs), dict(outputs)
        else:
            self.inputs = dict(inputs if inputs is not None else inner.inputs)
            self.outputs = dict(outputs if outputs is not None else inner.outputs)
        self.name = name or f"memo({inner.name if inner is not None else 'lazy'})"
        self.folder = folder
        self.ram_bytes = ram_bytes
        self._answers = _Answers()
        self._network = threading.Lock()  # one call at a time on this memo's network (IO bindings are not shared)
        self.hits = 0
        self.misses = 0
        self.settings: Mapping[str, Any] = {}

    def lane(self, other: Runtime) -> MemoRuntime:
        """A memo over ``other`` (another open copy of this network, which the lane closes) that
        shares this one's answers: threads asking the two at once run on their own sessions."""
        twin = MemoRuntime(other, inputs=self.inputs, outputs=self.outputs, folder=self.folder, name=self.name)
        twin.ram_bytes, twin._answers = self.ram_bytes, self._answers
        return twin

    # ---- what the runtime underneath says ------------------------------------------------------
    @property
    def device(self) -> str:
        return self._inner.device if self._inner is not None else "cpu"

    @property
    def warnings(self) -> list[str]:
        return self._inner.warnings if self._inner is not None else []

    @property
    def model_files(self) -> tuple[Path, ...]:
        return self._inner.model_files if self._inner is not None else ()

    @property
    def opened(self) -> bool:
        return self._inner is not None

    # ---- running -------------------------------------------------------------------------------
    def run(self, feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        key = feed_digest(feeds)
        answers = self._answers
        with answers.lock:
            kept, path = answers.ram.get(key), answers.files.get(key)
            if kept is not None or path is not None:
                self.hits += 1
        if kept is not None:
            return {k: v.copy() for k, v in kept.items()}
        if path is not None:
            with np.load(path) as f:
                return {k: f[k] for k in self.outputs}
        with self._network:
            self.misses += 1
            out = {k: np.array(v, copy=True) for k, v in self.runtime().run(feeds).items()}
        self._keep(key, out)
        return {k: v.copy() for k, v in out.items()}

    def runtime(self) -> Runtime:
        """The network itself (opened now where it is not open): to run calls that need no memo."""
        if self._inner is None:
            if self._opener is None:  # closed, and nothing to open it again with
                raise EdgekitError(f"{self.name}: run() after close()")
            self._inner = self._opener()
        return self._inner

    def _keep(self, key: str, out: dict[str, np.ndarray]) -> None:
        size = sum(v.nbytes for v in out.values())
        answers = self._answers
        with answers.lock:
            if key in answers.ram or key in answers.files:  # the other lane asked it meanwhile
                return
            if answers.ram_used + size <= self.ram_bytes:
                answers.ram[key] = out
                answers.ram_used += size
                return
        if self.folder is not None:
            self.folder.mkdir(parents=True, exist_ok=True)
            path = self.folder / f"{key}.npz"
            # numpy's stub types **kwds against savez's own allow_pickle: bool keyword; the keys
            # here are the graph's output names.
            np.savez(path, **out)  # type: ignore[arg-type]
            with answers.lock:
                answers.files[key] = path

    def release(self) -> None:
        """Close the network (the answers stay); a later miss opens it again through the opener."""
        if self._inner is not None and self._opener is not None:
            self._inner.close()
            self._inner = None

    def close(self) -> None:
        if self._inner is not None:
            self._inner.close()
            self._inner = None

    def __enter__(self) -> MemoRuntime:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
