"""The cpu profile's scheme per CPU class, through ORT's quantizer on a tiny graph: the pair-bounded
weights the AVX2 kernel cannot saturate, and exact results on whatever class this host is."""

from __future__ import annotations

import numpy as np
import pytest

from edgekit.arithmetic import PAIR_LIMIT, SCHEMES, k_axis, max_pair_sum, scheme_for
from edgekit.host import HostFacts
from edgekit.quantize.config import QuantizeConfig
from tests.quantize.conftest import tiny_feeds

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")

from onnx import numpy_helper  # noqa: E402


def _quantized(tmp_path, tiny_model, scheme):
    from edgekit.quantize import graph as qgraph
    from edgekit.quantize.calibrate import calibration_reader
    from edgekit.quantize.cpu import ptq
    from edgekit.quantize.cpu.select import select_nodes

    cfg = QuantizeConfig(scheme=scheme)
    plan = qgraph.analyse_graph(tiny_model, time_input="t")
    chosen = select_nodes(plan, cfg)[0]
    out = tmp_path / f"{scheme}.onnx"
    ptq.quantize_model(tiny_model, out, calibration_reader(tiny_feeds(6)), chosen, cfg, plan)
    return out


def _int8_weights(path):
    model = onnx.load(str(path))
    inits = {i.name: numpy_helper.to_array(i) for i in model.graph.initializer}
    producer = {o: n for n in model.graph.node for o in n.output}
    for node in model.graph.node:
        if node.op_type in ("MatMul", "Gemm") and len(node.input) > 1 and node.input[1] in producer:
            dq = producer[node.input[1]]
            if (
                dq.op_type == "DequantizeLinear"
                and inits.get(dq.input[0]) is not None
                and inits[dq.input[0]].dtype == np.int8
            ):
                trans_b = any(a.name == "transB" and a.i for a in node.attribute)
                yield node.name, inits[dq.input[0]], k_axis(node.op_type, inits[dq.input[0]], 1, trans_b)


def test_the_pair_scheme_writes_weights_the_avx2_kernel_cannot_saturate(tmp_path, tiny_model):
    """Through ORT's quantizer (TensorQuantOverrides): every int8 weight of the u8s8-pair model
    keeps its pairs <= 128; the full-range u8s8 model of the same graph does not."""
    bounded = dict(
        (n, max_pair_sum(q, q.ndim - 1 if k == 0 else 0, k))
        for n, q, k in _int8_weights(_quantized(tmp_path, tiny_model, "u8s8-pair"))
    )
    full = dict(
        (n, max_pair_sum(q, q.ndim - 1 if k == 0 else 0, k))
        for n, q, k in _int8_weights(_quantized(tmp_path, tiny_model, "u8s8"))
    )
    assert bounded and set(bounded) == set(full)
    assert max(bounded.values()) <= PAIR_LIMIT, bounded
    assert max(full.values()) > PAIR_LIMIT, full  # full range: 127-magnitude neighbours exist


def test_the_pair_scheme_is_as_accurate_on_this_host_as_the_numpy_exact_model(tmp_path, tiny_model):
    """The same u8s8-pair model computed by ORT here and by an exact-integer simulation agree to
    float rounding: nothing saturated, on whatever class this host is."""
    out = _quantized(tmp_path, tiny_model, "u8s8-pair")
    ref = ort.InferenceSession(str(tiny_model), providers=["CPUExecutionProvider"])
    q = ort.InferenceSession(str(out), providers=["CPUExecutionProvider"])
    noopt = ort.SessionOptions()
    noopt.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL  # DQ -> float MatMul: exact arithmetic
    sim = ort.InferenceSession(str(out), noopt, providers=["CPUExecutionProvider"])
    for feed in tiny_feeds(3, seed=7):
        a, b, c = ref.run(None, feed)[0], q.run(None, feed)[0], sim.run(None, feed)[0]
        np.testing.assert_allclose(b, c, atol=1e-4 * np.abs(c).max())
        snr = 10 * np.log10(np.sum(a**2) / np.sum((a - b) ** 2))
        assert 25 < snr < 80, snr


def test_the_scheme_follows_the_class_it_is_quantized_for(monkeypatch):
    assert QuantizeConfig(isa="avx2").settings.weight_bound == "pair"
    assert QuantizeConfig(isa="avx512").settings.scheme == "u8s8-pair"
    for exact in ("avx512-vnni", "avx-vnni", "amx", "arm64-dotprod"):
        s = QuantizeConfig(isa=exact).settings
        assert (s.scheme, s.weight_bound) == ("u8s8", "full")
        assert not SCHEMES["u8s8"].saturates_on(exact)
    assert SCHEMES["u8s8"].saturates_on("avx2") and not SCHEMES["u8s8-pair"].saturates_on("avx2")
    assert not SCHEMES["u8s8-rr"].saturates_on("avx2") and not SCHEMES["u8u8"].saturates_on("avx2")
    # "host" means this machine's class, read from /proc/cpuinfo.
    monkeypatch.setattr(
        HostFacts,
        "detect",
        classmethod(lambda cls, root="/": HostFacts("x86_64", "EPYC", None, None, False, ("avx2",))),
    )
    assert QuantizeConfig().arithmetic == "avx2" and QuantizeConfig().settings.scheme == "u8s8-pair"
    assert QuantizeConfig(profile="trt").settings.scheme == ""  # TensorRT's own rules, not a CPU's
    assert QuantizeConfig(scheme="u8u8").settings.weight_type == "QUInt8"
    assert scheme_for("amx").name == "u8s8"
