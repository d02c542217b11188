"""Calibration inputs from decode trajectories, and how activation ranges drift across steps.

A per-step network never sees "typical" inputs: a MaskGIT network sees all-mask tokens at step
0 and almost no mask at the last step; a flow estimator sees pure noise at t = 0 and near-data
at t = 1; CFG adds unconditional rows. So calibration runs the real FP32 decode loop and records
every feed it sends (``runtimes.recording.RecordingRuntime``), and ONNX Runtime's calibrators
read exactly those (``TrajectoryReader``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from edgekit._deps import require
from edgekit.bundle import Bundle
from edgekit.errors import EdgekitError
from edgekit.evaluate import evaluate
from edgekit.quantize.calibrator import CallRanges
from edgekit.quantize.taps import add_min_max_taps, tapped_session
from edgekit.runtimes.base import Runtime, validate_feeds
from edgekit.runtimes.recording import RecordedCall, RecordingRuntime, SpilledFeeds
from edgekit.spec import TensorSpec

# The calibration recording's bound: quantize kept every call of its decodes, and an AR model's
# step feeds hold the whole KV cache (the demo AR baseline at 1024 tokens, batch 8: 33 MB per
# call, 34 GB per decode). Under this, every call is kept (the demo models record 1-70 MB).
RECORD_MAX_BYTES = 2 << 30


class TrajectoryReader:
    """An ``onnxruntime.quantization.CalibrationDataReader`` over recorded feeds.

    ``rewind()`` starts over, so one reader serves every quantize_static call of a run;
    ``set_range`` is what ORT's strided calibration uses.
    """

    def __init__(self, feeds: Sequence[Mapping[str, np.ndarray]]):
        # A spilled recording stays on disk, each call read as it is asked for.
        self.feeds = feeds if isinstance(feeds, SpilledFeeds) else list(feeds)
        self._start, self._end = 0, len(self.feeds)
        self._next = 0

    def get_next(self) -> dict[str, np.ndarray] | None:
        index = self._start + self._next
        if index >= self._end:
            return None
        self._next += 1
        return dict(self.feeds[index])

    def rewind(self) -> None:
        self._next = 0

    def set_range(self, start_index: int, end_index: int) -> None:
        self._start, self._end = start_index, min(end_index, len(self.feeds))
        self._next = 0

    def __len__(self) -> int:
        return len(self.feeds)

    def __iter__(self):
        return self

    def __next__(self) -> dict[str, np.ndarray]:
        item = self.get_next()
        if item is None:
            raise StopIteration
        return item


def calibration_reader(
    feeds: Sequence[Mapping[str, np.ndarray]], specs: Mapping[str, TensorSpec] | None = None
) -> TrajectoryReader:
    """A ``TrajectoryReader`` registered as an ORT ``CalibrationDataReader`` (ORT checks the type).
    With ``specs`` (the graph inputs) every feed is checked first: a calibration set of the wrong
    names, shapes or dtypes is one clear error, not an ORT failure deep inside calibration."""
    if not feeds:
        raise EdgekitError("the calibration set is empty", hint="raise --calib-samples")
    if specs is not None:
        for i, feed in enumerate(feeds):
            validate_feeds(feed, specs, f"calibration sample {i}")
    quant = require("onnxruntime.quantization")
    if not issubclass(TrajectoryReader, quant.CalibrationDataReader):
        quant.CalibrationDataReader.register(TrajectoryReader)
    return TrajectoryReader(feeds)


@dataclass
class Trajectories:
    """Every feed of ``decodes`` FP32 decodes, with where in the loop each came from."""

    feeds: Sequence[dict[str, np.ndarray]]  # a list, or ``SpilledFeeds`` read back call by call
    calls: list[RecordedCall]
    decodes: int
    samples: int
    seed: int
    decode_options: dict[str, Any] = field(default_factory=dict)
    every: int = 1  # the recording kept every n-th call of each decode (RecordingRuntime's max_bytes)

    @property
    def calls_per_decode(self) -> int:
        """Calls of one decode the recording kept."""
        return len({c.call for c in self.calls})

    def summary(self) -> dict[str, Any]:
        positions = sorted({round(c.position, 6) for c in self.calls})
        return {
            "samples": self.samples,
            "seed": self.seed,
            "decodes": self.decodes,
            "feeds": len(self.feeds),
            "calls_per_decode": self.calls_per_decode,
            "every_nth_call": self.every,
            "positions": positions,
            "decode_options": dict(self.decode_options),
        }


def record_trajectories(
    bundle: Bundle,
    runtime: Runtime,
    samples: int,
    seed: int,
    decode_options: Mapping[str, Any] | None = None,
    rows: Mapping[str, np.ndarray] | None = None,
    max_bytes: int | None = RECORD_MAX_BYTES,
    each_batch: Callable[[int], None] | None = None,
    spill: Path | None = None,
) -> Trajectories:
    """Decode ``samples`` sequences (ceil(samples / graph batch) decodes, seeds ``seed``, ``seed+1``,
    ...) with ``runtime`` (FP32) and record every network call: every MaskGIT step, every ODE
    evaluation (CFG rows included), every AR step. ``rows``: the conditions [samples, ...] (real
    data); None = the bundle's seeded rule (demo held-out set, or draws in the declared ranges).
    ``max_bytes``: the recording's bound (``RecordingRuntime``); past it, every n-th call is kept.
    ``each_batch(i)``: before decode i, as ``evaluate`` calls it. ``spill``: a folder where the
    recorded feeds wait on disk (``runtimes.recording.SpilledFeeds``), not in memory."""

    recorder = RecordingRuntime(runtime, bundle.kind, bundle.meta, max_bytes=max_bytes, spill=spill)
    decodes = -(-samples // bundle.batch)

    def begin(i: int) -> None:
        recorder.begin_decode()
        if each_batch is not None:
            each_batch(i)

    evaluate(bundle, recorder, samples, seed, decode_options, cond=rows, each_batch=begin)
    return Trajectories(
        recorder.feeds, recorder.calls, decodes, samples, seed, dict(decode_options or {}), recorder.every
    )


# ---- range drift across steps ------------------------------------------------------------------
@dataclass(frozen=True)
class RangeDrift:
    """Per-step activation ranges of the tensors INT8 quantizes.

    amax: float64 [steps, tensors], max |x| seen at each loop call index over all decodes.
    share: amax / amax.max(axis=0), the part of the calibrated range each step uses.
    """

    tensors: tuple[str, ...]
    positions: tuple[float, ...]  # mean position of each call index (mask share / t / pos)
    amax: np.ndarray
    labels: tuple[str, ...] = ()  # what each tensor is to a reader ("head input"); default: its name

    def label(self, i: int) -> str:
        return self.labels[i] if i < len(self.labels) else self.tensors[i]

    @property
    def share(self) -> np.ndarray:
        return self.amax / np.maximum(self.amax.max(axis=0, keepdims=True), 1e-30)

    def table(self, max_rows: int = 8) -> list[dict[str, Any]]:
        """Rows of consecutive call indices (at most ``max_rows`` groups): position span, the mean
        and the smallest share of the calibrated range, and the tensor that uses least of it.

        A tensor that is exactly zero throughout a group (the null condition of guidance's
        unconditional calls) uses no range there rather than too little of it: it is counted in
        ``zero_tensors`` and left out of the shares."""
        steps = len(self.positions)
        if steps == 0 or not self.tensors:
            return []
        groups = np.array_split(np.arange(steps), min(max_rows, steps))
        share = self.share
        rows = []
        for g in groups:
            s = share[g].max(axis=0)  # (tensors,) the widest range within the group
            live = self.amax[g].max(axis=0) > 0
            counted = np.flatnonzero(live) if live.any() else np.arange(len(s))  # all zero: all counted
            shown = s[counted]
            worst = int(counted[np.argmin(shown)])
            rows.append(
                {
                    "calls": [int(g[0]), int(g[-1])],
                    "position": [float(self.positions[g[0]]), float(self.positions[g[-1]])],
                    "mean_share": float(shown.mean()),
                    "min_share": float(shown.min()),
                    "min_tensor": self.label(worst),
                    "zero_tensors": int((~live).sum()),
                }
            )
        return rows

    def most_drifting(self, k: int = 5) -> list[dict[str, Any]]:
        """The ``k`` tensors whose per-step max |x| varies most (max/min over steps; the calls where
        a tensor is exactly zero, a null condition, do not count as its minimum)."""
        nonzero_min = np.where(self.amax > 0, self.amax, np.inf).min(axis=0)
        ratio = np.ones(len(self.tensors))  # a tensor zero in every call does not drift
        np.divide(self.amax.max(axis=0), nonzero_min, out=ratio, where=np.isfinite(nonzero_min))
        order = np.argsort(-ratio)[:k]
        return [
            {
                "tensor": self.tensors[i],
                "label": self.label(i),
                "max_over_min": float(ratio[i]),
                "amax_per_call": [float(v) for v in self.amax[:, i]],
            }
            for i in order
        ]

    def to_json(self, max_rows: int = 8) -> dict[str, Any]:
        return {"tensors": len(self.tensors), "steps": self.table(max_rows), "most_drifting": self.most_drifting()}


def range_drift(
    model_path: Path,
    tensors: Sequence[str],
    traj: Trajectories,
    threads: int = 0,
    labels: Mapping[str, str] | None = None,
    recorded: CallRanges | None = None,
) -> RangeDrift:
    """Each of ``tensors``' largest magnitude per call index within the decode, over every recorded
    feed: from ``recorded`` (the calibrator kept each call's, in the same feeds' order) where it
    has them all, else by running ``model_path`` (float) on every feed with ReduceMin/ReduceMax
    taps. ``labels``: tensor -> readable name for the tables."""
    row = {
        c: i for i, c in enumerate(sorted({c.call for c in traj.calls}))
    }  # a thinned recording keeps every n-th call
    steps = len(row)
    amax = np.zeros((steps, len(tensors)))
    pos_sum, pos_n = np.zeros(steps), np.zeros(steps)
    for call_amax, call in zip(_per_call_amax(model_path, tensors, traj, threads, recorded), traj.calls):
        r = row[call.call]
        amax[r] = np.maximum(amax[r], call_amax)
        pos_sum[r] += call.position
        pos_n[r] += 1
    positions = tuple(float(p) for p in pos_sum / np.maximum(pos_n, 1))
    names = tuple((labels or {}).get(t, t) for t in tensors)
    return RangeDrift(tuple(tensors), positions, amax, names)


def _per_call_amax(
    model_path: Path, tensors: Sequence[str], traj: Trajectories, threads: int, recorded: CallRanges | None
) -> Iterator[np.ndarray]:
    """Each recorded feed's max |x| of ``tensors`` ([len(tensors)] float64), in ``traj``'s order."""
    kept = recorded.amax(tensors) if recorded is not None else None
    if kept is not None and len(kept) == len(traj.feeds):
        yield from kept
        return
    onnx = require("onnx")
    model = onnx.load(str(model_path), load_external_data=False)  # the graph; weights stay in their side file
    taps = add_min_max_taps(model, tensors, prefix="edgekit_drift")
    with tapped_session(model_path, model, threads) as session:
        for feed in traj.feeds:
            values = session.run(taps, feed) if taps else []  # no INT8 node left: ORT reads [] as "all outputs"
            lo, hi = np.array(values[0::2], dtype=np.float64), np.array(values[1::2], dtype=np.float64)
            yield np.maximum(np.abs(lo), np.abs(hi))
