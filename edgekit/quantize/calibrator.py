"""Activation ranges gathered call by call: the calibration cache ``quantize_static`` reads,
written without ONNX Runtime's calibrator holding the model twice.

ORT's calibrators (``onnxruntime.quantization.calibrate.create_calibrator``) load the model with
its weights into a Python ``ModelProto``, save an augmented copy and open a session over that copy,
and keep the proto while the session runs: two copies of the weights at once (a 2.25 GiB masked
transformer: 7.0 GB peak, 3.1x its weights; ``docs/large-models.md``). Here the graph is read
without its weights, the taps are added to it, and the one session reads the weights from the
model's own side file. The statistics are accumulated as each call returns:

- minmax: ReduceMin/ReduceMax taps in the graph; a running min and max per tensor.
- entropy, percentile: the tensors fetched, in two passes over the calls: the first keeps each
  tensor's range, the second sums each call's histogram over that fixed range. Those are the bins
  ORT's histogram collector makes from all calls at once (same edges, same counts), so its own
  threshold search (``HistogramCollector.compute_collection_result``) gives the same thresholds,
  where merging call by call would re-bin as the range widens and give other ones.

What is kept grows with the number of tensors, never with the number of calls, and the cache equals
the one ORT's calibrator writes from the same calls (``tests/quantize/test_calibrator.py``).
``onnx`` and ``onnxruntime`` are imported lazily.
"""

from __future__ import annotations

import contextlib
import tempfile
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from edgekit._deps import require
from edgekit._sidefiles import side_files_beside
from edgekit.errors import EdgekitError
from edgekit.quantize.memory import give_back_freed
from edgekit.quantize.quiet import quiet_ort_logging

# onnx.TensorProto element types ORT's calibrators observe: FLOAT and FLOAT16.
CALIBRATED_TYPES = (1, 10)


def calibrated_tensors(graph: Any, op_types: Sequence[str]) -> list[str]:
    """The tensors ORT's calibrator records for ``op_types`` (``CalibraterBase.
    select_tensors_to_calibrate``): every input and output of those nodes whose type the graph
    knows (value_info, inputs, outputs) as float or float16, initializers excluded. ``graph``: a
    shape-inferred ``ModelProto``."""
    g = graph.graph
    known = {v.name: v for v in [*g.value_info, *g.output, *g.input]}
    inits = {i.name for i in g.initializer}
    wanted = set(op_types)
    out: set[str] = set()
    for node in g.node:
        if wanted and node.op_type not in wanted:
            continue
        for name in [*node.input, *node.output]:
            v = known.get(name)
            if v is None or name in inits or not v.type.HasField("tensor_type"):
                continue
            if v.type.tensor_type.elem_type in CALIBRATED_TYPES:
                out.add(name)
    return sorted(out)


def graph_without_weights(model_path: Path) -> Any:
    """``model_path``'s graph, shapes inferred, its external weights left in their file (a model
    that keeps its weights inside the .onnx is small enough to hold: under the side-file rule)."""
    onnx = require("onnx")
    return onnx.shape_inference.infer_shapes(onnx.load(str(model_path), load_external_data=False))


def add_min_max_taps(graph: Any, tensors: Sequence[str], prefix: str = "edgekit_range") -> list[str]:
    """Add a ReduceMin and a ReduceMax over all of each tensor to ``graph`` (scalar outputs), each
    pair right after the node that makes the tensor (a graph input's first): run in that order
    (``tapped_session``), a tensor is reduced, and freed, as soon as its consumers are done, where
    taps at the end would keep every tapped tensor of the call alive (+1 GB a call on a 2.25 GiB
    transformer). Returns their output names, min and max alternating."""
    onnx = require("onnx")
    helper = onnx.helper
    g = graph.graph
    elem = {v.name: v.type.tensor_type.elem_type for v in [*g.value_info, *g.input, *g.output]}
    taps: list[str] = []
    after: dict[str, list[Any]] = {}
    for i, name in enumerate(tensors):
        for op in ("ReduceMin", "ReduceMax"):
            out = f"{prefix}_{op[6:].lower()}_{i}"
            after.setdefault(name, []).append(helper.make_node(op, [name], [out], keepdims=0, name=out))
            g.output.append(helper.make_tensor_value_info(out, elem.get(name) or onnx.TensorProto.FLOAT, []))
            taps.append(out)
    nodes = [tap for v in g.input for tap in after.pop(v.name, [])]
    for node in g.node:
        nodes.append(node)
        nodes += [tap for o in node.output for tap in after.pop(o, [])]
    nodes += [tap for rest in after.values() for tap in rest]  # made by no node: ORT will say so
    del g.node[:]
    g.node.extend(nodes)
    return taps


