"""benchmarks/ort_op_profile.py: its rows come from the runs after warm-up, each the median over
runs (one interrupted run does not move them), and a MatMul of two activations (the attention
core, float in INT8) gets its own row apart from a weight's MatMul."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")
sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
import ort_op_profile  # noqa: E402

from tests.runtimes.conftest import save_model  # noqa: E402


def _run(ts: int, dur: int) -> dict:
    return {"cat": "Session", "name": "model_run", "ts": ts, "dur": dur, "args": {}}


def _node(name: str, op: str, ts: int, dur: int, inputs: int = 1) -> dict:
    shapes = [{"float": [1, 8]}] * inputs
    return {
        "cat": "Node",
        "name": f"{name}_kernel_time",
        "ts": ts,
        "dur": dur,
        "args": {"op_name": op, "input_type_shape": shapes},
    }


def test_kernel_times_leave_out_warmup_and_take_the_median_run():
    events = []
    # 2 warm-up runs (slow: 1 ms), then 3 measured runs of 10 us, one of them interrupted (900 us).
    for i, dur in enumerate([1000, 1000, 10, 900, 10]):
        start = i * 10_000
        events += [_run(start, 5_000), _node("mm", "MatMul", start + 1, dur), _node("sm", "Softmax", start + 2, 4)]
    by_op, by_node, runs = ort_op_profile.kernel_times(events, warmup=2)
    assert runs == 3
    assert by_op == pytest.approx({"MatMul": 0.010, "Softmax": 0.004})  # us -> ms, the median run
    assert by_node == pytest.approx({"mm": 0.010, "sm": 0.004})


def test_kernel_times_need_a_run_past_warmup():
    with pytest.raises(ValueError, match="warm-up"):
        ort_op_profile.kernel_times([_run(0, 5)], warmup=1)


def test_a_matmul_of_two_activations_has_its_own_row(tmp_path):
    """y = x @ W (a weight), z = y @ x2 (two activations): ORT's trace lists only the fed inputs."""
    from onnx import TensorProto, helper, numpy_helper

    w = numpy_helper.from_array(np.ones((8, 8), np.float32), "w")
    nodes = [helper.make_node("MatMul", ["x", "w"], ["y"]), helper.make_node("MatMul", ["y", "x2"], ["z"])]
    inputs = [
        helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8]),
        helper.make_tensor_value_info("x2", TensorProto.FLOAT, [8, 3]),
    ]
    path = save_model(
        tmp_path / "mm.onnx", nodes, inputs, [helper.make_tensor_value_info("z", TensorProto.FLOAT, [1, 3])], [w]
    )
    feeds = [{"x": np.ones((1, 8), np.float32), "x2": np.ones((8, 3), np.float32)}]
    prof = ort_op_profile.profile_forward(path, feeds, runs=4, threads=1)
    ops = {o["op"] for o in prof["ops"]}
    assert {"MatMul", "MatMul [x·x]"} <= ops, ops
    assert prof["runs"] == 4
    assert sum(o["share"] for o in prof["ops"]) == pytest.approx(1.0)
    assert not list(Path.cwd().glob("onnxruntime_profile_*.json"))  # the trace file is removed


def test_side_by_side_has_every_op_of_either_precision():
    fp32 = {
        "ops": [
            {"op": "MatMul", "ms_per_forward": 4.0, "share": 0.8},
            {"op": "Add", "ms_per_forward": 1.0, "share": 0.2},
        ]
    }
    int8 = {
        "ops": [
            {"op": "QGemm", "ms_per_forward": 1.0, "share": 0.5},
            {"op": "Add", "ms_per_forward": 1.0, "share": 0.5},
        ]
    }
    rows = ort_op_profile.side_by_side(fp32, int8)
    assert [r["op"] for r in rows][0] == "MatMul"
    by_op = {r["op"]: r for r in rows}
    assert by_op["QGemm"]["fp32_ms"] == 0.0 and by_op["MatMul"]["int8_ms"] == 0.0
    assert by_op["Add"] == {"op": "Add", "fp32_ms": 1.0, "fp32_share": 0.2, "int8_ms": 1.0, "int8_share": 0.5}


def test_the_openvino_profile_names_each_layer_type_with_its_kernel(tmp_path):
    """y = sin(x @ W) over 32K values on OpenVINO's CPU plugin, as edgekit's runtime compiles it:
    rows "type (kernel)" from the plugin's counters, the Sin rewritten (no reference kernel row)."""
    pytest.importorskip("openvino")
    from onnx import TensorProto, helper, numpy_helper

    w = numpy_helper.from_array(np.full((256, 256), 0.01, np.float32), "w")
    nodes = [helper.make_node("MatMul", ["x", "w"], ["y"]), helper.make_node("Sin", ["y"], ["z"])]
    path = save_model(
        tmp_path / "sin.onnx",
        nodes,
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 128, 256])],
        [helper.make_tensor_value_info("z", TensorProto.FLOAT, [1, 128, 256])],
        [w],
    )
    feeds = [{"x": np.ones((1, 128, 256), np.float32)}]
    prof = ort_op_profile.profile_forward_openvino(path, feeds, runs=4, threads=1)
    ops = [o["op"] for o in prof["ops"]]
    assert prof["runs"] == 4 and all(" (" in op and op.endswith(")") for op in ops), ops
    assert any(op.startswith(("FullyConnected", "MatMul")) for op in ops), ops
    assert not any(op.startswith("Sin ") for op in ops), ops  # compiled as the fused polynomial
    assert sum(o["share"] for o in prof["ops"]) == pytest.approx(1.0)
