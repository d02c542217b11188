"""The CPU arithmetic INT8 runs on, modelled in numpy and checked against ONNX Runtime on this host.

Every verdict here holds on every x86 class: the kernel model for *this* host's class (saturating
pair sums on avx2/avx512, exact dot products on VNNI/AMX/ARM) must reproduce ORT bit for bit, and
the pair-bounded scheme must give the exact integer result whatever the class."""

from __future__ import annotations

import numpy as np
import pytest

from edgekit.host import HostFacts, isa_class
from edgekit.quantize.arithmetic import (
    ISA,
    PAIR_LIMIT,
    SCHEMES,
    gemm_exact,
    gemm_pairs_saturating,
    k_axis,
    max_pair_sum,
    pair_range,
    saturation,
    scheme_for,
)
from edgekit.quantize.config import QuantizeConfig
from tests.quantize.conftest import tiny_feeds

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")

from onnx import TensorProto, helper, numpy_helper  # noqa: E402

HOST = HostFacts.detect().isa_class


def _qdq_gemm(wq: np.ndarray, x_scale: float, w_scale: np.ndarray, op: str = "Gemm") -> bytes:
    """x float[M, K] -> Q(u8, zero point 0) -> DQ -> Gemm/MatMul with DQ(s8 weight [K, N], per column).
    ORT fuses it into QGemm / MatMulIntegerToFloat: MLAS's u8s8 kernel on the raw operands."""
    m, k = 6, wq.shape[0]
    n = wq.shape[1]
    inits = [
        numpy_helper.from_array(np.array(x_scale, np.float32), "xs"), numpy_helper.from_array(np.array(0, np.uint8), "xz"),
        numpy_helper.from_array(wq, "wq"), numpy_helper.from_array(w_scale.astype(np.float32), "ws"),
        numpy_helper.from_array(np.zeros(n, np.int8), "wz"),
    ]
    nodes = [helper.make_node("QuantizeLinear", ["x", "xs", "xz"], ["xq"]), helper.make_node("DequantizeLinear", ["xq", "xs", "xz"], ["xd"]),
             helper.make_node("DequantizeLinear", ["wq", "ws", "wz"], ["wd"], axis=1)]
    if op == "Gemm":
        inits += [numpy_helper.from_array(np.zeros(n, np.int32), "bq"), numpy_helper.from_array((x_scale * w_scale).astype(np.float32), "bs")]
        nodes += [helper.make_node("DequantizeLinear", ["bq", "bs"], ["bd"], axis=0), helper.make_node("Gemm", ["xd", "wd", "bd"], ["y"])]
    else:
        nodes.append(helper.make_node("MatMul", ["xd", "wd"], ["y"]))
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [m, k])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [m, n])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    model.ir_version = 9
    return model.SerializeToString()


@pytest.mark.parametrize("op", ["Gemm", "MatMul"])
def test_the_kernel_model_of_this_hosts_class_reproduces_onnxruntime(op):
    """Large u8 activations times full-range s8 weights: on avx2/avx512 ORT returns exactly the
    saturating pair-sum model (and not the exact product), elsewhere exactly the exact product."""
    rng = np.random.default_rng(0)
    wq = rng.integers(-127, 128, (64, 16)).astype(np.int8)
    ws = np.full(16, 0.01, np.float32)
    a = rng.integers(150, 256, (6, 64))
    x = (a * 0.02).astype(np.float32)  # quantizes back to exactly a (scale 0.02, zero point 0)
    sess = ort.InferenceSession(_qdq_gemm(wq, 0.02, ws, op), providers=["CPUExecutionProvider"])
    got = sess.run(None, {"x": x})[0]
    sat, exact = gemm_pairs_saturating(a, wq) * 0.02 * 0.01, gemm_exact(a, wq) * 0.02 * 0.01
    assert not np.allclose(sat, exact, atol=1e-3)  # the operands do saturate the AVX2 kernel
    want = sat if ISA.get(HOST) is None or ISA[HOST].saturating_pairs else exact
    if HOST == "unknown":
        pytest.skip("unknown CPU class: no kernel model to compare")
    np.testing.assert_allclose(got, want, atol=1e-4, err_msg=f"host class {HOST}")


def test_pair_bounded_weights_are_exact_on_the_saturating_kernel():
    """Any float weight quantized with the pair bound: no consecutive pair passes 128, so the
    saturating model equals the exact product for every u8 activation (255 is the worst)."""
    rng = np.random.default_rng(1)
    w = rng.standard_normal((96, 24)) * rng.uniform(0.1, 3.0, 24)  # columns of very different range
    w[10, 3] = w[11, 3] = 9.0  # two large weights side by side: what full range would saturate on
    r = pair_range(w, 1, k_axis("MatMul", w, 1))
    q = np.clip(np.round(w / (r / 127)), -127, 127).astype(np.int8)
    assert max_pair_sum(q, 1, 0) <= PAIR_LIMIT
    worst = np.full((3, 96), 255)
    np.testing.assert_array_equal(gemm_pairs_saturating(worst, q), gemm_exact(worst, q))
    full = np.clip(np.round(w / (np.abs(w).max(0) / 127)), -127, 127).astype(np.int8)
    assert saturation(worst, full)["pairs"] > 0 and saturation(worst, q) == {"pairs": 0.0, "sqnr_db": float("inf")}