def add_tensor_outputs(graph: Any, tensors: Sequence[str]) -> list[str]:
    """Make each of ``tensors`` a graph output (graph inputs are read from the feeds instead);
    returns the names to fetch."""
    g = graph.graph
    inputs, outputs = {v.name for v in g.input}, {v.name for v in g.output}
    known = {v.name: v for v in g.value_info}
    fetch = []
    for name in tensors:
        if name in inputs:
            continue
        if name not in outputs:
            g.output.append(known[name])
        fetch.append(name)
    return fetch


@contextlib.contextmanager
def tapped_session(model_path: Path, graph: Any, threads: int = 0, optimize: bool = True) -> Iterator[Any]:
    """An ORT session of ``graph`` (a copy of ``model_path``'s with taps added) that reads the
    weights from ``model_path``'s own side file: the graph is written to a scratch folder beside the
    model with its side files linked in, so no copy of the weights is made on disk or in Python.
    ``optimize`` False: no graph optimization (what ORT's calibrators run, so the tensors are the
    ones they observe)."""
    onnx = require("onnx")
    ort = require("onnxruntime")
    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    # The nodes in the graph's order, as ready (each tap right after its tensor's producer), and no
    # memory pattern: ORT's default order ran the taps last (+1 GB of live tensors a call at 2.25
    # GiB), and its pattern, set up after the first run, took a second block beside the first
    # run's (+1 GB more). Either way the tensors ORT computes are the same.
    order = getattr(getattr(ort, "ExecutionOrder", None), "PRIORITY_BASED", None)
    if order is not None:
        options.execution_order = order
    options.enable_mem_pattern = False
    if not optimize:
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    give_back_freed()  # its weights are mapped from their file: not on top of what a last step freed
    with tempfile.TemporaryDirectory(prefix="edgekit-taps-", dir=model_path.parent) as tmp:
        path = Path(tmp) / "tapped.onnx"
        with side_files_beside(model_path, Path(tmp)), quiet_ort_logging():
            onnx.save(graph, str(path))
            session = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
    try:
        yield session
    finally:
        del session


def each_call(reader: Any, each: Callable[[int], None] | None = None) -> Iterator[dict[str, np.ndarray]]:
    """Every feed of a rewindable calibration reader (``calibrate.TrajectoryReader``), once;
    ``each(i)`` after the i-th (from 1: a progress line, ``plan.Eta``)."""
    reader.rewind()
    done = 0
    while (feed := reader.get_next()) is not None:
        yield feed
        done += 1
        if each is not None:
            each(done)


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

    def start(self, tensors: Sequence[str]) -> None:
        self.index, self.rows = {t: i for i, t in enumerate(tensors)}, []

    def add(self, amax: Sequence[float]) -> None:
        """One call's max |x| of every tensor, in ``start``'s order."""
        self.rows.append(np.asarray(amax, dtype=np.float64))

    def amax(self, tensors: Sequence[str]) -> np.ndarray | None:
        """[calls, len(tensors)] float64, or None where a tensor was not calibrated."""
        if not self.rows or any(t not in self.index for t in tensors):
            return None
        cols = [self.index[t] for t in tensors]
        return np.stack(self.rows)[:, cols] if cols else np.zeros((len(self.rows), 0))


def _amax(lo: Any, hi: Any) -> float:
    return float(np.fmax(np.abs(np.asarray(lo, np.float64)), np.abs(np.asarray(hi, np.float64))))


