"""The calibrator that gathers activation ranges call by call (``quantize/calibrator.py``): the cache
it writes equals ONNX Runtime's calibrator's from the same calls, and what it keeps does not grow
with the number of calls."""

from __future__ import annotations

import tempfile
import tracemalloc
from pathlib import Path

import numpy as np
import pytest

from edgekit.quantize import calibrator, taps
from edgekit.quantize import ranges as ranges_module
from edgekit.quantize.calibrate import calibration_reader
from edgekit.quantize.config import METHODS, WEIGHTED_OPS, QuantizeConfig
from edgekit.quantize.quiet import quiet_ort_logging
from tests.quantize.conftest import tiny_feeds

pytest.importorskip("onnxruntime")
onnx = pytest.importorskip("onnx")
calib = pytest.importorskip("onnxruntime.quantization.calibrate")


def ort_calibrator_ranges(model: Path, feeds, method: str, op_types, percentile: float | None = None) -> object:
    """What ORT's own calibrator computes from ``feeds`` (every call at once), set up as edgekit
    set it up before it gathered the ranges itself (``percentile``: default QuantizeConfig's)."""
    options: dict = {}
    if method == "entropy":
        options |= calibrator.ENTROPY_BINS
    if method == "percentile":
        options["percentile"] = percentile if percentile is not None else QuantizeConfig().percentile
    with tempfile.TemporaryDirectory() as tmp, quiet_ort_logging():
        ort_calibrator = calib.create_calibrator(
            model,
            list(op_types),
            augmented_model_path=str(Path(tmp) / "augmented.onnx"),
            calibrate_method=getattr(calib.CalibrationMethod, METHODS[method]),
            extra_options=options,
        )
        ort_calibrator.collect_data(calibration_reader(feeds))
        return ort_calibrator.compute_data()


def assert_same_ranges(ours, theirs, tensors=None) -> None:
    """Same method, same tensors (``tensors``: ours are those of theirs), and every field equal:
    values, dtypes and shapes."""
    assert ours.calibration_method == theirs.calibration_method
    assert sorted(ours.keys()) == sorted(theirs.keys() if tensors is None else tensors)
    for name in ours.keys():
        a, b = ours[name], theirs[name]
        assert sorted(a._attrs) == sorted(b._attrs), name
        for attr in b._attrs:
            x, y = np.asarray(getattr(a, attr)), np.asarray(getattr(b, attr))
            assert x.dtype == y.dtype and x.shape == y.shape, (name, attr, x.dtype, y.dtype, x.shape, y.shape)
            np.testing.assert_array_equal(x, y, err_msg=f"{name}.{attr}")


@pytest.mark.parametrize("method", sorted(METHODS))
def test_tiny_graph_ranges_equal_ort_calibrators(tiny_model, method):
    """LayerNormalization and Add too: the graph input x and the graph output y are calibrated."""
    op_types = (*WEIGHTED_OPS, "LayerNormalization", "Add")
    feeds = tiny_feeds(8)
    ours = calibrator.collect_ranges(tiny_model, calibration_reader(feeds), method, op_types)
    assert {"x", "y", "h", "s"} <= set(ours.keys())
    assert_same_ranges(ours, ort_calibrator_ranges(tiny_model, feeds, method, op_types))


