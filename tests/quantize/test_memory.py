"""What quantize says of its memory (``quantize/memory.py``): one call's activations read from the
graph's shapes, the process's peak against the FP32 weights and the goal, and the summary line."""

from __future__ import annotations

import numpy as np
import pytest

from edgekit.quantize import memory
from edgekit.quantize.render import _summary_pairs

onnx = pytest.importorskip("onnx")


def test_activation_bytes_is_the_most_held_at_once_in_graph_order(tmp_path):
    """x -> Relu -> a -> Relu -> b; y0 = b + x; y = y0 * w (4 floats each): a is freed after the
    second Relu and b after the Add, x (an input) and y (the output) are held for the whole call,
    so at most three tensors (48 bytes) are held at once, never all five; the weight w is no
    activation."""
    from onnx import TensorProto, helper, numpy_helper

    f4 = [helper.make_tensor_value_info(n, TensorProto.FLOAT, [4]) for n in ("x", "y")]
    graph = helper.make_graph(
        [
            helper.make_node("Relu", ["x"], ["a"]),
            helper.make_node("Relu", ["a"], ["b"]),
            helper.make_node("Add", ["b", "x"], ["y0"]),
            helper.make_node("Mul", ["y0", "w"], ["y"]),
        ],
        "chain",
        [f4[0]],
        [f4[1]],
        [numpy_helper.from_array(np.ones(4, np.float32), "w")],
    )
    path = tmp_path / "chain.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)]), str(path))
    # x a b (48) -> x b y0 (48) -> x y0 y (48): three at a time, 16 bytes each.
    assert memory.activation_bytes(path) == 48


def test_activation_bytes_of_the_tiny_graph_is_less_than_all_its_tensors(tiny_model):
    every = onnx.shape_inference.infer_shapes(onnx.load(str(tiny_model))).graph.value_info
    total = sum(4 * int(np.prod([d.dim_value for d in v.type.tensor_type.shape.dim])) for v in every)
    assert 0 < memory.activation_bytes(tiny_model) < total


def test_memory_record_sets_the_peak_against_the_weights_and_the_goal():
    peak = memory.peak_rss_bytes()
    r = memory.memory_record(peak, weights=10**6, activations=5 * 10**5)
    assert r["peak_rss_bytes"] >= peak > 0  # the peak never goes down
    assert r["ratio"] == r["peak_rss_bytes"] / 10**6
    assert r["goal_bytes"] == int(memory.GOAL_WEIGHT_FACTOR * 10**6) + 5 * 10**5
    assert r["within_goal"] is (r["peak_rss_bytes"] <= r["goal_bytes"])
    huge = memory.memory_record(peak, weights=10**15, activations=0)
    assert huge["within_goal"] is True and huge["ratio"] < 1e-3


def test_the_summary_says_the_peak_against_the_weights():
    s = {
        "sizes": {"fp32_bytes": 1e6, "int8_bytes": 3e5, "ratio": 0.3},
        "int8_flop_share": {"matmul": 0.9, "weighted": 0.9},
        "calibration": {"samples": 2, "decodes": 1, "feeds": 8, "calls_per_decode": 8},
        "selection": {"int8": [], "float_by_op_type": {}},
        "model": "m",
        "kind": "masked",
        "profile": "cpu",
        "method": "minmax",
        "passed": True,
        "memory": memory.memory_record(0, weights=2**30, activations=2**28) | {"peak_rss_bytes": 3 * 2**30},
    }
    s["memory"] |= {"ratio": 3.0, "within_goal": False}
    line = _summary_pairs(s)["peak memory"]
    assert line.startswith("3.00 GiB, 3.00x the 1.00 GiB of FP32 weights") and "over the goal of 2.5x" in line
    assert "2.75 GiB" in line
    assert "peak memory" not in _summary_pairs(s | {"memory": None})  # a summary written before the record
