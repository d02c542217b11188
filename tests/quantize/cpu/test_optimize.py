"""Over 2 GiB the cpu profile prepares the graph with ORT's optimization from files
(``quantize/cpu/optimize.py``) instead of ``quant_pre_process`` (two copies of the model in
memory). The suite cannot hold 2 GiB: a tiny model with its weights in a side file, and the
limit test stood in."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from tests.quantize.conftest import build_tiny_model, tiny_feeds

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")


def _external(tmp_path: Path) -> Path:
    model = onnx.load(str(build_tiny_model(tmp_path / "src.onnx", seed=3)))
    path = tmp_path / "fp32.onnx"
    onnx.save_model(
        model,
        str(path),
        save_as_external_data=True,
        all_tensors_to_one_file=True,
        location="fp32.onnx.data",
        size_threshold=256,
    )
    return path


def test_optimize_from_files_writes_what_quant_pre_process_would(tmp_path):
    from edgekit.quantize.cpu.optimize import PRE_PROCESS_KEY, optimize_from_files

    fp32 = _external(tmp_path)
    out = optimize_from_files(fp32, tmp_path / "prepared.onnx")
    graph = onnx.load(str(out), load_external_data=False)
    assert {p.key: p.value for p in graph.metadata_props}[PRE_PROCESS_KEY] == "onnxruntime.quant"
    assert (tmp_path / "prepared.onnx.data").is_file()  # the weights stay in a side file
    assert any(t.external_data for t in graph.graph.initializer)
    assert graph.graph.value_info  # shapes inferred
    feed = tiny_feeds(1)[0]
    ref = ort.InferenceSession(str(fp32), providers=["CPUExecutionProvider"]).run(None, feed)[0]
    got = ort.InferenceSession(str(out), providers=["CPUExecutionProvider"]).run(None, feed)[0]
    np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-5)


def test_prepare_model_takes_the_file_path_over_the_limit_and_quant_pre_process_under_it(tmp_path, monkeypatch):
    from edgekit.quantize.cpu import ptq

    fp32 = _external(tmp_path)
    called: list[str] = []
    monkeypatch.setattr(
        "onnxruntime.quantization.shape_inference.quant_pre_process",
        lambda *a, **k: called.append("quant_pre_process") or (_ for _ in ()).throw(RuntimeError("stop")),
    )
    monkeypatch.setattr(ptq, "over_protobuf_limit", lambda path: True)
    prepared, skipped, how = ptq.prepare_model(fp32, tmp_path / "prepared.onnx")
    assert skipped is None and how == "ort-optimization" and called == [] and prepared == tmp_path / "prepared.onnx"
    monkeypatch.setattr(ptq, "over_protobuf_limit", lambda path: False)
    # Under the limit, weights in a side file: quant_pre_process's steps from files, never the
    # whole model in Python (quant_pre_process itself is not called).
    (tmp_path / "b").mkdir()
    _, skipped, how = ptq.prepare_model(fp32, tmp_path / "b" / "prepared.onnx")
    assert called == [] and skipped is None and how == "quant_pre_process"
    # Its symbolic shape inference fails (ReduceL2, F5-TTS's DiT): ORT's optimization alone.
    monkeypatch.setattr(ptq, "symbolic_shapes", lambda path: (_ for _ in ()).throw(TypeError("no len()")))
    (tmp_path / "c").mkdir()
    _, skipped, how = ptq.prepare_model(fp32, tmp_path / "c" / "prepared.onnx")
    assert skipped == "quant_pre_process failed (TypeError: no len())" and how == "ort-optimization"
    # ... written as before this path existed (F5-TTS's DiT: the INT8 graph's bytes unchanged).
    from edgekit.quantize.cpu.optimize import optimize_from_files

    (tmp_path / "e").mkdir()
    optimize_from_files(fp32, tmp_path / "e" / "prepared.onnx")
    assert (tmp_path / "c" / "prepared.onnx").read_bytes() == (tmp_path / "e" / "prepared.onnx").read_bytes()
    # Weights inside the .onnx: quant_pre_process itself.
    (tmp_path / "d").mkdir()
    inline = build_tiny_model(tmp_path / "d" / "fp32.onnx", seed=3)
    _, skipped, how = ptq.prepare_model(inline, tmp_path / "d" / "prepared.onnx")
    assert called == ["quant_pre_process"] and skipped.startswith("quant_pre_process failed")


def test_quant_pre_process_from_files_writes_what_quant_pre_process_writes(tmp_path):
    """The symbolic shape inference on the graph alone and ORT's optimization from it, the weights
    read from their file: the graph, its shapes and every weight are quant_pre_process's."""
    from onnxruntime.quantization.shape_inference import quant_pre_process

    from edgekit.quantize.cpu import ptq

    fp32 = _external(tmp_path)
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    quant_pre_process(
        str(fp32),
        str(tmp_path / "a" / "prepared.onnx"),
        save_as_external_data=True,
        all_tensors_to_one_file=True,
        external_data_location="prepared.onnx.data",
    )
    path, skipped, how = ptq.prepare_model(fp32, tmp_path / "b" / "prepared.onnx")
    assert (skipped, how) == (None, "quant_pre_process")
    theirs, ours = onnx.load(str(tmp_path / "a" / "prepared.onnx")), onnx.load(str(path))
    assert any(t.external_data for t in onnx.load(str(path), load_external_data=False).graph.initializer)
    assert ours.graph.node == theirs.graph.node and ours.graph.value_info == theirs.graph.value_info
    assert ours.graph.input == theirs.graph.input and ours.graph.output == theirs.graph.output
    assert ours.metadata_props == theirs.metadata_props and ours.opset_import == theirs.opset_import
    assert [t.name for t in ours.graph.initializer] == [t.name for t in theirs.graph.initializer]
    for a, b in zip(ours.graph.initializer, theirs.graph.initializer):
        np.testing.assert_array_equal(onnx.numpy_helper.to_array(a), onnx.numpy_helper.to_array(b))