def collect_min_max(
    model_path: Path,
    reader: Any,
    op_types: Sequence[str],
    threads: int = 0,
    calls: CallRanges | None = None,
    each: Callable[[int], None] | None = None,
) -> RunningMinMax:
    """Each calibrated tensor's min and max over every call of ``reader``, in one session whose
    graph reduces them (one number each per call); ``calls``: each call's max |x| kept too."""
    graph = graph_without_weights(model_path)
    tensors = calibrated_tensors(graph, op_types)
    taps = add_min_max_taps(graph, tensors)
    kept = RunningMinMax()
    if calls is not None:
        calls.start(tensors)
    with tapped_session(model_path, graph, threads, optimize=False) as session:
        for feed in each_call(reader, each):
            values = session.run(taps, feed) if taps else []
            for i, name in enumerate(tensors):
                kept.add(name, values[2 * i], values[2 * i + 1])
            if calls is not None:
                calls.add([_amax(values[2 * i], values[2 * i + 1]) for i in range(len(tensors))])
            kept.calls += 1
    return kept


# ---- histograms (entropy, percentile) -----------------------------------------------------------
# Histogram sizes for method=entropy. quantize_static cannot pass them, and ORT's defaults (128
# bins for 128 quantized bins) leave the KL search nothing to clip: entropy == minmax. TensorRT
# searches 2048 bins, but ORT's KL search is pure Python: calibrating the masked demo took 9 s
# with 512 bins, 21 s with 1024 (about 60 s extrapolated for 2048), so 512.
ENTROPY_BINS = {"num_bins": 512, "num_quantized_bins": 128}


def histogram_collector(method: str, percentile: float) -> Any:
    """ORT's ``HistogramCollector`` set up as ``create_calibrator`` sets up its calibrator for
    ``method``: entropy over ENTROPY_BINS of the signed values; percentile over 2048 bins of |x|."""
    calib = require("onnxruntime.quantization.calibrate")
    if method == "entropy":
        return calib.HistogramCollector("entropy", False, percentile=99.999, scenario="same", **ENTROPY_BINS)
    return calib.HistogramCollector("percentile", True, 2048, 2048, percentile, "same")


def _abs_range(arr: np.ndarray) -> tuple[Any, Any]:
    a = np.abs(arr)
    return a.min(), a.max()


def collect_histograms(
    model_path: Path,
    reader: Any,
    op_types: Sequence[str],
    collector: Any,
    threads: int = 0,
    calls: CallRanges | None = None,
    each: Callable[[int], None] | None = None,
) -> dict[str, tuple[Any, ...]]:
    """Fill ``collector.histogram_dict`` with the histogram ORT's ``collector.collect`` makes of
    every call at once, in two passes over ``reader`` holding one call's tensors at a time: the
    range first (signed min/max; with |x| bins also min/max of |x|), then each call's histogram over
    that fixed range, summed. Returns the dict (tensor -> ORT's histogram tuple)."""
    graph = graph_without_weights(model_path)
    tensors = calibrated_tensors(graph, op_types)
    fetch = add_tensor_outputs(graph, tensors)
    absolute = collector.method == "percentile" and collector.symmetric  # ORT's collect_absolute_value
    signed, magnitude = RunningMinMax(), RunningMinMax()
    with tapped_session(model_path, graph, threads, optimize=False) as session:
        done = [0]  # calls run over both passes: progress counts them all

        def tick(_: int) -> None:
            done[0] += 1
            if each is not None:
                each(done[0])

        def each_feed() -> Iterator[dict[str, np.ndarray]]:
            for feed in each_call(reader, tick):
                values = dict(zip(fetch, session.run(fetch, feed) if fetch else []))
                yield {name: values[name] if name in values else feed[name] for name in tensors}

        if calls is not None:
            calls.start(tensors)
        for call in each_feed():
            amax = []
            for name, arr in call.items():
                lo = hi = 0.0
                if arr.size:
                    lo, hi = np.nanmin(arr), np.nanmax(arr)
                    signed.add(name, lo, hi)
                    if absolute:
                        magnitude.add(name, *_abs_range(arr))
                amax.append(_amax(lo, hi))
            if calls is not None:
                calls.add(amax)
        hists: dict[str, np.ndarray] = {}
        edges: dict[str, np.ndarray] = {}
        dtypes = value_dtypes(graph)
        bounds = {n: _bins_range(n, signed, magnitude, absolute, dtypes[n]) for n in tensors}
        for call in each_feed():
            for name, arr in call.items():
                data = np.abs(arr) if absolute else arr
                h, e = np.histogram(data.ravel(), collector.num_bins, range=bounds[name])
                hists[name] = hists[name] + h if name in hists else h
                edges[name] = e
    if tensors and not hists:
        raise EdgekitError("the calibration set is empty", hint="raise --calib-samples")
    for name in tensors:
        low, high = signed.lo.get(name), signed.hi.get(name)  # numpy values (the loop above's lo, hi are floats)
        if low is None:  # ORT's value for a tensor with no elements
            low = high = np.array(0, dtype=dtypes[name])
        if absolute:
            collector.histogram_dict[name] = (hists[name], edges[name].astype(low.dtype), low, high)
        else:
            collector.histogram_dict[name] = (hists[name], edges[name], low, high, bounds[name][1])
    return collector.histogram_dict


