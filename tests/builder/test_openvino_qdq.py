"""The QDQ graph rewritten for OpenVINO (builder/openvino_qdq.py): which activation Q/DQ pairs
move ahead of their Reshape and which stay, on a graph built here and on the masked demo's INT8
model, and that the rewritten graph computes the source's outputs exactly."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from edgekit.builder.openvino_qdq import hoist_activation_qdq, write_hoisted

ort = pytest.importorskip("onnxruntime")

B, L, D = 2, 4, 8


def _qdq(prefix: str, x: str, out: str) -> list[onnx.NodeProto]:
    return [
        helper.make_node("QuantizeLinear", [x, "act_s", "act_zp"], [f"{prefix}_q"], name=f"{prefix}/Q"),
        helper.make_node("DequantizeLinear", [f"{prefix}_q", "act_s", "act_zp"], [out], name=f"{prefix}/DQ"),
    ]


def _gemm(prefix: str, x: str, weight: str, out: str) -> list[onnx.NodeProto]:
    """Reshape(2-D) -> [Q/DQ] -> Gemm -> Reshape(3-D), as onnxruntime's QDQ pre-processing writes a MatMul."""
    flat = f"{prefix}_2d"
    nodes = [helper.make_node("Reshape", [x, "shape2"], [flat], name=f"{prefix}/in")]
    if weight.endswith("_dq"):  # an INT8 Gemm: its activation through a Q/DQ pair
        nodes += _qdq(prefix, flat, f"{flat}_dq")
        flat = f"{flat}_dq"
    nodes += [
        helper.make_node("Gemm", [flat, weight], [f"{prefix}_y"], name=f"{prefix}/Gemm"),
        helper.make_node("Reshape", [f"{prefix}_y", "shape3"], [out], name=f"{prefix}/out"),
    ]
    return nodes


def qdq_graph() -> onnx.ModelProto:
    """x[B,L,D] -> LayerNorm -> int8 Gemm `a` -> Tanh -> int8 Gemm `b` ; float Gemm `c` -> Tanh ->
    int8 Gemm `d` ; Transpose -> Reshape -> Q/DQ -> int8 Gemm `e`: `a` and `b`'s pairs move, `d`'s
    (behind a float GEMM) and `e`'s (behind a Transpose) stay."""
    rng = np.random.default_rng(0)
    w = rng.standard_normal((D, D)).astype(np.float32)
    scale = (np.abs(w).max(0) / 127).astype(np.float32)
    inits = [
        numpy_helper.from_array(np.ones(D, np.float32), "ln_g"),
        numpy_helper.from_array(np.zeros(D, np.float32), "ln_b"),
        numpy_helper.from_array(np.array([B * L, D], np.int64), "shape2"),
        numpy_helper.from_array(np.array([B, L, D], np.int64), "shape3"),
        numpy_helper.from_array(np.array([B, D, L], np.int64), "shape_t"),
        numpy_helper.from_array(np.array(0.02, np.float32), "act_s"),
        numpy_helper.from_array(np.array(128, np.uint8), "act_zp"),
        numpy_helper.from_array(np.round(w / scale).astype(np.int8), "w_q"),
        numpy_helper.from_array(scale, "w_s"),
        numpy_helper.from_array(w, "w_float"),
    ]
    nodes = [
        helper.make_node("DequantizeLinear", ["w_q", "w_s"], ["w_dq"], axis=1, name="w/DQ"),
        helper.make_node("LayerNormalization", ["x", "ln_g", "ln_b"], ["ln"], axis=-1, name="ln"),
        *_gemm("a", "ln", "w_dq", "a_out"),
        helper.make_node("Tanh", ["a_out"], ["a_act"], name="a/act"),
        *_gemm("b", "a_act", "w_dq", "b_out"),
        *_gemm("c", "b_out", "w_float", "c_out"),
        helper.make_node("Tanh", ["c_out"], ["c_act"], name="c/act"),
        *_gemm("d", "c_act", "w_dq", "d_out"),
        helper.make_node("Transpose", ["d_out"], ["t"], perm=[0, 2, 1], name="t"),
        helper.make_node("Reshape", ["t", "shape3"], ["t3"], name="t/view"),  # [B,D,L] read as [B,L,D]: D == 2L
        *_gemm("e", "t3", "w_dq", "y"),
    ]
    graph = helper.make_graph(
        nodes,
        "qdq",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [B, L, D])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [B, L, D])],
        initializer=inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    onnx.checker.check_model(model)
    return model