def test_over_protobuf_limit_counts_the_side_files(tmp_path, monkeypatch):
    from edgekit.quantize.cpu import optimize

    fp32 = _external(tmp_path)
    graph, data = fp32.stat().st_size, (tmp_path / "fp32.onnx.data").stat().st_size
    monkeypatch.setattr(optimize, "PROTOBUF_LIMIT", graph + data)
    assert optimize.over_protobuf_limit(fp32)
    monkeypatch.setattr(optimize, "PROTOBUF_LIMIT", graph + data + 1)
    assert not optimize.over_protobuf_limit(fp32)


def weight_dqs_left_by_ort(model: Path, out: Path) -> int:
    """DequantizeLinear nodes of constant weights left in the graph ORT's CPU session runs for
    ``model`` (each dequantizes its weight on every call: no INT8 kernel took it)."""
    so = ort.SessionOptions()
    so.optimized_model_filepath = str(out)
    ort.InferenceSession(str(model), so, providers=["CPUExecutionProvider"])
    graph = onnx.load(str(out), load_external_data=False).graph
    inits = {i.name for i in graph.initializer}
    return sum(1 for n in graph.node if n.op_type == "DequantizeLinear" and n.input[0] in inits)


def test_a_failed_quant_pre_process_still_optimizes_so_int8_kernels_take_every_weight(tmp_path, monkeypatch):
    """F5-TTS's DiT: quant_pre_process failed (its symbolic shape inference), the graph was
    quantized unoptimized, and ORT fused each 3-D MatMul+Add into a Gemm *behind* the weight's
    DequantizeLinear at load: the weights were dequantized on every call and INT8 ran 2.2x slower
    than FP32. ORT's optimization alone (``optimize_from_files``) before quantizing avoids it."""
    from edgekit.quantize.cpu import ptq

    fp32 = build_tiny_model(tmp_path / "fp32.onnx", seed=3)
    monkeypatch.setattr(
        "onnxruntime.quantization.shape_inference.quant_pre_process",
        lambda *a, **k: (_ for _ in ()).throw(TypeError("object of type 'NoneType' has no len()")),
    )
    ptq.quantize_unbudgeted(fp32, tmp_path / "int8.onnx", tiny_feeds(4))
    assert weight_dqs_left_by_ort(tmp_path / "int8.onnx", tmp_path / "opt.onnx") == 0

    def refuse(*a, **k):
        raise RuntimeError("no")

    monkeypatch.setattr(ptq, "optimize_from_files", refuse)  # the graph as it was before this fix
    ptq.quantize_unbudgeted(fp32, tmp_path / "int8-plain.onnx", tiny_feeds(4))
    assert weight_dqs_left_by_ort(tmp_path / "int8-plain.onnx", tmp_path / "opt-plain.onnx") > 0


def test_name_every_node_names_the_unnamed_and_the_repeats_and_keeps_the_rest(tmp_path):
    import onnx

    from edgekit.quantize.cpu.optimize import name_every_node

    helper = onnx.helper
    nodes = [
        helper.make_node("Relu", ["x"], ["a"], name=""),
        helper.make_node("Relu", ["a"], ["b"], name="r"),
        helper.make_node("Relu", ["b"], ["c"], name="r"),
        helper.make_node("Relu", ["c"], ["y"], name="Relu_a"),  # the name the first would get
    ]
    info = [helper.make_tensor_value_info(n, onnx.TensorProto.FLOAT, [2]) for n in ("x", "y")]
    path = tmp_path / "g.onnx"
    onnx.save(helper.make_model(helper.make_graph(nodes, "g", info[:1], info[1:])), str(path))
    assert name_every_node(path) == 2
    assert [n.name for n in onnx.load(str(path)).graph.node] == ["Relu_a_1", "r", "r_1", "Relu_a"]
    before = path.read_bytes()
    assert name_every_node(path) == 0 and path.read_bytes() == before  # nothing to name: not rewritten