def value_dtypes(graph: Any) -> dict[str, np.dtype]:
    """The numpy dtype of every tensor whose type ``graph`` declares (value_info, inputs, outputs)."""
    to_np = require("onnx").helper.tensor_dtype_to_np_dtype
    g = graph.graph
    return {
        v.name: np.dtype(to_np(v.type.tensor_type.elem_type))
        for v in [*g.value_info, *g.input, *g.output]
        if v.type.HasField("tensor_type") and v.type.tensor_type.elem_type
    }


def _bins_range(name: str, signed: RunningMinMax, magnitude: RunningMinMax, absolute: bool, dtype: np.dtype) -> Any:
    """The range ORT's collector bins ``name`` over, from all calls' values: |x| from its min to its
    max, as the tensor's own scalars (np.histogram's own range: its edges are computed in the
    tensor's dtype, not in float64), else ±max(|min|, |max|) (0-d arrays of the tensor's dtype)."""
    if absolute:
        return (magnitude.lo[name], magnitude.hi[name]) if name in magnitude.lo else None
    lo, hi = signed.lo.get(name, np.array(0, dtype)), signed.hi.get(name, np.array(0, dtype))
    threshold = np.array(max(abs(lo), abs(hi)), dtype=dtype)
    return -threshold, threshold


# ---- the cache ----------------------------------------------------------------------------------
def collect_ranges(
    model_path: Path,
    reader: Any,
    method: str,
    op_types: Sequence[str],
    percentile: float = 99.999,
    threads: int = 0,
    calls: CallRanges | None = None,
    each: Callable[[int], None] | None = None,
) -> Any:
    """The ``TensorsData`` ORT's calibrator for ``method`` (minmax | entropy | percentile) computes
    from every call of ``reader`` on ``model_path``, gathered call by call (module docstring);
    ``calls``: each call's max |x| of every tensor kept too (``CallRanges``)."""
    calib = require("onnxruntime.quantization.calibrate")
    if method == "minmax":
        kept = collect_min_max(Path(model_path), reader, op_types, threads, calls, each)
        if not kept.calls:
            raise EdgekitError("the calibration set is empty", hint="raise --calib-samples")
        # ORT's calibrator keeps each as a [1] array (ReduceMin with keepdims, reshaped to [-1]).
        data = {n: (np.asarray(kept.lo[n]).reshape(1), np.asarray(kept.hi[n]).reshape(1)) for n in kept.lo}
        return calib.TensorsData(calib.CalibrationMethod.MinMax, data)
    collector = histogram_collector(method, percentile)
    collect_histograms(Path(model_path), reader, op_types, collector, threads, calls, each)
    with quiet_ort_logging():  # its threshold search prints progress
        thresholds = collector.compute_collection_result()
    which = calib.CalibrationMethod.Entropy if method == "entropy" else calib.CalibrationMethod.Percentile
    return calib.TensorsData(which, thresholds)


def write_calibration_cache(ranges: Any, path: Path) -> None:
    """``ranges`` (a ``TensorsData``) where ``quantize_static(calibration_cache_path=...)`` reads it."""
    require("onnxruntime.quantization.calibrate").save_tensors_data(ranges, path)