@pytest.fixture(scope="module")
def demo_calls(quant_bundles, tmp_path_factory) -> dict[str, tuple[Path, list]]:
    """{kind: (the prepared graph quantize calibrates, the network calls of one FP32 decode)}."""
    from edgekit.bundle import Bundle
    from edgekit.quantize.calibrate import record_trajectories
    from edgekit.quantize.cpu.ptq import prepare_model
    from edgekit.runtimes.ort import OrtRuntime

    out = {}
    for kind, path in quant_bundles.items():
        bundle = Bundle.load(path)
        prepared, _, _ = prepare_model(bundle.path_of("fp32"), tmp_path_factory.mktemp(kind) / "prepared.onnx")
        with OrtRuntime(bundle.path_of("fp32")) as rt:
            traj = record_trajectories(bundle, rt, bundle.batch, seed=3)
        out[kind] = (prepared, traj.feeds[:: max(1, len(traj.feeds) // 6)])
    return out


@pytest.mark.parametrize("kind", ["masked", "flow", "ar"])
@pytest.mark.parametrize("method", ["minmax", "percentile"])
def test_demo_calibration_cache_equals_ort_calibrators(demo_calls, kind, method, tmp_path):
    """What ``ptq.calibrate`` writes is what ORT's calibrator computes from the same calls, read
    back from the file as ``quantize_static`` reads it: the ranges of the tensors the cpu profile's
    quantize_static reads (``taps.ranged_tensors``: no MatMul/Gemm output), each equal to ORT's."""
    from edgekit.quantize.cpu import ptq

    prepared, feeds = demo_calls[kind]
    cfg = QuantizeConfig(method=method)
    cache = tmp_path / "calibration.json"
    assert ptq.calibrate(prepared, calibration_reader(feeds), cfg, cache)
    graph = taps.graph_without_weights(prepared)
    ranged = taps.ranged_tensors(graph, cfg.op_types, cfg.settings.quantized_outputs)
    assert 0 < len(ranged) < len(taps.calibrated_tensors(graph, cfg.op_types))
    theirs = ort_calibrator_ranges(prepared, feeds, method, cfg.op_types)
    assert_same_ranges(calib.load_tensors_data(cache), theirs, ranged)


def test_ranged_tensors_drop_the_outputs_quantize_static_never_quantizes(tiny_model):
    """The cpu profile quantizes Conv outputs only: of the MatMul/Gemm outputs, those another
    MatMul/Gemm reads stay (q, e), the rest go (k feeds a Transpose, s a Softmax, ...); "*" keeps
    ORT's calibrator's set."""
    graph = taps.graph_without_weights(tiny_model)
    every = taps.calibrated_tensors(graph, WEIGHTED_OPS)
    assert taps.ranged_tensors(graph, WEIGHTED_OPS) == every == taps.ranged_tensors(graph, WEIGHTED_OPS, ("*",))
    ranged = taps.ranged_tensors(graph, WEIGHTED_OPS, ("Conv",))
    assert sorted(set(every) - set(ranged)) == ["a", "ea", "eb", "k", "s", "y0m"]
    assert {"h", "q", "kT", "p", "a2", "sc16", "e"} <= set(ranged)
    # trt: no output quantized; the same here (no Conv), qnn: every output
    assert taps.ranged_tensors(graph, WEIGHTED_OPS, ()) == ranged


@pytest.mark.parametrize("kind", ["masked", "flow"])
@pytest.mark.parametrize(("method", "profile"), [("minmax", "cpu"), ("percentile", "cpu"), ("percentile", "trt")])
def test_the_int8_model_from_the_pruned_cache_is_the_one_from_every_tensors_ranges(
    demo_calls, kind, method, profile, tmp_path
):
    """quantize_static given ptq.calibrate's cache (no range of an output it does not quantize)
    writes the very graph it writes from ORT's calibrator's cache of every tensor."""
    from edgekit.quantize import graph as qgraph
    from edgekit.quantize.cpu import ptq, select

    prepared, feeds = demo_calls[kind]
    cfg = QuantizeConfig(method=method, profile=profile)
    ours, theirs = tmp_path / "ours.json", tmp_path / "theirs.json"
    assert ptq.calibrate(prepared, calibration_reader(feeds), cfg, ours)
    calibrator.write_calibration_cache(ort_calibrator_ranges(prepared, feeds, method, cfg.op_types), theirs)
    assert len(calib.load_tensors_data(ours).keys()) < len(calib.load_tensors_data(theirs).keys())
    plan = qgraph.analyse_graph(prepared)
    nodes = select.select_nodes(plan, cfg)[0]
    graphs = []
    for cache in (ours, theirs):
        out = tmp_path / f"int8-{cache.stem}.onnx"
        ptq.quantize_model(prepared, out, calibration_reader(feeds), nodes, cfg, plan, calibration_cache=cache)
        graphs.append(onnx.load(str(out), load_external_data=False).graph)
    # the weights' side file is named after its model: compare the graphs without their locations
    for g in graphs:
        for init in g.initializer:
            del init.external_data[:]
    assert graphs[0].SerializeToString() == graphs[1].SerializeToString()


@pytest.mark.slow  # ORT's KL threshold search is pure Python: seconds per run on the masked demo
def test_demo_entropy_cache_equals_ort_calibrators(demo_calls, tmp_path):
    from edgekit.quantize.cpu import ptq

    prepared, feeds = demo_calls["masked"]
    cfg = QuantizeConfig(method="entropy")
    cache = tmp_path / "calibration.json"
    assert ptq.calibrate(prepared, calibration_reader(feeds), cfg, cache)
    ranged = taps.ranged_tensors(taps.graph_without_weights(prepared), cfg.op_types, cfg.settings.quantized_outputs)
    theirs = ort_calibrator_ranges(prepared, feeds, "entropy", cfg.op_types)
    assert_same_ranges(calib.load_tensors_data(cache), theirs, ranged)


# ---- what it keeps ------------------------------------------------------------------------------
WIDE = 4096  # the hidden tensor: 64 x 4096 floats = 1 MiB a call


def build_wide_model(path: Path) -> Path:
    """x float[64, 64] -> MatMul -> h float[64, 4096] (1 MiB) -> MatMul -> y float[64, 8]."""
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)
    w1 = numpy_helper.from_array(rng.standard_normal((64, WIDE)).astype(np.float32), "w1")
    w2 = numpy_helper.from_array(rng.standard_normal((WIDE, 8)).astype(np.float32) * 0.01, "w2")
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w1"], ["h"], name="up"), helper.make_node("MatMul", ["h", "w2"], ["y"])],
        "wide",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [64, 64])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [64, 8])],
        [w1, w2],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    model.ir_version = 9
    onnx.save(model, str(path))
    return path


