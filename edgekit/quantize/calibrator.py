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
  tensor's range, the second sums each call's histogram over that fixed range (one pass where a
  minmax pass over the same calls kept the ranges: --method auto's percentile after minmax).
  Those are the bins ORT's histogram collector makes from all calls at once (same edges, same
  counts), so its own threshold search (``HistogramCollector.compute_collection_result``) gives
  the same thresholds, where merging call by call would re-bin as the range widens.

What is kept grows with the number of tensors, never with the number of calls, and the cache equals
the one ORT's calibrator writes from the same calls (``tests/quantize/test_calibrator.py``).
``onnx`` and ``onnxruntime`` are imported lazily.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from edgekit._deps import require
from edgekit.errors import EdgekitError
from edgekit.quantize.memory import tensor_bytes
from edgekit.quantize.quiet import quiet_ort_logging
from edgekit.quantize.ranges import CallRanges, RunningMinMax, amax_of, min_max_data, min_max_session
from edgekit.quantize.segments import chain_forwards, grouped_runs
from edgekit.quantize.taps import (
    ALL_OUTPUTS,
    fetch_cap,
    fetch_groups,
    fetch_names,
    graph_without_weights,
    group_progress,
    in_graph_order,
    needed_nodes,
    ranged_tensors,
    value_dtypes,
)


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


def collect_min_max(
    model_path: Path,
    reader: Any,
    op_types: Sequence[str],
    threads: int = 0,
    calls: CallRanges | None = None,
    each: Callable[[int], None] | None = None,
    quantized_outputs: Sequence[str] = ALL_OUTPUTS,
    percentile: float | None = None,
) -> RunningMinMax:
    """Each calibrated tensor's min and max over every call of ``reader``, in one session whose
    graph reduces them (one number each per call); ``calls``: each call's max |x| kept too, and
    with ``percentile`` each tensor's largest |x| (``ranges.Tails``: the percentile ranges then
    need no pass of their own, ``percentile_from_tails``). ``quantized_outputs``: whose outputs
    are calibrated (``taps.ranged_tensors``)."""
    tails_for = (len(reader), percentile) if percentile is not None and hasattr(reader, "__len__") else None
    with min_max_session(model_path, op_types, quantized_outputs, threads, calls, tails_for) as (session, tap):
        for feed in each_call(reader, each):
            tap.add(session.run(tap.taps, feed) if tap.taps else [])
    return tap.finish()


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


def _histogram_groups(graph: Any, tensors: Sequence[str], cap: int) -> list[list[str]]:
    """The fetch groups of ``collect_histograms``: the calibrated tensors (graph inputs are read from
    the feeds) in graph order, at most ``cap`` bytes (``taps.fetch_cap``) a group."""
    inputs = {v.name for v in graph.graph.input}
    return fetch_groups(in_graph_order(graph, [t for t in tensors if t not in inputs]), tensor_bytes(graph), cap)


def histogram_forwards(
    model_path: Path,
    op_types: Sequence[str],
    fetch_bytes: int | None = None,
    quantized_outputs: Sequence[str] = ALL_OUTPUTS,
    calls: int = 1,
) -> float:
    """A histogram pass over one call of ``model_path`` (of ``calls``) in forwards of the whole
    graph: each fetch group's graph runs the nodes its tensors need (chained,
    ``segments.chain_forwards``: those no earlier group's graph ran; else ``taps.needed_nodes``,
    what ``taps.outputs_only`` keeps), counted as their share of the graph's nodes. 1.0 where one
    group holds every tensor; what ``Plan`` prices the percentile pass of ``--method auto`` with
    (Sana-600M: three groups, 0.997 forwards chained, 2.19 not)."""
    graph = graph_without_weights(model_path)
    cap = fetch_bytes if fetch_bytes is not None else fetch_cap(model_path)
    groups = _histogram_groups(graph, ranged_tensors(graph, op_types, quantized_outputs), cap)
    if len(groups) <= 1:
        return 1.0
    forwards = chain_forwards(graph, groups, calls, cap, Path(model_path).parent)
    if forwards is not None:
        return forwards
    nodes = max(len(graph.graph.node), 1)
    return sum(len(needed_nodes(graph, fetch_names(graph, group))) for group in groups) / nodes


