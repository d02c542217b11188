"""Fixtures for the quantize tests: a tiny hand-built graph with every node role, and private
copies of the session's demo bundles (quantizing writes into a bundle)."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest

D = 16  # width of the tiny graph


def build_tiny_model(path: Path, seed: int = 0, outlier: float = 0.0) -> Path:
    """A flow-like block, static shapes, opset 18:

    x float[2,4,16], t float[2] -> y float[2,4,16]
      h = LayerNorm(x); q, k = h·Wq, h·Wk; s = q·kᵀ (attention core); p = Softmax(s)
      a = p·h (attention core); y0 = a·Wo + bo (named "proj")
      e = Gemm(Concat(Sin(1000t), Cos(1000t)), Wt) (time embedding, read by two Gemms: the hub)
      y = y0 + Unsqueeze(Gemm(e, Wa)) + Unsqueeze(Gemm(e, Wb))
    ``outlier`` scales one channel of proj's input (an activation that 8 bits resolve badly)."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(seed)

    def w(name, *shape, scale=0.3):
        return numpy_helper.from_array((rng.standard_normal(shape) * scale).astype(np.float32), name)

    inits = [
        w("ln_scale", D, scale=0.1),
        w("ln_bias", D, scale=0.1),
        w("Wq", D, D),
        w("Wk", D, D),
        w("Wo", D, D),
        w("bo", D),
        w("Wt", D, D),
        w("Wa", D, D),
        w("Wb", D, D),
        numpy_helper.from_array(np.array([1000.0], dtype=np.float32), "k1000"),
        numpy_helper.from_array(np.array([1], dtype=np.int64), "axis1"),
        numpy_helper.from_array(np.array([1, D // 2], dtype=np.int64), "reps"),
        numpy_helper.from_array(np.array([1.0] * (D - 1) + [1.0 + outlier], dtype=np.float32), "spike"),
    ]
    nodes = [
        helper.make_node("LayerNormalization", ["x", "ln_scale", "ln_bias"], ["h"], name="ln", axis=-1),
        helper.make_node("MatMul", ["h", "Wq"], ["q"], name="q_proj"),
        helper.make_node("MatMul", ["h", "Wk"], ["k"], name="k_proj"),
        helper.make_node("Transpose", ["k"], ["kT"], name="kT", perm=[0, 2, 1]),
        helper.make_node("MatMul", ["q", "kT"], ["s"], name="qk"),
        helper.make_node("Softmax", ["s"], ["p"], name="softmax", axis=-1),
        helper.make_node("MatMul", ["p", "h"], ["a"], name="av"),
        helper.make_node("Mul", ["a", "spike"], ["a2"], name="spike_mul"),
        helper.make_node("MatMul", ["a2", "Wo"], ["y0m"], name="proj"),
        helper.make_node("Add", ["y0m", "bo"], ["y0"], name="proj_bias"),
        helper.make_node("Unsqueeze", ["t", "axis1"], ["t1"], name="t_unsq"),
        helper.make_node("Mul", ["t1", "k1000"], ["ang"], name="t_scale"),
        helper.make_node("Sin", ["ang"], ["sin"], name="sin"),
        helper.make_node("Cos", ["ang"], ["cos"], name="cos"),
        helper.make_node("Concat", ["sin", "cos"], ["sc"], name="concat", axis=1),
        helper.make_node("Tile", ["sc", "reps"], ["sc16"], name="tile"),  # [2, 2] -> [2, 16]: "more frequencies"
        helper.make_node("Gemm", ["sc16", "Wt"], ["e"], name="time_mlp"),
        helper.make_node("Gemm", ["e", "Wa"], ["ea"], name="ada_a"),
        helper.make_node("Gemm", ["e", "Wb"], ["eb"], name="ada_b"),
        helper.make_node("Unsqueeze", ["ea", "axis1"], ["ea1"], name="ea_unsq"),
        helper.make_node("Unsqueeze", ["eb", "axis1"], ["eb1"], name="eb_unsq"),
        helper.make_node("Add", ["y0", "ea1"], ["y1"], name="add_a"),
        helper.make_node("Add", ["y1", "eb1"], ["y"], name="add_b"),
    ]
    graph = helper.make_graph(
        nodes,
        "tiny",
        [
            helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 4, D]),
            helper.make_tensor_value_info("t", TensorProto.FLOAT, [2]),
        ],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 4, D])],
        inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    model.ir_version = 9
    onnx.checker.check_model(model)
    onnx.save(model, str(path))
    return path


def tiny_feeds(n: int, seed: int = 1) -> list[dict[str, np.ndarray]]:
    rng = np.random.default_rng(seed)
    return [
        {
            "x": rng.standard_normal((2, 4, D)).astype(np.float32),
            "t": np.array([i / max(n - 1, 1), 0.5], dtype=np.float32),
        }
        for i in range(n)
    ]


@pytest.fixture(scope="session")
def tiny_model(tmp_path_factory) -> Path:
    pytest.importorskip("onnxruntime")
    return build_tiny_model(tmp_path_factory.mktemp("tiny") / "tiny.onnx")


@pytest.fixture(scope="session")
def quant_bundles(demo_bundles, tmp_path_factory) -> dict[str, Path]:
    """Private copies of the demo bundles (batch 2) that tests may quantize into."""
    root = tmp_path_factory.mktemp("quant-bundles")
    return {kind: Path(shutil.copytree(src, root / kind)) for kind, src in demo_bundles.items()}
