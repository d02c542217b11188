"""Running activation ranges: what minmax calibration keeps (two numbers per tensor, whatever the
calls), fed by a graph tapped with ReduceMin/ReduceMax (``taps.add_min_max_taps``) wherever its
calls run: a replay of the recorded calls (``calibrator.collect_min_max``) or the FP32 calibration
decodes themselves (``LiveRanges``), which then need no replay at all (Sana-600M: 136 s, 64 calls
of a 2.2 GiB graph, of a 1,632 s quantize). ``onnxruntime`` is imported lazily.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from edgekit._deps import require
from edgekit.errors import EdgekitError
from edgekit.quantize.taps import (
    add_min_max_taps,
    element_counts,
    graph_without_weights,
    ranged_tensors,
    tapped_session,
    value_dtypes,
)
from edgekit.runtimes.base import BaseRuntime
from edgekit.spec import TensorSpec


class RunningMinMax:
    """The running min and max of each tensor: two values per tensor, whatever the calls.
    NaN-aware as ORT's ``np.nanmin``/``np.nanmax`` over the calls (``np.fmin``/``np.fmax``)."""

    def __init__(self) -> None:
        self.lo: dict[str, Any] = {}
        self.hi: dict[str, Any] = {}
        self.calls = 0

    def add(self, name: str, lo: Any, hi: Any) -> None:
        """One call's min and max of ``name`` (numpy scalars or 0-d arrays, kept as given)."""
        self.lo[name] = np.fmin(self.lo[name], lo) if name in self.lo else lo
        self.hi[name] = np.fmax(self.hi[name], hi) if name in self.hi else hi

    @property
    def nbytes(self) -> int:
        """What is kept: constant in the number of calls."""
        return sum(np.asarray(a).nbytes for a in [*self.lo.values(), *self.hi.values()])


class CallRanges:
    """Each calibrated tensor's largest magnitude in every call, in the reader's order: what
    ``calibrate.range_drift`` would otherwise run the model over every recorded call again to
    learn (67 s of a 932 s quantize of the 2.25 GiB aMUSEd-256). A float per tensor per call."""

    def __init__(self) -> None:
        self.index: dict[str, int] = {}
        self.rows: list[np.ndarray] = []
        # Each tensor's range over all calls, where the pass that filled this kept it (minmax:
        # signed min/max, and |x| from its smallest to its largest): what the histogram methods'
        # first pass over the calls would compute again (``collect_histograms(known=...)``).
        self.signed: RunningMinMax | None = None
        self.magnitude: RunningMinMax | None = None
        # Each tensor's largest |x| over all calls, where that pass kept them (``Tails``): what the
        # percentile method's pass over the calls would bin again (``calibrator.percentile_from_tails``).
        self.tails: Tails | None = None

    def start(self, tensors: Sequence[str]) -> None:
        self.index, self.rows = {t: i for i, t in enumerate(tensors)}, []
        self.signed = self.magnitude = self.tails = None

    def add(self, amax: Sequence[float]) -> None:
        """One call's max |x| of every tensor, in ``start``'s order."""
        self.rows.append(np.asarray(amax, dtype=np.float64))

    def amax(self, tensors: Sequence[str]) -> np.ndarray | None:
        """[calls, len(tensors)] float64, or None where a tensor was not calibrated."""
        if not self.rows or any(t not in self.index for t in tensors):
            return None
        cols = [self.index[t] for t in tensors]
        return np.stack(self.rows)[:, cols] if cols else np.zeros((len(self.rows), 0))


# A tail is sized for the calls planned with this slack (``tail_sizes``), and all tensors' tails of
# one call stay under TAIL_VALUES_CAP values (64 MB of float32; 99.999 % over Sana-600M's 64 calls:
# 0.25 M values a call, 1 MB, against 290 M values a call its histogram pass binned).
TAIL_SLACK = 1.25
TAIL_VALUES_CAP = 1 << 24


def tail_sizes(counts: Mapping[str, int], calls: int, percentile: float) -> dict[str, int] | None:
    """k per tensor (``counts``: its values a call): as many of its largest |x| as ORT's percentile
    cut at ``percentile`` can reach over ``calls`` calls, (1 - p/100) of all its values, with slack,
    at most all of a call's. None where the tensors' k together pass TAIL_VALUES_CAP (a low
    percentile on a large model: the histogram pass then)."""
    share = max(0.0, 1.0 - percentile / 100.0)
    sizes = {t: max(1, min(n, int(share * n * calls * TAIL_SLACK) + 2)) for t, n in counts.items()}
    return sizes if sum(sizes.values()) <= TAIL_VALUES_CAP else None