def wide_feeds(n: int) -> list[dict[str, np.ndarray]]:
    rng = np.random.default_rng(1)
    return [{"x": (rng.standard_normal((64, 64)) * (1 + i)).astype(np.float32)} for i in range(n)]


@pytest.mark.parametrize("method", sorted(METHODS))
def test_what_calibration_keeps_does_not_grow_with_the_calls(tmp_path, method):
    """40 calls of a graph whose hidden tensor is 1 MiB a call: what the collection keeps is the
    size it is after 4 calls (two numbers, or a histogram of fixed bins, per tensor), and Python's
    allocations never reach 40 MiB (every call's tensors held, as ORT's histogram calibrators do
    between collect_data calls), though each call's range is wider than the last."""
    model = build_wide_model(tmp_path / "wide.onnx")
    feeds = wide_feeds(40)

    def kept(n: int) -> int:
        if method == "minmax":
            return calibrator.collect_min_max(model, calibration_reader(feeds[:n]), WEIGHTED_OPS).nbytes
        collector = calibrator.histogram_collector(method, 99.9)
        hists = calibrator.collect_histograms(model, calibration_reader(feeds[:n]), WEIGHTED_OPS, collector)
        return sum(np.asarray(v).nbytes for entry in hists.values() for v in entry)

    assert kept(40) == kept(4) > 0
    tracemalloc.start()
    try:
        calibrator.collect_ranges(model, calibration_reader(feeds), method, WEIGHTED_OPS, 99.9)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 12 * 2**20, f"{peak / 2**20:.1f} MiB held while calibrating on 40 calls of 1 MiB"


def test_the_tracemalloc_bound_sees_a_calibrator_that_holds_every_call(tmp_path):
    """The bound above is not blind: ORT's histogram calibrator, which holds every call's tensors
    until collect_data returns, passes it on the same 40 calls."""
    model = build_wide_model(tmp_path / "wide.onnx")
    feeds = wide_feeds(40)
    tracemalloc.start()
    try:
        ort_calibrator_ranges(model, feeds, "percentile", WEIGHTED_OPS)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak > 40 * 2**20


