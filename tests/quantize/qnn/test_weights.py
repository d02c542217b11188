"""The qnn profile's weights: MatMul weights int8 per output channel (the HTP backend runs them,
with no CPU fallback, closer to FP32 than uint8 per tensor where columns differ in scale), and a
Gather's table promoted with its output (ORT ties the two: an override on the output alone was
dropped, leaving the flow demo's token embedding at 8 bit with every other tensor at 16)."""

from __future__ import annotations

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
pytest.importorskip("onnxruntime_qnn")

from onnx import TensorProto, helper, numpy_helper  # noqa: E402

from edgekit.quantize.calibrate import calibration_reader  # noqa: E402
from edgekit.quantize.qnn.graph import (  # noqa: E402
    activation_bits,
    activation_tensors,
    gather_tables,
    matmul_weights,
    quantize_qnn_model,
)
from edgekit.runtimes.qnn import QnnRuntime  # noqa: E402

V, D, L = 12, 16, 6


def _graph(path):
    """tokens int64[1,L] -> Gather(table) -> MatMul(W, columns 1x..1000x apart) -> Relu -> MatMul(W2)."""
    rng = np.random.default_rng(0)
    table = rng.standard_normal((V, D)).astype(np.float32)
    table[0] *= 20  # one large row: a per-tensor table scale fits it, the other rows lose bits
    w = (rng.standard_normal((D, D)) * np.logspace(-3, 0, D)[None, :]).astype(np.float32)
    w2 = (rng.standard_normal((D, D)) / np.logspace(-3, 0, D)[:, None] / D).astype(np.float32)
    nodes = [
        helper.make_node("Gather", ["table", "tokens"], ["emb"], name="embed"),
        helper.make_node("MatMul", ["emb", "W"], ["h"], name="fc1"),
        helper.make_node("Relu", ["h"], ["r"], name="act"),
        helper.make_node("MatMul", ["r", "W2"], ["y"], name="fc2"),
    ]
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("tokens", TensorProto.INT64, [1, L])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, L, D])],
        [numpy_helper.from_array(a, n) for a, n in ((table, "table"), (w, "W"), (w2, "W2"))],
    )
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)]), str(path))
    return path


def _feeds(n, seed):
    rng = np.random.default_rng(seed)
    return [{"tokens": rng.integers(0, V, (1, L)).astype(np.int64)} for _ in range(n)]


def _types(path):
    """{tensor quantized by a Q or DQ node: (zero-point dtype, scale shape)}."""
    model = onnx.load(str(path))
    inits = {i.name: i for i in model.graph.initializer}
    out = {}
    for node in model.graph.node:
        if node.op_type in ("QuantizeLinear", "DequantizeLinear") and len(node.input) > 2:
            key = node.input[0].removesuffix("_quantized") if node.input[0] in inits else node.input[0]
            out[key] = (inits[node.input[2]].data_type, tuple(inits[node.input[1]].dims))
    return out


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    root = tmp_path_factory.mktemp("qnn-w")
    fp32 = _graph(root / "fp32.onnx")
    cal = calibration_reader(_feeds(8, seed=1))
    return {
        "fp32": fp32,
        "pc": quantize_qnn_model(fp32, root / "pc.onnx", cal),
        "pt": quantize_qnn_model(fp32, root / "pt.onnx", cal, per_channel=False),
    }


def test_matmul_weights_are_int8_per_output_channel(built):
    pc, pt = _types(built["pc"]), _types(built["pt"])
    for w in ("W", "W2"):
        assert pc[w] == (TensorProto.INT8, (D,)), pc[w]
        assert pt[w] == (TensorProto.UINT8, ()), pt[w]
    assert pc["table"][0] == TensorProto.UINT8  # a Gather table keeps one scale: its output shares it


def test_per_channel_weights_run_on_the_htp_closer_to_fp32(built):
    ref = ort.InferenceSession(str(built["fp32"]), providers=["CPUExecutionProvider"])

    def snr(model):
        with QnnRuntime(model) as rt:  # CPU fallback off: a refused node would raise here
            assert rt.providers_used[0] == "QNNExecutionProvider"
            sig = noise = 0.0
            for feed in _feeds(4, seed=7):
                want, got = ref.run(None, feed)[0], rt.run(feed)["y"]
                sig, noise = sig + float(np.sum(want**2)), noise + float(np.sum((want - got) ** 2))
        return 10 * np.log10(sig / noise)

    per_channel, per_tensor = snr(built["pc"]), snr(built["pt"])
    assert per_channel > per_tensor + 3, (per_channel, per_tensor)


def test_promoting_a_gather_output_promotes_its_table(built, tmp_path):
    fp32 = built["fp32"]
    assert gather_tables(fp32) == {"table": "emb"} and set(matmul_weights(fp32)) == {"W", "W2"}
    q = quantize_qnn_model(fp32, tmp_path / "emb16.onnx", calibration_reader(_feeds(8, seed=1)), ["emb"])
    types = _types(q)
    assert types["table"][0] == TensorProto.UINT16 and types["emb"][0] == TensorProto.UINT16
    acts = activation_tensors(built["pc"])
    assert activation_bits(q, acts) == {t: 16 if t == "emb" else 8 for t in acts}  # what the graph holds
    # every activation and weight promoted: nothing is left at 8 bit
    everything = activation_tensors(built["pc"]) + ["W", "W2", "table"]
    q = quantize_qnn_model(fp32, tmp_path / "all16.onnx", calibration_reader(_feeds(8, seed=1)), everything)
    assert {t: v[0] for t, v in _types(q).items() if v[0] in (TensorProto.UINT8, TensorProto.INT8)} == {}