def test_conv_weights_are_bounded_over_any_pair():
    rng = np.random.default_rng(2)
    w = rng.standard_normal((8, 4, 3))  # (Cout, Cin, k)
    r = pair_range(w, 0, None)
    top2 = np.sort(np.abs(w).reshape(8, -1), 1)[:, -2:].sum(1)
    np.testing.assert_allclose(r, top2)
    q = np.round(w / (r / 127)[:, None, None]).astype(np.int64)
    flat = np.abs(q).reshape(8, -1)
    assert (np.sort(flat, 1)[:, -2:].sum(1) <= PAIR_LIMIT).all()


def _quantized(tmp_path, tiny_model, scheme):
    from edgekit.quantize import graph as qgraph
    from edgekit.quantize import ptq
    from edgekit.quantize.calibrate import calibration_reader

    cfg = QuantizeConfig(scheme=scheme)
    plan = qgraph.analyse_graph(tiny_model, time_input="t")
    chosen = qgraph.select_nodes(plan, cfg)[0]
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
            if dq.op_type == "DequantizeLinear" and inits.get(dq.input[0]) is not None and inits[dq.input[0]].dtype == np.int8:
                trans_b = any(a.name == "transB" and a.i for a in node.attribute)
                yield node.name, inits[dq.input[0]], k_axis(node.op_type, inits[dq.input[0]], 1, trans_b)


def test_the_pair_scheme_writes_weights_the_avx2_kernel_cannot_saturate(tmp_path, tiny_model):
    """Through ORT's quantizer (TensorQuantOverrides): every int8 weight of the u8s8-pair model
    keeps its pairs <= 128; the full-range u8s8 model of the same graph does not."""
    bounded = dict((n, max_pair_sum(q, q.ndim - 1 if k == 0 else 0, k)) for n, q, k in _int8_weights(_quantized(tmp_path, tiny_model, "u8s8-pair")))
    full = dict((n, max_pair_sum(q, q.ndim - 1 if k == 0 else 0, k)) for n, q, k in _int8_weights(_quantized(tmp_path, tiny_model, "u8s8")))
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
    monkeypatch.setattr(HostFacts, "detect", classmethod(lambda cls, root="/": HostFacts("x86_64", "EPYC", None, None, False, ("avx2",))))
    assert QuantizeConfig().arithmetic == "avx2" and QuantizeConfig().settings.scheme == "u8s8-pair"
    assert QuantizeConfig(profile="trt").settings.scheme == ""  # TensorRT's own rules, not a CPU's
    assert QuantizeConfig(scheme="u8u8").settings.weight_type == "QUInt8"
    assert scheme_for("amx").name == "u8s8"


CPUINFO = {
    "AMD EPYC 7B12 (Zen 2)": ("flags : fpu sse sse2 avx avx2 fma bmi2", "avx2"),
    "Xeon Skylake-SP": ("flags : avx avx2 avx512f avx512bw avx512dq", "avx512"),
    "Xeon Cascade Lake": ("flags : avx2 avx512f avx512bw avx512_vnni", "avx512-vnni"),
    "Core i7-12700 (Alder Lake)": ("flags : avx2 avx_vnni", "avx-vnni"),
    "Xeon Sapphire Rapids": ("flags : avx2 avx512f avx512_vnni avx512_bf16 amx_bf16 amx_tile amx_int8", "amx"),
    "Atom N270": ("flags : sse sse2 ssse3", "x86-64"),
}


@pytest.mark.parametrize("cpu", list(CPUINFO))
def test_isa_class_from_x86_flags(cpu):
    from edgekit.host import cpu_isa

    text, want = CPUINFO[cpu]
    assert isa_class("x86_64", cpu_isa(text)) == want


def test_isa_class_from_arm_features():
    from edgekit.host import cpu_isa

    assert isa_class("aarch64", cpu_isa("Features : fp asimd evtstrm aes pmull sha1 sha2 crc32 atomics fphp asimdhp cpuid asimdrdm lrcpc dcpop asimddp")) == "arm64-dotprod"
    assert isa_class("aarch64", cpu_isa("Features : fp asimd asimddp sve i8mm bf16")) == "arm64-i8mm"
    assert isa_class("aarch64", cpu_isa("Features : fp asimd")) == "arm64"
    assert isa_class("riscv64", ()) == "unknown"
