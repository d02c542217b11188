"""prepare_qnn's Gemm -> MatMul + Add rewrite: same outputs on the CPU, and the Linear weights
become MatMul weights the qnn profile's search can promote to 16 bit (the HTP refuses 16-bit
Gemm weights)."""

from __future__ import annotations

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")

from onnx import TensorProto, helper, numpy_helper  # noqa: E402

from edgekit.quantize.qnn.graph import gemm_as_matmul, matmul_weights  # noqa: E402


def _gemm_graph(path, trans_b: int, alpha: float = 1.0, bias: bool = True):
    rng = np.random.default_rng(0)
    w = rng.standard_normal((5, 3) if trans_b else (3, 5)).astype(np.float32)
    inits = [numpy_helper.from_array(w, "W")]
    inputs = ["x", "W"]
    if bias:
        inits.append(numpy_helper.from_array(rng.standard_normal(5).astype(np.float32), "b"))
        inputs.append("b")
    node = helper.make_node("Gemm", inputs, ["y"], name="fc", transB=trans_b, alpha=alpha)
    graph = helper.make_graph(
        [node],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 5])],
        inits,
    )
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)]), str(path))
    return path


@pytest.mark.parametrize("trans_b,bias", [(1, True), (0, True), (1, False)])
def test_gemm_becomes_matmul_plus_add_with_the_same_outputs(tmp_path, trans_b, bias):
    path = _gemm_graph(tmp_path / "g.onnx", trans_b, bias=bias)
    x = np.random.default_rng(1).standard_normal((2, 3)).astype(np.float32)
    before = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    assert gemm_as_matmul(path) == 1
    ops = [n.op_type for n in onnx.load(str(path)).graph.node]
    assert ops == (["MatMul", "Add"] if bias else ["MatMul"])
    after = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    np.testing.assert_allclose(after, before, rtol=1e-5, atol=1e-6)
    assert list(matmul_weights(path)) == ["W_matmul"]  # now a weight the search can promote
    # The Gemm's weight is gone with the Gemm: left in, every session over the graph logged a
    # "Removing initializer" warning (hundreds per qnn quantize of the flow demo).
    assert {i.name for i in onnx.load(str(path)).graph.initializer} == ({"W_matmul", "b"} if bias else {"W_matmul"})


def test_two_gemms_over_one_weight_share_one_matmul_weight(tmp_path):
    path = _gemm_graph(tmp_path / "g.onnx", 1)
    model = onnx.load(str(path))
    model.graph.node.append(helper.make_node("Gemm", ["x", "W"], ["z"], name="fc2", transB=1))
    model.graph.output.append(helper.make_tensor_value_info("z", TensorProto.FLOAT, [2, 5]))
    onnx.save(model, str(path))
    x = np.random.default_rng(1).standard_normal((2, 3)).astype(np.float32)
    before = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(None, {"x": x})
    assert gemm_as_matmul(path) == 2
    onnx.checker.check_model(onnx.load(str(path)))
    assert sorted(i.name for i in onnx.load(str(path)).graph.initializer) == ["W_matmul", "b"]
    after = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(None, {"x": x})
    for a, b in zip(after, before):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)


def test_a_scaled_gemm_is_left_alone(tmp_path):
    path = _gemm_graph(tmp_path / "g.onnx", 1, alpha=0.5)
    assert gemm_as_matmul(path) == 0
    assert [n.op_type for n in onnx.load(str(path)).graph.node] == ["Gemm"]