def _sinusoid(path):
    """t float[1] -> angle = t·1000·freqs (geometric, 1 .. 1e-4) -> [sin, cos] -> MatMul: the flow
    models' time embedding."""
    half = 16
    freqs = np.exp(-np.log(10_000) * np.arange(half) / half).astype(np.float32)[None, :]
    w = np.random.default_rng(0).standard_normal((2 * half, D)).astype(np.float32) / 4
    nodes = [
        helper.make_node("Unsqueeze", ["t", "axes"], ["t1"], name="unsq"),
        helper.make_node("Mul", ["t1", "freqs"], ["a0"], name="times_freqs"),
        helper.make_node("Mul", ["a0", "k"], ["angle"], name="times_1000"),
        helper.make_node("Sin", ["angle"], ["s"], name="sin"),
        helper.make_node("Cos", ["angle"], ["c"], name="cos"),
        helper.make_node("Concat", ["s", "c"], ["emb"], name="cat", axis=-1),
        helper.make_node("MatMul", ["emb", "W"], ["y"], name="fc"),
    ]
    inits = [
        numpy_helper.from_array(np.array([1], np.int64), "axes"),
        numpy_helper.from_array(freqs, "freqs"),
        numpy_helper.from_array(np.array(1000, np.float32), "k"),
        numpy_helper.from_array(w, "W"),
    ]
    graph = helper.make_graph(
        nodes,
        "time",
        [helper.make_tensor_value_info("t", TensorProto.FLOAT, [1])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, D])],
        inits,
    )
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)]), str(path))
    return path


def test_the_time_angle_and_its_frequency_table_go_to_16_bit(tmp_path):
    from edgekit.quantize.qnn.graph import time_angle_tensors

    fp32 = _sinusoid(tmp_path / "time.onnx")
    angle = time_angle_tensors(fp32, "t")
    assert angle == ["t", "t1", "a0", "freqs", "angle", "k"]  # not sin/cos, nor what follows them
    ts = [{"t": np.array([v], np.float32)} for v in np.linspace(0.01, 0.99, 9)]
    plain = quantize_qnn_model(fp32, tmp_path / "q8.onnx", calibration_reader(ts))
    ruled = quantize_qnn_model(fp32, tmp_path / "q16.onnx", calibration_reader(ts), angle[1:])
    assert _types(ruled)["freqs"][0] == TensorProto.UINT16 and _types(ruled)["angle"][0] == TensorProto.UINT16
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_BASIC  # QDQ as written
    ref = ort.InferenceSession(str(fp32), providers=["CPUExecutionProvider"])

    def snr(model):
        sess = ort.InferenceSession(str(model), so, providers=["CPUExecutionProvider"])
        want = np.concatenate([ref.run(None, f)[0] for f in ts])
        got = np.concatenate([sess.run(None, f)[0] for f in ts])
        return 10 * np.log10(np.sum(want**2) / np.sum((want - got) ** 2))

    eight, sixteen = snr(plain), snr(ruled)
    assert sixteen > eight + 10, (eight, sixteen)


def test_conv_weights_are_int8_per_output_channel_and_run_on_the_htp(tmp_path):
    """A Conv weight whose output channels differ 1000x in scale: per channel (axis 0) on the HTP
    backend with CPU fallback off, and closer to FP32 than one uint8 scale."""
    rng = np.random.default_rng(3)
    w = (rng.standard_normal((D, D, 3)) * np.logspace(-3, 0, D)[:, None, None]).astype(np.float32)
    graph = helper.make_graph(
        [helper.make_node("Conv", ["x", "K", "bias"], ["y"], name="conv", pads=[1, 1])],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, D, L])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, D, L])],
        [numpy_helper.from_array(w, "K"), numpy_helper.from_array(np.zeros(D, np.float32), "bias")],
    )
    fp32 = tmp_path / "conv.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)]), str(fp32))
    feeds = [{"x": np.random.default_rng(i).standard_normal((1, D, L)).astype(np.float32)} for i in range(6)]
    # y at 16 bit: its 8-bit step would round the small channels away whatever their weights.
    pc = quantize_qnn_model(fp32, tmp_path / "pc.onnx", calibration_reader(feeds), ["y"])
    pt = quantize_qnn_model(fp32, tmp_path / "pt.onnx", calibration_reader(feeds), ["y"], per_channel=False)
    assert _types(pc)["K"] == (TensorProto.INT8, (D,)) and _types(pt)["K"] == (TensorProto.UINT8, ())
    ref = ort.InferenceSession(str(fp32), providers=["CPUExecutionProvider"])

    def snr(model):
        with QnnRuntime(model) as rt:  # CPU fallback off: a refused node would raise here
            assert rt.providers_used[0] == "QNNExecutionProvider"
            pairs = [(ref.run(None, f)[0], rt.run(f)["y"].copy()) for f in feeds]  # the runtime reuses its outputs
        small = slice(0, D // 2)  # the small channels: where one scale for all costs the bits
        return 10 * np.log10(
            sum(float(np.sum(a[:, small] ** 2)) for a, _ in pairs)
            / sum(float(np.sum((a[:, small] - b[:, small]) ** 2)) for a, b in pairs)
        )

    assert snr(pc) > snr(pt) + 10
