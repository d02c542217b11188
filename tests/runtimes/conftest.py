"""Tiny ONNX models built in code (into tmp_path) for the runtime tests, and the hardware markers."""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

try:
    import edgekit.spec  # noqa: F401
except ImportError:  # until the project's pytest config sets pythonpath, run from a checkout
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

OPSET = 17
IR_VERSION = 8  # readable by every onnxruntime/TensorRT parser we support


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "gpu: needs a CUDA GPU")
    config.addinivalue_line("markers", "trt: needs TensorRT (skipped with 'TensorRT not installed' without it)")


def save_model(path: Path, nodes, inputs, outputs, initializers=()) -> Path:
    graph = helper.make_graph(nodes, path.stem, inputs, outputs, initializer=list(initializers))
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)], ir_version=IR_VERSION)
    onnx.checker.check_model(model)
    onnx.save(model, str(path))
    return path


# y = x @ W + b (float32[2,4]) and z = relu(y): W, b fixed so tests can recompute in numpy.
MATMUL_W = np.arange(12, dtype=np.float32).reshape(3, 4) / 10 - 0.5  # (3, 4)
MATMUL_B = np.array([0.5, -1.0, 0.25, 0.0], dtype=np.float32)  # (4,)


def _matmul_add_numpy(x: np.ndarray) -> dict[str, np.ndarray]:
    y = x @ MATMUL_W + MATMUL_B  # (2, 4)
    return {"y": y, "z": np.maximum(y, 0)}


@pytest.fixture
def matmul_add_reference() -> Callable[[np.ndarray], dict[str, np.ndarray]]:
    """The numpy result of ``matmul_add_onnx`` for a feed ``x``."""
    return _matmul_add_numpy


@pytest.fixture
def write_onnx(tmp_path: Path) -> Callable[..., Path]:
    """``write_onnx(name, nodes, inputs, outputs, initializers)`` -> path under tmp_path."""

    def write(name: str, nodes, inputs, outputs, initializers=()) -> Path:
        return save_model(tmp_path / name, nodes, inputs, outputs, initializers)

    return write


@pytest.fixture
def matmul_add_onnx(write_onnx) -> Path:
    """x float32[2,3] -> y float32[2,4] = x @ W + b, z = relu(y)."""
    return write_onnx(
        "matmul_add.onnx",
        [
            helper.make_node("MatMul", ["x", "W"], ["xw"]),
            helper.make_node("Add", ["xw", "b"], ["y"]),
            helper.make_node("Relu", ["y"], ["z"]),
        ],
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
        [
            helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 4]),
            helper.make_tensor_value_info("z", TensorProto.FLOAT, [2, 4]),
        ],
        [numpy_helper.from_array(MATMUL_W, "W"), numpy_helper.from_array(MATMUL_B, "b")],
    )


@pytest.fixture
def dynamic_onnx(write_onnx) -> Path:
    """x float32[batch,3] -> relu: a symbolic batch dim."""
    return write_onnx(
        "dynamic.onnx",
        [helper.make_node("Relu", ["x"], ["y"])],
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 3])],
    )


@pytest.fixture
def qdq_onnx(write_onnx) -> Path:
    """Explicitly quantized MatMul: Q/DQ on the activation, DQ on int8 weights (symmetric, zp 0)."""
    w_int8 = np.clip(np.round(MATMUL_W / 0.01), -127, 127).astype(np.int8)
    return write_onnx(
        "qdq.onnx",
        [
            helper.make_node("QuantizeLinear", ["x", "x_scale", "zp"], ["x_q"]),
            helper.make_node("DequantizeLinear", ["x_q", "x_scale", "zp"], ["x_dq"]),
            helper.make_node("DequantizeLinear", ["W_q", "w_scale", "zp"], ["W_dq"]),
            helper.make_node("MatMul", ["x_dq", "W_dq"], ["y"]),
        ],
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 4])],
        [
            numpy_helper.from_array(np.array(0.02, dtype=np.float32), "x_scale"),
            numpy_helper.from_array(np.array(0.01, dtype=np.float32), "w_scale"),
            numpy_helper.from_array(np.array(0, dtype=np.int8), "zp"),
            numpy_helper.from_array(w_int8, "W_q"),
        ],
    )


@pytest.fixture
def x_feed() -> np.ndarray:
    return np.random.default_rng(0).standard_normal((2, 3)).astype(np.float32)