def _run(model: onnx.ModelProto | str, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    """The graph's own arithmetic: no ORT fusion (which could pick int8 kernels for one graph only)."""
    data = model if isinstance(model, str) else model.SerializeToString()
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    return ort.InferenceSession(data, options, providers=["CPUExecutionProvider"]).run(None, feeds)


def test_the_pairs_that_pay_move_next_to_their_producer_and_the_outputs_stay_exactly_the_same():
    assert D == 2 * L  # the Transpose branch's Reshape keeps the shape
    source = qdq_graph()
    model = qdq_graph()
    moved = hoist_activation_qdq(model)
    assert moved == ["a/Q", "b/Q"]  # d: behind a float GEMM and its Tanh; e: behind a Transpose
    onnx.checker.check_model(model)
    producers = {o: n for n in model.graph.node for o in n.output}
    nodes = {n.name: n for n in model.graph.node}
    assert producers[nodes["a/Q"].input[0]].name == "ln"  # the LayerNorm's output, no Reshape between
    assert producers[nodes["b/Q"].input[0]].name == "a/act"
    assert nodes["a/in"].input[0] == nodes["a/DQ"].output[0]  # the Reshape moves the dequantized tensor
    assert producers[nodes["d/Q"].input[0]].name == "d/in" and producers[nodes["e/Q"].input[0]].name == "e/in"
    x = np.random.default_rng(1).standard_normal((B, L, D)).astype(np.float32)
    np.testing.assert_array_equal(_run(model, {"x": x})[0], _run(source, {"x": x})[0])


def test_a_graph_with_nothing_to_move_is_not_written(tmp_path):
    model = qdq_graph()
    del model.graph.node[1:]  # the weight's DQ only: no activation pair at all
    model.graph.output[0].name = "w_dq"
    onnx.save(model, str(tmp_path / "src.onnx"))
    assert write_hoisted(tmp_path / "src.onnx", tmp_path / "out.onnx") == []
    assert not (tmp_path / "out.onnx").exists()


@pytest.mark.slow
def test_the_masked_demo_int8_model_rewritten_computes_the_same_logits(masked, tmp_path):
    """The masked demo quantized with one layer kept float (a fallback): the pairs after the
    LayerNorms and the INT8 GELUs move, none behind the float layer or the attention's Transpose,
    and ORT and OpenVINO compute the source's logits."""
    from edgekit.bundle import Bundle
    from edgekit.quantize import QuantizeConfig, quantize_bundle

    quantize_bundle(
        masked, QuantizeConfig(calib_samples=2, eval_samples=2, fallback=False, exclude=("blocks.0.mlp.fc",))
    )
    source = Bundle.load(masked).path_of("int8")
    moved = write_hoisted(source, tmp_path / "hoisted.onnx")
    model = onnx.load(str(tmp_path / "hoisted.onnx"))
    producers = {o: n for n in model.graph.node for o in n.output}
    nodes = {n.name: n for n in model.graph.node}
    kinds = {producers[nodes[q].input[0]].op_type for q in moved}
    assert moved and kinds <= {"LayerNormalization", "Mul"}  # LayerNorm outputs, tanh-GELU outputs (a Mul)
    assert not any(producers[nodes[q].input[0]].op_type == "Transpose" for q in moved)
    spec = onnx.load(str(source), load_external_data=False).graph.input
    rng = np.random.default_rng(0)
    shape = [d.dim_value for d in spec[0].type.tensor_type.shape.dim]
    feeds = {"tokens": rng.integers(0, 64, shape).astype(np.int64), "class_id": np.arange(shape[0], dtype=np.int64)}
    np.testing.assert_array_equal(_run(str(tmp_path / "hoisted.onnx"), feeds)[0], _run(str(source), feeds)[0])

    ov = pytest.importorskip("openvino")
    core = ov.Core()
    config = {"INFERENCE_PRECISION_HINT": "f32", "INFERENCE_NUM_THREADS": 1}
    outs = [core.compile_model(str(path), "CPU", config)(feeds)[0] for path in (source, tmp_path / "hoisted.onnx")]
    np.testing.assert_allclose(outs[1], outs[0], rtol=0, atol=1e-4 * float(np.abs(outs[0]).max()))