def collect_histograms(
    model_path: Path,
    reader: Any,
    op_types: Sequence[str],
    collector: Any,
    threads: int = 0,
    calls: CallRanges | None = None,
    each: Callable[[int], None] | None = None,
    known: CallRanges | None = None,
    fetch_bytes: int | None = None,
    quantized_outputs: Sequence[str] = ALL_OUTPUTS,
) -> dict[str, tuple[Any, ...]]:
    """Fill ``collector.histogram_dict`` with the histogram ORT's ``collector.collect`` makes of
    every call at once, in two passes over ``reader``: the range first (signed min/max; with |x|
    bins also min/max of |x|), then each call's histogram over that fixed range, summed.
    ``known``: the ranges a minmax pass over the same calls kept (``CallRanges.signed``/
    ``magnitude``): the first pass is skipped where they cover every tensor.

    Memory is the session and one group of one call's tensors: ORT holds every output of a graph
    until a run returns, so the tensors are fetched in groups of at most ``fetch_bytes`` (default
    ``taps.fetch_cap``), each from a graph that outputs only that group (Sana-600M: 1.5 GB of
    calibrated tensors a call, 6.5 GB in all when one graph output them). A model whose call fits
    one group runs one graph; with more, the groups' graphs run as one chain where what they pass
    on fits memory or disk (``segments.grouped_runs``; else each runs the layers up to its last
    tensor: ``histogram_forwards``). Each tensor's histogram sums the calls in order.
    ``quantized_outputs``: whose outputs are binned (``taps.ranged_tensors``; the others' histograms
    would never be read). Returns the dict (tensor -> ORT's histogram tuple)."""
    graph = graph_without_weights(model_path)
    tensors = ranged_tensors(graph, op_types, quantized_outputs)
    cap = fetch_bytes if fetch_bytes is not None else fetch_cap(model_path)
    groups = _histogram_groups(graph, tensors, cap)
    absolute = collector.method == "percentile" and collector.symmetric  # ORT's collect_absolute_value
    signed, magnitude = RunningMinMax(), RunningMinMax()
    ranged = (
        known is not None
        and known.signed is not None
        and known.magnitude is not None
        and all(t in known.signed.lo and t in known.magnitude.lo for t in tensors)
    )
    if ranged:  # the calls' ranges are known: one pass, the histograms
        assert known is not None and known.signed is not None and known.magnitude is not None
        signed, magnitude = known.signed, known.magnitude
    passes = 1 if ranged else 2
    n_calls = [0, 0]  # the calls each pass read (known after its first group)
    column = {t: c for c, t in enumerate(tensors)}
    amax: list[list[float]] = []  # [call][tensor] max |x|, for ``calls``

    def over_calls(p: int, visit: Callable[[str, np.ndarray, int], None]) -> None:
        _over_calls(model_path, graph, groups, tensors, reader, threads, visit, p, n_calls, each, cap)

    def ranges(name: str, arr: np.ndarray, i: int) -> None:
        while len(amax) <= i:
            amax.append([0.0] * len(tensors))
        lo = hi = 0.0
        if arr.size:
            lo, hi = np.nanmin(arr), np.nanmax(arr)
            signed.add(name, lo, hi)
            if absolute:
                magnitude.add(name, *_abs_range(arr))
        amax[i][column[name]] = amax_of(lo, hi)

    if not ranged:
        over_calls(0, ranges)
        if calls is not None:
            calls.start(tensors)
            for row in amax:
                calls.add(row)
    hists: dict[str, np.ndarray] = {}
    edges: dict[str, np.ndarray] = {}
    dtypes = value_dtypes(graph)
    bounds = {n: _bins_range(n, signed, magnitude, absolute, dtypes[n]) for n in tensors}

    def histogram(name: str, arr: np.ndarray, i: int) -> None:
        data = np.abs(arr) if absolute else arr
        h, e = np.histogram(data.ravel(), collector.num_bins, range=bounds[name])
        hists[name] = hists[name] + h if name in hists else h
        edges[name] = e

    over_calls(passes - 1, histogram)
    return _histogram_dict(collector, tensors, hists, edges, signed, bounds, absolute, dtypes)


def _histogram_dict(
    collector: Any,
    tensors: Sequence[str],
    hists: dict[str, np.ndarray],
    edges: dict[str, np.ndarray],
    signed: RunningMinMax,
    bounds: dict[str, Any],
    absolute: bool,
    dtypes: dict[str, np.dtype],
) -> dict[str, tuple[Any, ...]]:
    """``collector.histogram_dict`` as ORT's collector fills it, from the summed histograms."""
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


