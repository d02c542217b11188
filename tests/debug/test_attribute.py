"""The attribution's arithmetic: Q/DQ round trips as ONNX defines them, and the accumulation of
a u8·s8 GEMM modelled per CPU class (given explicitly: no test depends on this host's ISA)."""

from __future__ import annotations

import math
from types import SimpleNamespace

import numpy as np

from edgekit.debug.attribute import QdqInput, accumulation, cause, quantize, range_use

MATMUL = SimpleNamespace(op_type="MatMul", attribute=[])


def test_quantize_rounds_and_clips_like_quantize_linear():
    p = QdqInput("activation", "x", np.array(0.5), np.array(128, np.uint8), "uint8", None)
    q, dq = quantize(np.array([0.0, 0.74, 0.76, 100.0, -100.0]), p)
    assert q.tolist() == [128, 129, 130, 255, 0]
    assert dq.tolist() == [0.0, 0.5, 1.0, 63.5, -64.0]
    doc = range_use(np.array([0.0, 0.74, 0.76, 100.0, -100.0]), p)
    assert doc["clipped_share"] == 0.4 and doc["range_used"] > 1


def test_full_range_u8s8_weights_saturate_on_avx2_and_not_on_vnni():
    rng = np.random.default_rng(0)
    act = QdqInput("activation", "x", np.array(1.0 / 255), np.array(0, np.uint8), "uint8", None)
    x = rng.uniform(0.9, 1.0, (8, 16))  # u8 values near 255
    w = np.full((16, 4), 127, np.int8)  # every consecutive K pair: 255·127·2 > 32767
    weight = QdqInput("weight", "w", np.full(4, 0.01), np.zeros(4, np.int8), "int8", 1, w)
    avx2 = accumulation(MATMUL, act, x, weight, w, "ort", "avx2")
    assert avx2["saturating_pairs"] and avx2["pairs_saturated"] == 1.0 and avx2["sqnr_db"] < 10
    vnni = accumulation(MATMUL, act, x, weight, w, "ort", "avx512-vnni")
    assert vnni["sqnr_db"] == math.inf and not vnni["saturating_pairs"]
    assert not accumulation(MATMUL, act, x, weight, w, "qnn", "avx2")["modelled"]  # the HTP is no MLAS kernel
    doc = {
        "activation": [
            {
                "tensor": "x",
                "role": "activation",
                "dtype": "uint8",
                "sqnr_db": 40.0,
                "clipped_share": 0.0,
                "range_used": 0.9,
            }
        ],
        "weights": {"tensor": "w", "dtype": "int8", "per_channel": True, "sqnr_db": 45.0},
        "accumulation": avx2,
    }
    assert cause(doc)[0] == "accumulation"
    assert cause(doc | {"accumulation": vnni})[0] == "activation range"
