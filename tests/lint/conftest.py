"""ONNX graphs built in code for the lint tests (into tmp_path)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

OPSET = 18


def save(path: Path, nodes, inputs, outputs, initializers=(), opset: int = OPSET, check: bool = True) -> Path:
    graph = helper.make_graph(nodes, path.stem, inputs, outputs, initializer=list(initializers))
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=8)
    if check:
        onnx.checker.check_model(model)
    onnx.save(model, str(path))
    return path


@pytest.fixture
def write_onnx(tmp_path) -> Callable[..., Path]:
    def write(name: str, nodes, inputs, outputs, initializers=(), **kw) -> Path:
        return save(tmp_path / name, nodes, inputs, outputs, initializers, **kw)

    return write


@pytest.fixture
def bad_graph(write_onnx) -> Path:
    """Everything that will not deploy: a dynamic batch dim, RandomNormalLike noise inside the
    graph, a QDQ pair with uint8 zero points, and a TopK whose K is a graph input."""
    nodes = [
        helper.make_node("RandomNormalLike", ["x"], ["noise"], name="draw_noise"),
        helper.make_node("Add", ["x", "noise"], ["noisy"], name="add_noise"),
        helper.make_node("QuantizeLinear", ["noisy", "scale", "zp_u8"], ["q"], name="quant"),
        helper.make_node("DequantizeLinear", ["q", "scale", "zp_u8"], ["dq"], name="dequant"),
        helper.make_node("TopK", ["dq", "k"], ["values", "indices"], name="topk_dynamic", axis=-1),
    ]
    inits = [
        numpy_helper.from_array(np.array(0.05, dtype=np.float32), "scale"),
        numpy_helper.from_array(np.array(128, dtype=np.uint8), "zp_u8"),
    ]
    return write_onnx(
        "bad.onnx",
        nodes,
        [
            helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 16]),
            helper.make_tensor_value_info("k", TensorProto.INT64, [1]),
        ],
        [
            helper.make_tensor_value_info("values", TensorProto.FLOAT, ["batch", None]),
            helper.make_tensor_value_info("indices", TensorProto.INT64, ["batch", None]),
        ],
        inits,
    )


@pytest.fixture
def clean_graph(write_onnx) -> Path:
    """tokens int64[2,8] -> Gather(emb[16,4]) -> MatMul(W[4,16]) -> logits float[2,8,16]: a tiny
    masked-model signature that every target can run (opset 17: Xavier's TensorRT 8.5 too)."""
    rng = np.random.default_rng(0)
    inits = [
        numpy_helper.from_array(rng.standard_normal((16, 4)).astype(np.float32), "emb"),
        numpy_helper.from_array(rng.standard_normal((4, 16)).astype(np.float32), "w"),
    ]
    nodes = [
        helper.make_node("Gather", ["emb", "tokens"], ["h"], name="embed"),
        helper.make_node("MatMul", ["h", "w"], ["logits"], name="head"),
    ]
    return write_onnx(
        "clean.onnx",
        nodes,
        [helper.make_tensor_value_info("tokens", TensorProto.INT64, [2, 8])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, [2, 8, 16])],
        inits,
        opset=17,
    )