def test_min_max_taps_and_tensor_outputs_leave_the_weights_out_of_python(tmp_path):
    """The tapped graph is read without its weights: a model whose weights are in a side file
    is calibrated with none of them loaded into the graph proto."""
    model = build_wide_model(tmp_path / "wide.onnx")
    m = onnx.load(str(model))
    onnx.save(m, str(tmp_path / "ext.onnx"), save_as_external_data=True, location="ext.onnx.data", size_threshold=0)
    graph = taps.graph_without_weights(tmp_path / "ext.onnx")
    assert all(not i.HasField("raw_data") for i in graph.graph.initializer if i.name in ("w1", "w2"))
    feeds = wide_feeds(3)
    ours = calibrator.collect_ranges(tmp_path / "ext.onnx", calibration_reader(feeds), "minmax", WEIGHTED_OPS)
    assert_same_ranges(ours, ort_calibrator_ranges(model, feeds, "minmax", WEIGHTED_OPS))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ext.onnx", "ext.onnx.data", "wide.onnx"]  # no copy left


@pytest.mark.parametrize("method", sorted(METHODS))
def test_an_empty_calibration_set_is_one_clear_error(tiny_model, method):
    from edgekit.errors import EdgekitError
    from edgekit.quantize.calibrate import TrajectoryReader

    with pytest.raises(EdgekitError, match="calibration set is empty"):
        calibrator.collect_ranges(tiny_model, TrajectoryReader([]), method, WEIGHTED_OPS)


class CountingReader:
    """A calibration reader that counts the calls it hands out (over all passes)."""

    def __init__(self, feeds):
        self.inner = calibration_reader(feeds)
        self.handed = 0

    def rewind(self):
        self.inner.rewind()

    def get_next(self):
        feed = self.inner.get_next()
        self.handed += feed is not None
        return feed


@pytest.mark.parametrize("method", ["percentile", "entropy"])
def test_histograms_after_a_minmax_pass_skip_their_range_pass_and_equal_ort(tiny_model, method):
    """--method auto calibrates minmax first, then percentile where minmax misses the budget: the
    minmax pass keeps each tensor's range over the calls (signed, and |x| from its smallest), so
    the histograms take one pass over the calls instead of two (Sana-600M: 64 network calls of
    1.5 s each), and the ranges are still ORT's calibrator's, field for field."""
    op_types = (*WEIGHTED_OPS, "LayerNormalization", "Add")
    feeds = tiny_feeds(8)
    calls = calibrator.CallRanges()
    calibrator.collect_min_max(tiny_model, calibration_reader(feeds), op_types, calls=calls)
    assert calls.signed is not None and calls.magnitude is not None
    x = np.concatenate([f["x"].ravel() for f in feeds])
    assert calls.magnitude.lo["x"] == np.abs(x).min() and calls.magnitude.hi["x"] == np.abs(x).max()
    reader = CountingReader(feeds)
    ours = calibrator.collect_ranges(tiny_model, reader, method, op_types, QuantizeConfig().percentile, known=calls)
    assert reader.handed == len(feeds)
    assert_same_ranges(ours, ort_calibrator_ranges(tiny_model, feeds, method, op_types))
    # Without the known ranges: two passes, the same ranges.
    twice = CountingReader(feeds)
    again = calibrator.collect_ranges(tiny_model, twice, method, op_types, QuantizeConfig().percentile)
    assert twice.handed == 2 * len(feeds)
    assert_same_ranges(again, ours)


def test_ranges_that_do_not_cover_every_tensor_are_not_used(tiny_model):
    """Ranges kept over other ops' tensors (or none) leave the histograms their own range pass."""
    feeds = tiny_feeds(4)
    calls = calibrator.CallRanges()
    calibrator.collect_min_max(tiny_model, calibration_reader(feeds), ("MatMul",), calls=calls)
    reader = CountingReader(feeds)
    op_types = (*WEIGHTED_OPS, "LayerNormalization", "Add")
    ours = calibrator.collect_ranges(
        tiny_model, reader, "percentile", op_types, QuantizeConfig().percentile, known=calls
    )
    assert reader.handed == 2 * len(feeds)
    assert_same_ranges(ours, ort_calibrator_ranges(tiny_model, feeds, "percentile", op_types))