class Tails:
    """The k largest |x| of each tensor over every call so far (k: ``sizes``, from ``tail_sizes``)
    and how many values those calls had (``seen``; ``counts``: a call's): all of the histogram ORT's
    percentile calibrator cuts that can decide the cut (``calibrator.percentile_from_tails``).
    Constant in the number of calls: k values a tensor."""

    def __init__(self, sizes: Mapping[str, int], counts: Mapping[str, int]):
        self.sizes, self.counts = dict(sizes), dict(counts)
        self.top: dict[str, np.ndarray] = {}
        self.seen: dict[str, int] = {}

    def add(self, name: str, top: np.ndarray) -> None:
        """One call's k largest |x| of ``name`` (any order), merged into the k largest of all."""
        k = self.sizes[name]
        merged = np.concatenate([self.top[name], top]) if name in self.top else np.asarray(top)
        if merged.size > k:
            merged = np.partition(merged, merged.size - k)[merged.size - k :]
        self.top[name] = merged
        self.seen[name] = self.seen.get(name, 0) + self.counts[name]


def amax_of(lo: Any, hi: Any) -> float:
    return float(np.fmax(np.abs(np.asarray(lo, np.float64)), np.abs(np.asarray(hi, np.float64))))


class MinMaxTaps:
    """The running ranges of one graph tapped by ``taps.add_min_max_taps``: ``tensors`` and the tap
    outputs added for them (min, max and, with ``calls``, min |x| per tensor, in turn), fed one
    call's tap values at a time wherever the calls run (``min_max_session``). With ``calls``: each
    call's max |x| too, and the ranges of |x| (``CallRanges.signed``/``magnitude`` on ``finish``).
    ``tails``: the tensors' largest |x| too (the taps end with their TopKs: ``add_min_max_taps``)."""

    def __init__(
        self, tensors: Sequence[str], taps: Sequence[str], calls: CallRanges | None = None, tails: Tails | None = None
    ):
        self.tensors, self.taps, self.calls, self.tails = list(tensors), list(taps), calls, tails
        self.tailed = [t for t in self.tensors if tails is not None and t in tails.sizes]
        self.kept = RunningMinMax()
        self.magnitude = RunningMinMax() if calls is not None else None
        if calls is not None:
            calls.start(self.tensors)

    def add(self, values: Sequence[Any]) -> None:
        """One call's tap values, in ``taps``' order."""
        stride = 3 if self.magnitude is not None else 2
        for i, name in enumerate(self.tensors):
            lo, hi = values[stride * i], values[stride * i + 1]
            self.kept.add(name, lo, hi)
            if self.magnitude is not None:
                self.magnitude.add(name, values[stride * i + 2], np.fmax(np.abs(lo), np.abs(hi)))
        if self.calls is not None:
            self.calls.add([amax_of(values[stride * i], values[stride * i + 1]) for i in range(len(self.tensors))])
        if self.tails is not None:
            for name, top in zip(self.tailed, values[stride * len(self.tensors) :]):
                self.tails.add(name, top)
        self.kept.calls += 1

    def finish(self) -> RunningMinMax:
        """The signed ranges over every call added (``calls`` given the signed and |x| ranges too)."""
        if self.calls is not None:
            self.calls.signed, self.calls.magnitude, self.calls.tails = self.kept, self.magnitude, self.tails
        return self.kept


