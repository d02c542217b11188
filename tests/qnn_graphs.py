"""Tiny hand-built graphs for the Qualcomm HTP tests (runtime and lint): an MLP in float, its
full-integer QDQ (qnn profile rules) and the cpu profile's QDQ, which the HTP refuses."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

D = 8


def mlp(path: Path, seed: int = 0) -> Path:
    """x float[1,4,8] -> y = Relu(x·W1 + b1)·W2 (named nodes), opset 18."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(seed)
    inits = [
        numpy_helper.from_array((rng.standard_normal(s) * 0.5).astype(np.float32), n)
        for n, s in (("W1", (D, D)), ("b1", (D,)), ("W2", (D, D)))
    ]
    nodes = [
        helper.make_node("MatMul", ["x", "W1"], ["h0"], name="fc1"),
        helper.make_node("Add", ["h0", "b1"], ["h1"], name="fc1_bias"),
        helper.make_node("Relu", ["h1"], ["h"], name="act"),
        helper.make_node("MatMul", ["h", "W2"], ["y"], name="fc2"),
    ]
    graph = helper.make_graph(
        nodes,
        "mlp",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4, D])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, D])],
        inits,
    )
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)]), str(path))
    return path


def feeds(n: int, seed: int = 1) -> list[dict[str, np.ndarray]]:
    rng = np.random.default_rng(seed)
    return [{"x": rng.standard_normal((1, 4, D)).astype(np.float32)} for _ in range(n)]


@pytest.fixture(scope="module")
def qnn_graphs(tmp_path_factory):
    """{"fp32": float graph, "qdq": its full-integer QDQ (qnn profile rules), "cpu_int8": the
    cpu profile's QDQ (int8 per-channel weights, float bias: what the HTP refuses)}."""
    from edgekit.quantize.calibrate import calibration_reader
    from edgekit.quantize.config import QuantizeConfig
    from edgekit.quantize.cpu.ptq import quantize_model
    from edgekit.quantize.graph import analyse_graph
    from edgekit.quantize.qnn.graph import quantize_qnn_model

    root = tmp_path_factory.mktemp("qnn-rt")
    fp32 = mlp(root / "fp32.onnx")
    qdq = quantize_qnn_model(fp32, root / "qdq.onnx", calibration_reader(feeds(8)))
    cpu_int8 = root / "cpu_int8.onnx"
    cfg = QuantizeConfig(profile="cpu", preprocess=False)
    plan = analyse_graph(fp32)
    quantize_model(fp32, cpu_int8, calibration_reader(feeds(8)), ["fc1", "fc2"], cfg, plan)
    return {"fp32": fp32, "qdq": qdq, "cpu_int8": cpu_int8}