@pytest.mark.parametrize("chained", [True, False])
@pytest.mark.parametrize("method", ["percentile", "entropy"])
def test_histograms_fetched_in_groups_equal_ort_and_each_graph_outputs_only_its_group(
    tmp_path, method, chained, monkeypatch
):
    """ORT holds every output of a graph until the run returns, fetched or not: with a cap under
    one call's tensors, each group runs on a graph that outputs that group alone (Sana-600M: 1.5 GB
    of tensors a call, 6.5 GB in all from one graph) and what later graphs read from it (chained:
    ``segments``), or, where that carry would exceed the cap, from the graph inputs; the ranges are
    still ORT's calibrator's either way."""
    from edgekit.quantize import segments
    from edgekit.quantize.memory import tensor_bytes

    model = build_wide_model(tmp_path / "wide.onnx")
    feeds = wide_feeds(5)
    graph = taps.graph_without_weights(model)
    tensors = taps.calibrated_tensors(graph, WEIGHTED_OPS)
    inputs = {v.name for v in graph.graph.input}
    sizes = tensor_bytes(graph)
    cap = max(sizes[t] for t in tensors if t not in inputs)  # one tensor a group
    groups = [[t] for t in taps.in_graph_order(graph, [t for t in tensors if t not in inputs])]
    chain = segments.chain(graph, groups)
    assert chain is not None
    carried = {t for s in chain for t in s.gives}
    if not chained:  # the carry of 5 calls fits neither memory nor the disk
        monkeypatch.setattr(segments, "carry_bytes", lambda g, s: cap)
        monkeypatch.setattr(segments, "DISK_MARGIN", 1 << 62)
    opened: list[list[str]] = []
    real = segments.tapped_session

    def recording(path, g, *args, **kwargs):
        opened.append([o.name for o in g.graph.output])
        return real(path, g, *args, **kwargs)

    monkeypatch.setattr(segments, "tapped_session", recording)
    collector = calibrator.histogram_collector(method, QuantizeConfig().percentile)
    calibrator.collect_histograms(model, calibration_reader(feeds), WEIGHTED_OPS, collector, fetch_bytes=cap)
    own = {o.name for o in graph.graph.output}
    fetched = [[o for o in outs if o not in own] for outs in opened]
    assert len(fetched) >= 4 and all(sum(sizes[t] for t in group) <= cap for group in fetched)
    assert opened == [groups[i % len(groups)] for i in range(len(opened))]  # the group alone (a given is one)
    assert carried <= {t for g in groups for t in g}
    ours = calib.TensorsData(
        getattr(calib.CalibrationMethod, METHODS[method]),
        (lambda c: c.compute_collection_result())(collector),
    )
    assert_same_ranges(ours, ort_calibrator_ranges(model, feeds, method, WEIGHTED_OPS))


def test_a_grouped_histogram_pass_is_priced_by_the_layers_each_group_runs(tmp_path, tiny_model, monkeypatch):
    """One group: one forward a call. One tensor a group, chained: each graph runs what no earlier
    one ran, at most one forward a call. Unchained (the carry over the cap): each group's graph runs
    up to its tensor, so the pass costs more than one forward and less than one per group."""
    from edgekit.quantize import segments
    from edgekit.quantize.memory import tensor_bytes

    assert calibrator.histogram_forwards(tiny_model, WEIGHTED_OPS) == 1.0
    graph = taps.graph_without_weights(tiny_model)
    inputs = {v.name for v in graph.graph.input}
    tensors = [t for t in taps.calibrated_tensors(graph, WEIGHTED_OPS) if t not in inputs]
    cap = max(tensor_bytes(graph)[t] for t in tensors)
    groups = len(taps.fetch_groups(tensors, tensor_bytes(graph), cap))
    assert groups > 2
    monkeypatch.setattr(segments, "carry_bytes", lambda g, s: cap)  # what a call passes on fits the cap
    assert 0 < calibrator.histogram_forwards(tiny_model, WEIGHTED_OPS, fetch_bytes=cap) <= 1.0
    monkeypatch.setattr(segments, "carry_bytes", lambda g, s: cap + 1)
    monkeypatch.setattr(segments, "DISK_MARGIN", 1 << 62)  # and no disk to spill it to
    forwards = calibrator.histogram_forwards(tiny_model, WEIGHTED_OPS, fetch_bytes=cap)
    assert 1.0 < forwards < groups


