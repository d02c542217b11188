"""benchmarks/fast_paths.py: the op profile and the interleaved timer the bench's rows come from."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
import fast_paths  # noqa: E402

from tests.runtimes.conftest import save_model  # noqa: E402


def _gemm_relu(path: Path) -> Path:
    """y = relu(x @ W + b): one weighted kernel (Gemm after ORT's fusion) and one other (Relu)."""
    from onnx import TensorProto, helper, numpy_helper

    w = numpy_helper.from_array(np.ones((64, 64), np.float32), "w")
    b = numpy_helper.from_array(np.zeros(64, np.float32), "b")
    nodes = [helper.make_node("Gemm", ["x", "w", "b"], ["g"]), helper.make_node("Relu", ["g"], ["y"])]
    io = lambda n: helper.make_tensor_value_info(n, TensorProto.FLOAT, [32, 64])  # noqa: E731
    return save_model(path, nodes, [io("x")], [io("y")], [w, b])


def test_op_profile_splits_weighted_from_other_kernels(tmp_path):
    path = _gemm_relu(tmp_path / "g.onnx")
    prof = fast_paths.op_profile(path, {"x": np.ones((32, 64), np.float32)}, threads=1, runs=5)
    ops = {o["op"]: o for o in prof["ops"]}
    assert {"Gemm", "FusedGemm"} & set(ops)  # ORT fuses the Relu into the Gemm (FusedGemm) on CPU
    assert prof["kernel_ms"] > 0
    assert prof["weighted_ms"] == pytest.approx(
        sum(o["ms"] for o in prof["ops"] if o["op"] in fast_paths.WEIGHTED_KERNELS)
    )
    assert prof["weighted_ms"] + prof["other_ms"] == pytest.approx(prof["kernel_ms"])
    assert sum(o["share"] for o in prof["ops"]) == pytest.approx(1.0)
    assert not list(Path.cwd().glob("onnxruntime_profile_*.json"))  # the trace file is removed


def test_interleaved_times_every_variant_the_same_number_of_times():
    calls = {"a": 0, "b": 0}

    def bump(k):
        calls[k] += 1

    samples = fast_paths.interleaved({"a": lambda: bump("a"), "b": lambda: bump("b")}, n=7, warmup=2)
    assert calls == {"a": 9, "b": 9}
    assert [len(v) for v in samples.values()] == [7, 7]
    assert all(x >= 0 for v in samples.values() for x in v)
