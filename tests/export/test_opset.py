"""Exporting below the exporter's native opset 18 (`--opset 17`, what TensorRT 8.5/8.6 on JetPack
5 and 6.0 parse): the graph must be a valid opset-17 model that computes the same thing."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

from edgekit.errors import ExportError
from edgekit.export.opset import downgrade_split, split_sizes


@pytest.mark.parametrize("dim, parts, sizes", [(12, 3, [4, 4, 4]), (10, 3, [4, 4, 2]), (7, 2, [4, 3])])
def test_split_sizes_follow_opset_18(dim, parts, sizes):
    assert split_sizes(dim, parts) == sizes and sum(sizes) == dim


def _split_model(opset: int, dim: int = 10, parts: int = 3, static: bool = True) -> onnx.ModelProto:
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, dim if static else "n"])
    sizes = split_sizes(dim, parts) if static else ["m"] * parts
    outs = [helper.make_tensor_value_info(f"y{i}", TensorProto.FLOAT, [2, sizes[i]]) for i in range(parts)]
    node = helper.make_node("Split", ["x"], [f"y{i}" for i in range(parts)], name="split", axis=1, num_outputs=parts)
    graph = helper.make_graph([node], "g", [x], outs)
    # What the exporter leaves behind: an opset-17 stamp on an opset-18 Split.
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=8)


def test_an_opset_17_split_with_num_outputs_becomes_valid_and_equal():
    model = _split_model(17)
    with pytest.raises(onnx.checker.ValidationError, match="Unrecognized attribute: num_outputs for operator Split"):
        onnx.checker.check_model(model)
    assert downgrade_split(model) == 1
    onnx.checker.check_model(model, full_check=True)
    x = np.arange(20, dtype=np.float32).reshape(2, 10)
    got = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})
    for part, expected in zip(got, np.split(x, [4, 8], axis=1)):
        np.testing.assert_array_equal(part, expected)


def test_opset_18_models_are_left_alone():
    model = _split_model(18)
    before = model.SerializeToString()
    assert downgrade_split(model) == 0 and model.SerializeToString() == before


def test_a_dynamic_split_axis_is_an_error_naming_the_fix():
    with pytest.raises(ExportError, match="no static size on axis 1.*") as err:
        downgrade_split(_split_model(17, static=False))
    assert "--opset 18" in str(err.value)


def test_a_model_exports_at_opset_17_for_tensorrt_8(tiny_specs, tmp_path):
    pytest.importorskip("torch")
    from edgekit.export.config import ExportConfig
    from edgekit.export.onnx_export import export_onnx

    spec = tiny_specs["masked"]
    facts = export_onnx(spec, tmp_path / "m17.onnx", ExportConfig(opset=17))
    model = onnx.load(str(tmp_path / "m17.onnx"))
    assert facts["opset"] == 17 and model.opset_import[0].version == 17
    assert not any(a.name == "num_outputs" for n in model.graph.node for a in n.attribute)
    feeds = {n: np.ones(s.shape, dtype=s.dtype) for n, s in spec.inputs.items()}
    ort.InferenceSession(str(tmp_path / "m17.onnx"), providers=["CPUExecutionProvider"]).run(None, feeds)
