"""`edgekit build` for ONNX Runtime targets ships the graph edgekit's runtime runs (issue #44,
point 1): the contrib fusions and the optimizers it switches off are in the engine file, the
session options no file can carry are in its entry and its metadata, and a plain
``onnxruntime.InferenceSession`` opened with them computes exactly what `edgekit run --target`
computes (with ORT's defaults: the same up to float rounding)."""

from __future__ import annotations

import collections
import json
import shutil

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from build_helpers import X86  # tests/builder/build_helpers.py
from onnx import TensorProto, helper, numpy_helper

from edgekit.builder import build_bundle, select_engine
from edgekit.bundle import Bundle
from edgekit.runtimes.ort import GRAPH_OPTIMIZATION_LEVELS, OrtOptions, OrtRuntime
from edgekit.runtimes.ort_fusions import CPU_DISABLED_OPTIMIZERS, fuse_fast_gelu
from tests.external_data import assert_weights_outside, scaled_limit
from tests.runtimes.test_ort_fusions import gelu_chain

ATOL = 1e-4  # ORT's defaults re-fuse a LayerNorm (SkipLayerNormalization): float sums in another order
CPU = ["CPUExecutionProvider"]


def _ops(path) -> collections.Counter:
    return collections.Counter(n.op_type for n in onnx.load(str(path), load_external_data=False).graph.node)


def _plain(path, recorded=None) -> ort.InferenceSession:
    """What an app opens: ORT's defaults, or the options the engine entry records."""
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    if recorded is not None:
        so.graph_optimization_level = getattr(
            ort.GraphOptimizationLevel, GRAPH_OPTIMIZATION_LEVELS[recorded["graph_optimization_level"]]
        )
        for key, value in recorded["config_entries"].items():
            so.add_session_config_entry(key, value)
    return ort.InferenceSession(str(path), so, providers=CPU)