@pytest.mark.parametrize("percentile", [99.999, 99.0, 90.0])
def test_percentile_ranges_cut_from_each_tensors_largest_values_equal_ort(tiny_model, percentile):
    """A minmax pass that keeps each tensor's largest |x| (``ranges.Tails``: (1 - p/100) of its
    values over the calls, with slack) gives the percentile ranges with no pass of their own: the
    cut lies in the bins those values fill, so it is ORT's calibrator's edge, tensor for tensor
    (99.999 keeps 2 values of 128 a call here, 99 keeps 14, 90 all of them)."""
    op_types = (*WEIGHTED_OPS, "LayerNormalization", "Add")
    feeds = tiny_feeds(8)
    calls = calibrator.CallRanges()
    calibrator.collect_min_max(tiny_model, calibration_reader(feeds), op_types, calls=calls, percentile=percentile)
    assert calls.tails is not None and calibrator.tails_suffice(calls, percentile)
    kept = {t.size for t in calls.tails.top.values()}
    assert max(kept) == {99.999: 2, 99.0: 14, 90.0: 128}[percentile]
    reader = CountingReader(feeds)
    ours = calibrator.collect_ranges(tiny_model, reader, "percentile", op_types, percentile, known=calls)
    assert reader.handed == 0  # no pass over the calls
    theirs = ort_calibrator_ranges(tiny_model, feeds, "percentile", op_types, percentile)
    assert sorted(ours.keys()) == sorted(theirs.keys())
    for name in theirs.keys():
        for attr in ("lowest", "highest"):  # ORT's first two bin counts (its debug plot's) are not known
            a, b = np.asarray(getattr(ours[name], attr)), np.asarray(getattr(theirs[name], attr))
            assert a.dtype == b.dtype and a.shape == b.shape, (name, attr)
            np.testing.assert_array_equal(a, b, err_msg=f"{name}.{attr}")


@pytest.mark.parametrize("kind", ["masked", "flow", "ar"])
def test_demo_percentile_ranges_cut_from_the_largest_values_equal_ort(demo_calls, kind):
    """The same on the demo models' real calls (thousands of values a tensor a call)."""
    prepared, feeds = demo_calls[kind]
    cfg = QuantizeConfig(method="percentile")
    calls = calibrator.CallRanges()
    calibrator.collect_min_max(prepared, calibration_reader(feeds), cfg.op_types, calls=calls, percentile=99.999)
    reader = CountingReader(feeds)
    ours = calibrator.collect_ranges(prepared, reader, "percentile", cfg.op_types, 99.999, known=calls)
    assert reader.handed == 0
    theirs = ort_calibrator_ranges(prepared, feeds, "percentile", cfg.op_types)
    for name in ours.keys():
        assert ours[name].lowest == theirs[name].lowest and ours[name].highest == theirs[name].highest, name


def test_largest_values_that_cannot_decide_the_cut_leave_it_to_the_histograms(tiny_model):
    """Kept for fewer calls than ran (the cut may lie below them), or with a NaN among them: the
    percentile ranges take their histogram pass (one: the ranges are known), and are still ORT's."""
    op_types = (*WEIGHTED_OPS, "LayerNormalization", "Add")
    feeds = tiny_feeds(8)
    calls = calibrator.CallRanges()
    with ranges_module.min_max_session(tiny_model, op_types, ("*",), 0, calls, (1, 99.0)) as (session, tap):
        for feed in feeds:
            tap.add(session.run(tap.taps, feed))
    tap.finish()
    assert calls.tails is not None and not calibrator.tails_suffice(calls, 99.0)
    reader = CountingReader(feeds)
    ours = calibrator.collect_ranges(tiny_model, reader, "percentile", op_types, 99.0, known=calls)
    assert reader.handed == len(feeds)
    assert_same_ranges(ours, ort_calibrator_ranges(tiny_model, feeds, "percentile", op_types, 99.0))
    enough = calibrator.CallRanges()
    calibrator.collect_min_max(tiny_model, calibration_reader(feeds), op_types, calls=enough, percentile=99.0)
    assert calibrator.tails_suffice(enough, 99.0)
    enough.tails.top["h"] = np.append(enough.tails.top["h"], np.float32("nan"))
    assert not calibrator.tails_suffice(enough, 99.0)
