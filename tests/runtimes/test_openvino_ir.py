"""OpenVINO IR files written from ONNX (runtimes/openvino_ir.py) and the exec graph's runtime
precisions, with real OpenVINO on a model built in code."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from edgekit.errors import EdgekitError

pytest.importorskip("openvino")
from edgekit.runtimes.openvino import OpenVinoRuntime, OvOptions  # noqa: E402
from edgekit.runtimes.openvino_ir import COMPUTE_TYPES, exec_precisions, save_ir  # noqa: E402

X = np.linspace(-1, 1, 4 * 32, dtype=np.float32).reshape(4, 32)


def _matmul(path, extra_node=None):
    """y = relu(x @ W): x float[4,32], W float[32,16]; ``extra_node`` appended with its output."""
    w = numpy_helper.from_array(np.random.default_rng(0).standard_normal((32, 16)).astype(np.float32), "w")
    nodes = [helper.make_node("MatMul", ["x", "w"], ["m"]), helper.make_node("Relu", ["m"], ["y"])]
    outputs = [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4, 16])]
    opsets = [helper.make_opsetid("", 17)]
    if extra_node is not None:
        nodes.append(extra_node)
        outputs.append(helper.make_tensor_value_info(extra_node.output[0], TensorProto.FLOAT, None))
        opsets.append(helper.make_opsetid(extra_node.domain, 1))
    graph = helper.make_graph(
        nodes, "mm", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 32])], outputs, [w]
    )
    onnx.save(helper.make_model(graph, opset_imports=opsets), str(path))
    return path


@pytest.mark.parametrize("fp16", [False, True])
def test_the_ir_opens_with_its_weights_and_computes_what_the_onnx_does(tmp_path, fp16):
    src = _matmul(tmp_path / "mm.onnx")
    (tmp_path / "ir").mkdir()
    xml, weights = save_ir(src, tmp_path / "ir" / "model.xml", fp16)
    assert xml.suffix == ".xml" and weights == xml.with_suffix(".bin") and weights.stat().st_size > 0
    with OpenVinoRuntime(src, OvOptions(threads=1)) as ref, OpenVinoRuntime(xml, OvOptions(threads=1)) as rt:
        assert rt.model_files == (xml, weights) and list(rt.inputs) == ["x"] and list(rt.outputs) == ["y"]
        want, got = ref.run({"x": X})["y"], rt.run({"x": X})["y"]
        np.testing.assert_allclose(got, want, rtol=0, atol=1e-2 if fp16 else 1e-6)  # f16-stored weights round
        kernels = exec_precisions(rt.compiled)
    assert set(kernels) <= set(COMPUTE_TYPES) and sum(n for ops in kernels.values() for n in ops.values()) >= 1
    if not fp16:
        assert {p for ops in kernels.values() for p in ops} == {"f32"}  # f32 inference precision, float weights


def test_an_op_openvino_cannot_convert_is_one_line_naming_it(tmp_path):
    bad = _matmul(tmp_path / "bad.onnx", helper.make_node("NoSuchOp", ["y"], ["z"], domain="com.example"))
    with pytest.raises(EdgekitError) as err:
        save_ir(bad, tmp_path / "model.xml", False)
    assert "cannot write bad.onnx as IR" in err.value.message and "com.example.NoSuchOp" in err.value.message
    assert "\n" not in err.value.message