def _feeds(bundle: Bundle, seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {n: rng.integers(0, int(s.high or 8), size=s.shape).astype(s.dtype) for n, s in bundle.inputs.items()}


def _edgekit_target(root, target, precision, feeds) -> tuple[np.ndarray, list[str]]:
    """`edgekit run --target`'s runtime on the built engine: (logits, its warnings)."""
    with select_engine(root, target, precision, host=X86).open(threads=1) as rt:
        return rt.run(feeds)["logits"].copy(), list(rt.warnings)


def _gelu_head(qdq: bool, gemm: bool = False) -> onnx.ModelProto:
    """tokens int64[2,8] -> Gather(emb[16,4]) -> MatMul(W[4,16]) -> tanh GELU -> logits [2,8,16];
    ``qdq``: the MatMul's input and weight through QuantizeLinear/DequantizeLinear (int8 QDQ);
    ``gemm``: rows flattened to [16,4] and a Gemm (what the exporter writes for a Linear)."""
    rng = np.random.default_rng(0)
    w = rng.standard_normal((4, 16)).astype(np.float32)
    inits = [numpy_helper.from_array(rng.standard_normal((16, 4)).astype(np.float32), "emb")]
    nodes = [helper.make_node("Gather", ["emb", "tokens"], ["h"], name="embed")]
    x, weight = "h", "w"
    if qdq:
        wscale = np.float32(np.abs(w).max() / 127)
        inits += [
            numpy_helper.from_array(np.clip(np.round(w / wscale), -127, 127).astype(np.int8), "wq"),
            numpy_helper.from_array(wscale, "ws"),
            numpy_helper.from_array(np.int8(0), "wz"),
            numpy_helper.from_array(np.float32(0.03), "xs"),
            numpy_helper.from_array(np.uint8(128), "xz"),
        ]
        nodes += [
            helper.make_node("QuantizeLinear", ["h", "xs", "xz"], ["hq"], name="q"),
            helper.make_node("DequantizeLinear", ["hq", "xs", "xz"], ["hdq"], name="dq"),
            helper.make_node("DequantizeLinear", ["wq", "ws", "wz"], ["w"], name="wdq"),
        ]
        x = "hdq"
    else:
        inits.append(numpy_helper.from_array(w, "w"))
    if gemm:
        inits += [
            numpy_helper.from_array(np.array([16, 4], np.int64), "rows"),
            numpy_helper.from_array(np.array([2, 8, 16], np.int64), "out"),
        ]
        nodes += [
            helper.make_node("Reshape", [x, "rows"], ["x2"], name="flat"),
            helper.make_node("Gemm", ["x2", weight], ["m2"], name="head"),
            helper.make_node("Reshape", ["m2", "out"], ["m"], name="unflat"),
        ]
    else:
        nodes.append(helper.make_node("MatMul", [x, weight], ["m"], name="head"))
    chain, consts = gelu_chain("g", "m", "logits")
    graph = helper.make_graph(
        nodes + chain,
        "gelu-head",
        [helper.make_tensor_value_info("tokens", TensorProto.INT64, [2, 8])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, [2, 8, 16])],
        initializer=inits + consts,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    onnx.checker.check_model(model)
    return model


def test_the_cpu_engine_carries_the_graph_changes_edgekit_run_makes(masked):
    doc = build_bundle(masked, "cpu", "fp32", host=X86)
    entry, bundle = doc["engine"], Bundle.load(masked)
    source, built = _ops(bundle.path_of("fp32")), _ops(masked / entry["path"])
    assert source["Tanh"] == 4 and source["FastGelu"] == 0
    assert built["FastGelu"] == 4 and built["Tanh"] == built["Pow"] == 0  # the four tanh GELUs, one op each
    assert entry["graph_changes"] == {"fusions": {"FastGelu": 4}, "disabled_optimizers": list(CPU_DISABLED_OPTIMIZERS)}
    # Saved at "all": nothing is left to optimize, so it loads at "basic" and no optimizer edgekit
    # switched off runs at load (no config entry needed).
    assert entry["session_options"] == {"graph_optimization_level": "basic", "config_entries": {}}
    meta = _plain(masked / entry["path"]).get_modelmeta().custom_metadata_map
    assert json.loads(meta["edgekit.session_options"]) == entry["session_options"]

    # SkipLayerNormFusion stayed off: ORT's own "all" on the same graph makes a SkipLayerNormalization.
    assert built["SkipLayerNormalization"] == 0 and built["LayerNormalization"] == source["LayerNormalization"]
    model = onnx.load(str(bundle.path_of("fp32")))
    fuse_fast_gelu(model)
    so = ort.SessionOptions()
    so.optimized_model_filepath = str(masked / "ort-all.onnx")
    ort.InferenceSession(model.SerializeToString(), so, providers=CPU)
    assert _ops(masked / "ort-all.onnx")["SkipLayerNormalization"] >= 1


def test_a_plain_session_computes_what_edgekit_run_target_computes(masked):
    entry = build_bundle(masked, "cpu", "fp32", host=X86)["engine"]
    bundle = Bundle.load(masked)
    feeds = _feeds(bundle)
    got, warnings = _edgekit_target(masked, "cpu", "fp32", feeds)
    assert not [w for w in warnings if "older edgekit" in w]
    np.testing.assert_array_equal(_plain(masked / entry["path"], entry["session_options"]).run(None, feeds)[0], got)
    np.testing.assert_allclose(_plain(masked / entry["path"]).run(None, feeds)[0], got, atol=ATOL, rtol=0)
    # ... and what `edgekit run` computes on the bundle (fusions in memory).
    with OrtRuntime(bundle.path_of("fp32"), OrtOptions(intra_op_threads=1)) as rt:
        assert rt.fusions == {"FastGelu": 4}
        np.testing.assert_allclose(rt.run(feeds)["logits"], got, atol=ATOL, rtol=0)


def test_the_int8_engine_is_int8_kernels_with_its_gelu_fused(tiny_bundle):
    bundle = tiny_bundle(fp32=_gelu_head(qdq=False), int8=_gelu_head(qdq=True), profile="cpu")
    entry = build_bundle(bundle.root, "cpu", "int8", host=X86)["engine"]
    built = _ops(bundle.root / entry["path"])
    assert built["FastGelu"] == 1 and built["Tanh"] == 0
    assert built["DequantizeLinear"] == 0 and built["MatMul"] == 0  # the QDQ MatMul is one int8 kernel
    assert entry["graph_changes"]["fusions"] == {"FastGelu": 1}
    feeds = _feeds(bundle)
    got, _ = _edgekit_target(bundle.root, "cpu", "int8", feeds)
    np.testing.assert_array_equal(
        _plain(bundle.root / entry["path"], entry["session_options"]).run(None, feeds)[0], got
    )


def _required_ops(root, entry) -> set[str]:
    text = (root / entry["required_operators"]["path"]).read_text()
    return {op for line in text.splitlines() if not line.startswith("#") for op in line.split(";")[2].split(",")}


def test_the_android_ort_file_stays_standard_onnx_and_records_the_replay_entry(tiny_bundle):
    """QNN and NNAPI run no contrib op: the .ort keeps the tanh chain. Its "runtime" style saves
    the int8 kernels as optimizations ORT replays only when the session says so: the entry says."""
    bundle = tiny_bundle(fp32=_gelu_head(qdq=False, gemm=True), int8=_gelu_head(qdq=True, gemm=True), profile="cpu")
    entry = build_bundle(bundle.root, "android-arm64", "int8", host=X86)["engine"]
    assert entry["graph_changes"] == {"fusions": {}, "disabled_optimizers": []}
    assert entry["session_options"] == {
        "graph_optimization_level": "all",
        "config_entries": {"session.enable_saved_runtime_optimizations": "1"},
    }
    ops = _required_ops(bundle.root, entry)
    assert "Tanh" in ops and "FastGelu" not in ops
    assert {"DequantizeLinear", "QGemm"} <= ops  # without and with the replay
    feeds = _feeds(bundle)
    got, _ = _edgekit_target(bundle.root, "android-arm64", "int8", feeds)
    np.testing.assert_array_equal(
        _plain(bundle.root / entry["path"], entry["session_options"]).run(None, feeds)[0], got
    )


def test_a_cpu_only_ort_target_gets_the_fusions_in_its_ort_file(masked, tmp_path):
    toml = tmp_path / "cpu-mobile.toml"
    toml.write_text(
        'runtimes = ["ort"]\nprecisions = ["fp32"]\narch = "host"\n'
        '[ort]\nproviders = ["CPUExecutionProvider"]\nformat = "ort"\noptimization_style = "fixed"\n'
    )
    entry = build_bundle(masked, toml, "fp32", host=X86)["engine"]
    assert entry["path"].endswith(".ort") and entry["graph_changes"]["fusions"] == {"FastGelu": 4}
    ops = _required_ops(masked, entry)
    assert "FastGelu" in ops and "Tanh" not in ops and "SkipLayerNormalization" not in ops
    assert entry["session_options"] == {"graph_optimization_level": "all", "config_entries": {}}  # "fixed": all baked
    feeds = _feeds(Bundle.load(masked))
    got, _ = _edgekit_target(masked, toml, "fp32", feeds)
    np.testing.assert_array_equal(_plain(masked / entry["path"], entry["session_options"]).run(None, feeds)[0], got)


def test_an_engine_with_its_weights_in_a_side_file_gets_the_changes_too(external_bundles, tmp_path):
    root = shutil.copytree(external_bundles["external"], tmp_path / "ext")
    with scaled_limit():
        entry = build_bundle(root, "cpu", "fp32", host=X86)["engine"]
        assert assert_weights_outside(root / entry["path"]) == {entry["external_data"]["path"].rsplit("/", 1)[-1]}
        assert _ops(root / entry["path"])["FastGelu"] == 4
        feeds = _feeds(Bundle.load(root))
        got, _ = _edgekit_target(root, "cpu", "fp32", feeds)
    np.testing.assert_array_equal(_plain(root / entry["path"], entry["session_options"]).run(None, feeds)[0], got)
    assert not [p.name for p in root.iterdir() if p.name.startswith(".staging")]


def test_an_engine_from_an_older_edgekit_is_fused_in_memory_and_says_rebuild(masked):
    build_bundle(masked, "cpu", "fp32", host=X86)
    manifest = json.loads((masked / "edgekit.json").read_text())
    for key in ("session_options", "graph_changes"):
        del manifest["engines"]["cpu/fp32"][key]
    (masked / "edgekit.json").write_text(json.dumps(manifest))
    choice = select_engine(masked, "cpu", "fp32", host=X86)
    assert choice.session_options is None
    with choice.open(threads=1) as rt:
        assert rt.options.contrib_fusions and rt.options.graph_optimization == "all"
        assert any("older edgekit" in w and "--rebuild" in w for w in rt.warnings)


def test_an_ort_file_whose_saved_optimizations_do_not_replay_says_so_and_loads(tiny_bundle):
    """ONNX Runtime's converter saves records for a QDQ MatMul on a 3-D input that its own replay
    refuses: the entry drops the replay (the file then loads as recorded) and says why."""
    bundle = tiny_bundle(fp32=_gelu_head(qdq=False), int8=_gelu_head(qdq=True), profile="cpu")
    entry = build_bundle(bundle.root, "android-arm64", "int8", host=X86)["engine"]
    options = entry["session_options"]
    if "note" not in options:
        pytest.skip(f"this onnxruntime {ort.__version__} replays a QDQ MatMul's saved optimizations")
    assert options["config_entries"] == {} and "cannot replay" in options["note"] and "fixed" in options["note"]
    meta = _plain(bundle.root / entry["path"]).get_modelmeta().custom_metadata_map
    assert json.loads(meta["edgekit.session_options"]) == options
    feeds = _feeds(bundle)
    got, _ = _edgekit_target(bundle.root, "android-arm64", "int8", feeds)
    np.testing.assert_array_equal(_plain(bundle.root / entry["path"], options).run(None, feeds)[0], got)