def _over_calls(
    model_path: Path,
    graph: Any,
    groups: Sequence[Sequence[str]],
    tensors: Sequence[str],
    reader: Any,
    threads: int,
    visit: Callable[[str, np.ndarray, int], None],
    p: int,
    n_calls: list[int],
    each: Callable[[int], None] | None,
    cap: int,
) -> None:
    """``visit(tensor, value, call)`` for every calibrated tensor of every call of ``reader``,
    group by group (``segments.grouped_runs``: chained where the carry fits ``cap``); the graph
    inputs among the tensors are read from the feeds with the first group. ``n_calls[p]``: the
    calls of pass ``p``; ``each``: progress in calls' worth of both passes."""
    inputs = {v.name for v in graph.graph.input}
    wanted = [t for t in tensors if t in inputs]
    count = len(reader) if hasattr(reader, "__len__") else None
    for g, i, feed, values in grouped_runs(model_path, graph, groups, lambda: each_call(reader), count, cap, threads):
        for name in [*groups[g], *(wanted if g == 0 else ())]:
            visit(name, values.pop(name) if name in values else feed[name], i)
        if g == 0:
            n_calls[p] = i + 1
        if each is not None:  # in calls' worth: pass p of one graph over every call
            each(group_progress(p * n_calls[0], g, len(groups), n_calls[p], i))


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
    known: CallRanges | None = None,
    quantized_outputs: Sequence[str] = ALL_OUTPUTS,
) -> Any:
    """The ``TensorsData`` ORT's calibrator for ``method`` (minmax | entropy | percentile) computes
    from every call of ``reader`` on ``model_path``, gathered call by call (module docstring);
    ``calls``: each call's max |x| of every tensor kept too (``CallRanges``). ``quantized_outputs``:
    the node types whose outputs quantize_static quantizes: the ranges of the other outputs, which it
    never reads, are not gathered (``taps.ranged_tensors``; "*": every tensor, as ORT's calibrator)."""
    calib = require("onnxruntime.quantization.calibrate")
    if method == "minmax":
        kept = collect_min_max(Path(model_path), reader, op_types, threads, calls, each, quantized_outputs)
        return min_max_data(kept)
    collector = histogram_collector(method, percentile)
    if method == "percentile" and known is not None and (cut := percentile_from_tails(collector, known, model_path)):
        return calib.TensorsData(calib.CalibrationMethod.Percentile, cut)
    collect_histograms(
        Path(model_path), reader, op_types, collector, threads, calls, each, known, quantized_outputs=quantized_outputs
    )
    with quiet_ort_logging():  # its threshold search prints progress
        thresholds = collector.compute_collection_result()
    which = calib.CalibrationMethod.Entropy if method == "entropy" else calib.CalibrationMethod.Percentile
    return calib.TensorsData(which, thresholds)


def tails_suffice(known: CallRanges, percentile: float) -> bool:
    """Whether ``known`` (a minmax pass's ``CallRanges``) kept what ``percentile_from_tails`` needs
    to cut every one of its tensors at ``percentile`` as the whole histogram would: each tensor's
    |x| range, and more of its largest |x| than (1 - p/100) of all its values (all of them where
    it had fewer), none of them NaN or inf."""
    tails, magnitude = known.tails, known.magnitude
    if tails is None or known.signed is None or magnitude is None or not known.index:
        return False
    share = 1.0 - percentile / 100.0
    for name in known.index:
        top, seen = tails.top.get(name), tails.seen.get(name, 0)
        if top is None or not seen or name not in magnitude.lo or not np.isfinite(top).all():
            return False
        if top.size < seen and not top.size > share * seen * (1 + 1e-9) + 1:
            return False
    return True


def percentile_from_tails(collector: Any, known: CallRanges, model_path: Path) -> dict[str, Any] | None:
    """The ranges ORT's percentile ``collector`` cuts from the histogram of every call of every
    tensor, from the largest |x| a pass over the calls kept instead (``known.tails``, ``ranges.
    Tails``), or None where they cannot decide it (a tensor without them, a NaN or inf among them,
    or fewer than the cut may need: more calls ran than they were sized for).

    The histogram is ORT's: 2048 bins of |x| from its smallest to its largest over all calls (``known.
    magnitude``), and the cut the first bin edge where the cumulative share reaches p. Every value
    above the smallest kept one is kept, so every bin above that one's is counted exactly; the
    values not kept (N - k, all in that bin or below) go into that bin. Where k > (1 - p/100) * N the
    cut lies in the exact bins: the same edge as the whole histogram's, up to the rounding of ORT's
    float cumulative sum where a bin's count above is exactly (1 - p/100) * N. Returns tensor ->
    ``TensorData(lowest, highest)``: the histogram's first two counts, which ORT keeps beside them
    for its debug plot and which quantize_static never reads, are not known here."""
    if not tails_suffice(known, collector.percentile):
        return None
    assert known.tails is not None and known.signed is not None and known.magnitude is not None
    calib = require("onnxruntime.quantization.calibrate")
    tails, signed, magnitude = known.tails, known.signed, known.magnitude
    graph = graph_without_weights(model_path)
    tensors = list(known.index)  # the pass's tensors, in its order
    hists: dict[str, np.ndarray] = {}
    edges: dict[str, np.ndarray] = {}
    dtypes = value_dtypes(graph)
    bounds: dict[str, Any] = {}
    for name in tensors:
        top, seen = tails.top[name], tails.seen[name]
        bounds[name] = _bins_range(name, signed, magnitude, True, dtypes[name])
        hist, edges[name] = np.histogram(top, collector.num_bins, range=bounds[name])
        if top.size < seen:
            hist[np.flatnonzero(hist)[0]] += seen - top.size
        hists[name] = hist
    _histogram_dict(collector, tensors, hists, edges, signed, bounds, True, dtypes)
    with quiet_ort_logging():
        cut = collector.compute_collection_result()
    return {n: calib.TensorData(lowest=cut[n][0], highest=cut[n][1]) for n in tensors}


def write_calibration_cache(ranges: Any, path: Path) -> None:
    """``ranges`` (a ``TensorsData``) where ``quantize_static(calibration_cache_path=...)`` reads it."""
    require("onnxruntime.quantization.calibrate").save_tensors_data(ranges, path)