@contextlib.contextmanager
def min_max_session(
    model_path: Path,
    op_types: Sequence[str],
    quantized_outputs: Sequence[str],
    threads: int = 0,
    calls: CallRanges | None = None,
    tails_for: tuple[int, float] | None = None,
) -> Iterator[tuple[Any, MinMaxTaps]]:
    """(an ORT session of ``model_path`` whose graph reduces each tensor ``taps.ranged_tensors``
    names to its min and max, its ``MinMaxTaps``): no graph optimization, as ORT's calibrator runs,
    the weights read from the model's own side file (``taps.tapped_session``). With ``calls``, the
    smallest |x| too: a histogram calibration after this one (--method auto's percentile ranges)
    then skips its own range pass over the calls (``calibrator.collect_histograms``). With
    ``calls`` and ``tails_for`` (calls planned, percentile): each float tensor's largest |x| too
    (``Tails``), from which the percentile ranges need no pass at all (``calibrator.
    percentile_from_tails``)."""
    graph = graph_without_weights(model_path)
    tensors = ranged_tensors(graph, op_types, quantized_outputs)
    tails = _tails(graph, tensors, tails_for) if calls is not None and tails_for is not None else None
    taps = add_min_max_taps(graph, tensors, magnitude=calls is not None, tails=tails.sizes if tails else None)
    tap = MinMaxTaps(tensors, taps, calls, tails)
    with tapped_session(model_path, graph, threads, optimize=False) as session:
        yield session, tap


def _tails(graph: Any, tensors: Sequence[str], tails_for: tuple[int, float]) -> Tails | None:
    """The ``Tails`` of ``tensors`` sized for ``tails_for`` (calls, percentile): None where one is
    not float32 (ORT's CPU TopK) or has no fixed shape, or they pass TAIL_VALUES_CAP."""
    dtypes = value_dtypes(graph)
    counts = element_counts(graph, tensors)
    if counts is None or any(dtypes.get(t) != np.float32 for t in tensors):
        return None
    sizes = tail_sizes(counts, *tails_for)
    return Tails(sizes, counts) if sizes is not None else None


def min_max_data(kept: RunningMinMax) -> Any:
    """``kept`` as the ``TensorsData`` ORT's minmax calibrator computes (each value a [1] array, as
    its ReduceMin with keepdims reshaped to [-1])."""
    if not kept.calls:
        raise EdgekitError("the calibration set is empty", hint="raise --calib-samples")
    calib = require("onnxruntime.quantization.calibrate")
    data = {n: (np.asarray(kept.lo[n]).reshape(1), np.asarray(kept.hi[n]).reshape(1)) for n in kept.lo}
    return calib.TensorsData(calib.CalibrationMethod.MinMax, data)


class LiveRanges(BaseRuntime):
    """The prepared graph tapped for minmax calibration, as the runtime the FP32 calibration decodes
    run on (``live_ranges``): each call's outputs go to the decode loop, its taps into the running
    ranges, as ``calibrator.collect_min_max`` would gather them replaying the same calls on the same
    graph with the same session options (so the same numbers: ``tests/quantize/test_ranges.py``).
    ``ranges()``: the ``CallRanges`` (each call's max |x|, the signed and |x| ranges over all)."""

    name = "fp32 (prepared graph, minmax taps)"

    def __init__(
        self, session: Any, inputs: Mapping[str, TensorSpec], outputs: Mapping[str, TensorSpec], tap: MinMaxTaps
    ):
        super().__init__(inputs, outputs)
        self.session, self.tap = session, tap

    @property
    def calls_run(self) -> int:
        return self.tap.kept.calls

    def _run_impl(self, feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        names = list(self.outputs)
        values = self.session.run([*names, *self.tap.taps], dict(feeds))
        self.tap.add(values[len(names) :])
        return dict(zip(names, values[: len(names)]))

    def _close_impl(self) -> None:
        # The session holds the prepared graph's weights: dropped here, so they are freed when
        # ``live_ranges`` ends, not when the runtime object goes (the FP32 session that decodes the
        # held-out set opened beside them: Sana-600M's peak 5.3 GB against 4.5).
        self.session = None

    def ranges(self) -> CallRanges:
        self.tap.finish()
        assert self.tap.calls is not None
        return self.tap.calls


@contextlib.contextmanager
def live_ranges(
    prepared: Path,
    op_types: Sequence[str],
    quantized_outputs: Sequence[str],
    inputs: Mapping[str, TensorSpec],
    outputs: Mapping[str, TensorSpec],
    threads: int = 0,
    tails_for: tuple[int, float] | None = None,
) -> Iterator[LiveRanges]:
    """A ``LiveRanges`` over ``prepared`` (``min_max_session``, each call's ranges kept, and with
    ``tails_for`` each tensor's largest |x|); closed on exit."""
    with (
        min_max_session(prepared, op_types, quantized_outputs, threads, CallRanges(), tails_for) as (session, tap),
        LiveRanges(session, inputs, outputs, tap) as runtime,
    ):
        yield runtime
