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
from edgekit.quantize.taps import add_min_max_taps, graph_without_weights, ranged_tensors, tapped_session
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

    def start(self, tensors: Sequence[str]) -> None:
        self.index, self.rows = {t: i for i, t in enumerate(tensors)}, []
        self.signed = self.magnitude = None

    def add(self, amax: Sequence[float]) -> None:
        """One call's max |x| of every tensor, in ``start``'s order."""
        self.rows.append(np.asarray(amax, dtype=np.float64))

    def amax(self, tensors: Sequence[str]) -> np.ndarray | None:
        """[calls, len(tensors)] float64, or None where a tensor was not calibrated."""
        if not self.rows or any(t not in self.index for t in tensors):
            return None
        cols = [self.index[t] for t in tensors]
        return np.stack(self.rows)[:, cols] if cols else np.zeros((len(self.rows), 0))


def amax_of(lo: Any, hi: Any) -> float:
    return float(np.fmax(np.abs(np.asarray(lo, np.float64)), np.abs(np.asarray(hi, np.float64))))


def add_tapped_call(
    values: Sequence[Any],
    tensors: Sequence[str],
    kept: RunningMinMax,
    calls: CallRanges | None = None,
    magnitude: RunningMinMax | None = None,
) -> None:
    """One call's tap values (``taps.add_min_max_taps``' order: min, max and, with ``calls``, min
    |x| per tensor) into the running ranges: ``kept`` (signed), ``magnitude`` (|x|), ``calls``."""
    stride = 3 if calls is not None else 2
    for i, name in enumerate(tensors):
        lo, hi = values[stride * i], values[stride * i + 1]
        kept.add(name, lo, hi)
        if calls is not None and magnitude is not None:
            magnitude.add(name, values[stride * i + 2], np.fmax(np.abs(lo), np.abs(hi)))
    if calls is not None:
        calls.add([amax_of(values[stride * i], values[stride * i + 1]) for i in range(len(tensors))])
    kept.calls += 1


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
        self,
        session: Any,
        inputs: Mapping[str, TensorSpec],
        outputs: Mapping[str, TensorSpec],
        tensors: Sequence[str],
        taps: Sequence[str],
    ):
        super().__init__(inputs, outputs)
        self.session = session
        self.tensors, self.taps = list(tensors), list(taps)
        self.kept, self.magnitude, self.calls = RunningMinMax(), RunningMinMax(), CallRanges()
        self.calls.start(self.tensors)

    def _run_impl(self, feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        names = list(self.outputs)
        values = self.session.run([*names, *self.taps], dict(feeds))
        add_tapped_call(values[len(names) :], self.tensors, self.kept, self.calls, self.magnitude)
        return dict(zip(names, values[: len(names)]))

    def _close_impl(self) -> None:
        # The session holds the prepared graph's weights: dropped here, so they are freed when
        # ``live_ranges`` ends, not when the runtime object goes (the FP32 session that decodes the
        # held-out set opened beside them: Sana-600M's peak 5.3 GB against 4.5).
        self.session = None

    def ranges(self) -> CallRanges:
        self.calls.signed, self.calls.magnitude = self.kept, self.magnitude
        return self.calls


@contextlib.contextmanager
def live_ranges(
    prepared: Path,
    op_types: Sequence[str],
    quantized_outputs: Sequence[str],
    inputs: Mapping[str, TensorSpec],
    outputs: Mapping[str, TensorSpec],
    threads: int = 0,
) -> Iterator[LiveRanges]:
    """A ``LiveRanges`` over ``prepared`` (its weights read from its own side file, ``taps.
    tapped_session``), the tensors ``taps.ranged_tensors`` names tapped; closed on exit."""
    graph = graph_without_weights(prepared)
    tensors = ranged_tensors(graph, op_types, quantized_outputs)
    taps = add_min_max_taps(graph, tensors, magnitude=True)
    with (
        tapped_session(prepared, graph, threads, optimize=False) as session,
        LiveRanges(session, inputs, outputs, tensors, taps) as runtime,
    ):
        yield runtime
