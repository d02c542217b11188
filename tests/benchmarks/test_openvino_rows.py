"""benchmarks/openvino_rows.py and bench.py's OpenVINO numbers: the op profile by kernel, and every
quoted figure carrying the CPU's ISA features (or the reason it was not measured)."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("openvino")
sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
import bench  # noqa: E402
import openvino_rows  # noqa: E402


def test_op_profile_sums_kernel_time_by_op_and_kernel(tmp_path):
    from tests.benchmarks.test_fast_paths import _gemm_relu

    path = _gemm_relu(tmp_path / "gemm_relu.onnx")

    class OneFile:  # the one Bundle method ov_op_profile needs
        def path_of(self, name):
            return path

    prof = openvino_rows.ov_op_profile(OneFile(), "fp32", 1, {"x": np.ones((32, 64), np.float32)}, runs=3)
    assert prof["kernel_ms"] > 0 and prof["ops"]
    assert all(" [" in o["op"] and o["ms"] >= 0 and o["nodes"] >= 1 for o in prof["ops"])
    assert abs(sum(o["share"] for o in prof["ops"]) - 1) < 1e-9


def test_every_openvino_number_carries_the_cpu_and_its_isa():
    host = {"model": "Test CPU", "isa": ["avx512_vnni", "amx_int8"]}
    forward = {
        "best_int8": "openvino int8",
        "median_ms": {"ort fp32": 9.0, "openvino int8": 3.0},
        "speedup_vs_ort_fp32": {"ort fp32": 1.0, "openvino int8": 3.0},
        "op_profile": {
            "kernel_ms": 2.5,
            "ops": [{"op": "FullyConnected [brgemm_avx512_amx_I8]", "ms": 2.0, "share": 0.8}],
        },
    }
    numbers = bench.openvino_numbers(
        {"forward_t1": forward, "decode": None, "decode_reason": "not run", "nar_ar": None, "nar_ar_reason": "not run"},
        256,
        host,
    )
    assert numbers[0]["value"] == 3.0 and "goal >= 3" in numbers[0]["meaning"]
    assert all(n["cpu"] == "Test CPU" and n["isa"] == "avx512_vnni amx_int8" for n in numbers)
    assert [n["reason"] for n in numbers if not n["measured"]] == ["not run", "not run"]
    missing = bench.openvino_numbers({"reason": "openvino is not installed"}, 256, host)
    assert missing[0]["measured"] is False and missing[0]["isa"] == "avx512_vnni amx_int8"
