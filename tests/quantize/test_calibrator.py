"""The calibrator that gathers activation ranges call by call (``quantize/calibrator.py``): the cache
it writes equals ONNX Runtime's calibrator's from the same calls, and what it keeps does not grow
with the number of calls."""

from __future__ import annotations

import tempfile
import tracemalloc
from pathlib import Path

import numpy as np
import pytest

from edgekit.quantize import calibrator
from edgekit.quantize.calibrate import calibration_reader
from edgekit.quantize.config import METHODS, WEIGHTED_OPS, QuantizeConfig
from edgekit.quantize.quiet import quiet_ort_logging
from tests.quantize.conftest import tiny_feeds

pytest.importorskip("onnxruntime")
onnx = pytest.importorskip("onnx")
calib = pytest.importorskip("onnxruntime.quantization.calibrate")


def ort_calibrator_ranges(model: Path, feeds, method: str, op_types) -> object:
    """What ORT's own calibrator computes from ``feeds`` (every call at once), set up as edgekit
    set it up before it gathered the ranges itself."""
    options: dict = {}
    if method == "entropy":
        options |= calibrator.ENTROPY_BINS
    if method == "percentile":
        options["percentile"] = QuantizeConfig().percentile
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


def assert_same_ranges(ours, theirs) -> None:
    """Same method, same tensors, and every field equal: values, dtypes and shapes."""
    assert ours.calibration_method == theirs.calibration_method
    assert sorted(ours.keys()) == sorted(theirs.keys())
    for name in theirs.keys():
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
    back from the file as ``quantize_static`` reads it."""
    from edgekit.quantize.cpu import ptq

    prepared, feeds = demo_calls[kind]
    cfg = QuantizeConfig(method=method)
    cache = tmp_path / "calibration.json"
    assert ptq.calibrate(prepared, calibration_reader(feeds), cfg, cache)
    assert_same_ranges(calib.load_tensors_data(cache), ort_calibrator_ranges(prepared, feeds, method, cfg.op_types))


@pytest.mark.slow  # ORT's KL threshold search is pure Python: seconds per run on the masked demo
def test_demo_entropy_cache_equals_ort_calibrators(demo_calls, tmp_path):
    from edgekit.quantize.cpu import ptq

    prepared, feeds = demo_calls["masked"]
    cfg = QuantizeConfig(method="entropy")
    cache = tmp_path / "calibration.json"
    assert ptq.calibrate(prepared, calibration_reader(feeds), cfg, cache)
    assert_same_ranges(calib.load_tensors_data(cache), ort_calibrator_ranges(prepared, feeds, "entropy", cfg.op_types))


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
    graph = calibrator.graph_without_weights(tmp_path / "ext.onnx")
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


def test_each_tap_runs_right_after_the_node_that_makes_its_tensor(tiny_model):
    """Taps at the end of the graph keep every tapped tensor of a call alive until the call ends;
    placed after their producer (and run in graph order: ``tapped_session``) each is freed early."""
    graph = calibrator.graph_without_weights(tiny_model)
    tensors = calibrator.calibrated_tensors(graph, (*WEIGHTED_OPS, "LayerNormalization"))
    calibrator.add_min_max_taps(graph, tensors)
    nodes = list(graph.graph.node)
    made_at = {o: i for i, n in enumerate(nodes) for o in n.output if not n.name.startswith("edgekit_range")}
    for i, node in enumerate(nodes):
        if node.name.startswith("edgekit_range"):
            tensor = node.input[0]
            between = nodes[made_at[tensor] + 1 : i] if tensor in made_at else nodes[:i]
            assert all(n.name.startswith("edgekit_range") for n in between), (tensor, [n.name for n in between])
    assert sum(n.name.startswith("edgekit_range") for n in nodes) == 2 * len(tensors)
    onnx.checker.check_model(graph)  # still topologically sorted
