"""edgekit's graph changes for ONNX Runtime (tanh GELU -> com.microsoft.FastGelu, Mish -> its logistic form)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from tests.runtimes.conftest import save_model

onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

from edgekit.runtimes.ort import OrtOptions, OrtRuntime  # noqa: E402
from edgekit.runtimes.ort_fusions import CPU_DISABLED_OPTIMIZERS, fuse_fast_gelu, graph_changes  # noqa: E402

SHAPE = [2, 3, 8]


def _scalar(name: str, value: float):
    return numpy_helper.from_array(np.array(value, dtype=np.float32), name)


def gelu_chain(prefix: str, x: str, out: str, *, swap: bool = False, constant_nodes: bool = False):
    """The exporter's tanh-GELU: x·(0.5·(1 + tanh(√(2/π)·(x + 0.044715·x³)))); ``swap`` flips the
    operand order of every commutative node, ``constant_nodes`` gives the constants as Constant ops."""
    consts = {"three": 3.0, "c": 0.044715, "k": math.sqrt(2 / math.pi), "one": 1.0, "half": 0.5}
    names = {k: f"{prefix}_{k}" for k in consts}
    nodes, inits = [], []
    for k, v in consts.items():
        if constant_nodes:
            nodes.append(helper.make_node("Constant", [], [names[k]], value=_scalar(names[k], v)))
        else:
            inits.append(_scalar(names[k], v))

    def pair(a, b):
        return [b, a] if swap else [a, b]

    p = lambda s: f"{prefix}_{s}"  # noqa: E731
    nodes += [
        helper.make_node("Pow", [x, names["three"]], [p("cube")]),
        helper.make_node("Mul", pair(names["c"], p("cube")), [p("ccube")]),
        helper.make_node("Add", pair(x, p("ccube")), [p("inner")]),
        helper.make_node("Mul", pair(names["k"], p("inner")), [p("scaled")]),
        helper.make_node("Tanh", [p("scaled")], [p("tanh")]),
        helper.make_node("Add", pair(p("tanh"), names["one"]), [p("onep")]),
        helper.make_node("Mul", pair(names["half"], p("onep")), [p("halfp")]),
        helper.make_node("Mul", pair(x, p("halfp")), [out]),
    ]
    return nodes, inits


def _model(tmp_path, name, *, swap=False, constant_nodes=False, leak=False):
    """x -> Relu -> GELU -> Neg -> y; ``leak`` also exposes the tanh output as a graph output."""
    nodes = [helper.make_node("Relu", ["x"], ["h"])]
    chain, inits = gelu_chain("g", "h", "gelu", swap=swap, constant_nodes=constant_nodes)
    nodes += chain + [helper.make_node("Neg", ["gelu"], ["y"])]
    outputs = [helper.make_tensor_value_info("y", TensorProto.FLOAT, SHAPE)]
    if leak:
        outputs.append(helper.make_tensor_value_info("g_tanh", TensorProto.FLOAT, SHAPE))
    inputs = [helper.make_tensor_value_info("x", TensorProto.FLOAT, SHAPE)]
    return save_model(tmp_path / f"{name}.onnx", nodes, inputs, outputs, inits)


def _gelu_tanh(x):
    return 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x**3)))


@pytest.mark.parametrize("swap", [False, True])
@pytest.mark.parametrize("constant_nodes", [False, True])
def test_chain_becomes_one_fast_gelu_with_the_same_output(tmp_path, swap, constant_nodes):
    path = _model(tmp_path, "gelu", swap=swap, constant_nodes=constant_nodes)
    model = onnx.load(str(path))
    assert fuse_fast_gelu(model) == 1
    ops = [n.op_type for n in model.graph.node if n.op_type != "Constant"]
    assert ops == ["Relu", "FastGelu", "Neg"]
    assert any(o.domain == "com.microsoft" for o in model.opset_import)
    assert not model.graph.initializer  # the chain's constants went with it

    x = np.linspace(-4, 4, int(np.prod(SHAPE)), dtype=np.float32).reshape(SHAPE)
    with OrtRuntime(path, OrtOptions(intra_op_threads=1)) as rt:
        assert rt.fusions == {"FastGelu": 1}
        y = rt.run({"x": x})["y"]
    np.testing.assert_allclose(y, -_gelu_tanh(np.maximum(x, 0)), atol=1e-5)


def test_chain_whose_intermediate_is_read_elsewhere_is_left_alone(tmp_path):
    model = onnx.load(str(_model(tmp_path, "leak", leak=True)))
    assert fuse_fast_gelu(model) == 0
    assert sum(n.op_type == "Tanh" for n in model.graph.node) == 1


def test_wrong_constant_is_not_a_gelu(tmp_path):
    model = onnx.load(str(_model(tmp_path, "near")))
    for init in model.graph.initializer:
        if init.name == "g_c":
            init.CopyFrom(_scalar("g_c", 0.05))  # not 0.044715: some other curve
    assert fuse_fast_gelu(model) == 0


def test_runtime_fuses_in_memory_only_for_cpu_and_when_asked(tmp_path):
    path = _model(tmp_path, "gelu")
    before = path.read_bytes()
    with OrtRuntime(path, OrtOptions(intra_op_threads=1)) as rt:
        assert rt.fusions == {"FastGelu": 1}
        assert rt.disabled_optimizers == CPU_DISABLED_OPTIMIZERS
    assert path.read_bytes() == before  # the file on disk is never rewritten
    with OrtRuntime(path, OrtOptions(contrib_fusions=False, disabled_optimizers=())) as rt:
        assert rt.fusions == {} and rt.disabled_optimizers == ()


def test_demo_masked_graph_gets_its_four_gelus_fused(tmp_path):
    """The exporter's real GELU pattern (not just our hand-written one) is matched."""
    pytest.importorskip("torch")
    from edgekit.bundle import Bundle
    from edgekit.export.to_bundle import export_bundle
    from edgekit.models import load_spec

    export_bundle(load_spec("masked-demo", batch=1), tmp_path / "m", source="masked-demo")
    bundle = Bundle.load(tmp_path / "m")
    feeds = {"tokens": np.full((1, 64), 64, np.int64), "class_id": np.array([3])}
    with (
        OrtRuntime(bundle.path_of("fp32"), OrtOptions(intra_op_threads=1)) as fused,
        OrtRuntime(bundle.path_of("fp32"), OrtOptions(intra_op_threads=1, contrib_fusions=False)) as plain,
    ):
        assert fused.fusions == {"FastGelu": 4}
        np.testing.assert_allclose(fused.run(feeds)["logits"], plain.run(feeds)["logits"], atol=1e-4)


def test_a_model_with_external_weights_is_fused_and_reads_them_from_its_folder(tmp_path, monkeypatch):
    """Step-bucket graphs keep their weights in one shared file: the fusion still applies (a
    bucketed model without it decoded 1.13x slower than its one-scale twin with it), and the
    session, given the fused graph from memory, reads the weights beside the model file."""
    from onnx.external_data_helper import convert_model_to_external_data

    rng = np.random.default_rng(0)
    w = rng.standard_normal((8, 8)).astype(np.float32)
    nodes = [helper.make_node("MatMul", ["x", "W"], ["h"])]
    chain, inits = gelu_chain("g", "h", "y")
    model = helper.make_model(
        helper.make_graph(
            nodes + chain,
            "g",
            [helper.make_tensor_value_info("x", TensorProto.FLOAT, SHAPE)],
            [helper.make_tensor_value_info("y", TensorProto.FLOAT, SHAPE)],
            [numpy_helper.from_array(w, "W"), *inits],
        ),
        opset_imports=[helper.make_opsetid("", 17)],
    )
    convert_model_to_external_data(model, all_tensors_to_one_file=True, location="weights.bin", size_threshold=64)
    (tmp_path / "m").mkdir()
    onnx.save(model, str(tmp_path / "m" / "model.onnx"))
    assert model.graph.initializer[0].data_location == TensorProto.EXTERNAL  # W; the scalars stay inline
    monkeypatch.chdir(tmp_path)  # not the model's folder: the weights must resolve against the model's
    x = rng.standard_normal(SHAPE).astype(np.float32)
    with OrtRuntime(tmp_path / "m" / "model.onnx", OrtOptions(intra_op_threads=1)) as rt:
        assert rt.fusions == {"FastGelu": 1}
        np.testing.assert_allclose(rt.run({"x": x})["y"], _gelu_tanh(x @ w), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize(
    "providers, fusions, disabled",
    [
        (["CPUExecutionProvider"], True, CPU_DISABLED_OPTIMIZERS),
        (["CUDAExecutionProvider", "CPUExecutionProvider"], True, ()),  # SkipLayerNorm is CUDA's fast path
        (["NnapiExecutionProvider", "CPUExecutionProvider"], False, ()),  # NNAPI runs no contrib op: standard ONNX
        (
            ["QNNExecutionProvider", "NnapiExecutionProvider", "XnnpackExecutionProvider", "CPUExecutionProvider"],
            False,
            (),
        ),
    ],
)
def test_one_rule_says_what_a_provider_list_gets(providers, fusions, disabled):
    """The runtime (in memory) and `edgekit build` (in the engine file) ask the same rule."""
    changes = graph_changes(providers)
    assert changes.contrib_fusions is fusions and changes.disabled_optimizers == disabled


def test_a_built_engines_recorded_options_open_it_as_recorded_with_nothing_changed_in_memory(tmp_path):
    """A built engine's file carries the changes: its recorded options open it without the
    in-memory fusion or optimizer list, at the recorded level, with the recorded config entries
    set as an app sets them (here the entry that keeps ORT's SkipLayerNormFusion off)."""
    from edgekit.runtimes.ort_fusions import DISABLE_OPTIMIZERS_ENTRY, engine_session_options

    nodes = [
        helper.make_node("Add", ["x", "r"], ["h"]),
        helper.make_node("LayerNormalization", ["h", "s", "b"], ["y"], axis=-1),
    ]
    inputs = [helper.make_tensor_value_info(n, TensorProto.FLOAT, SHAPE) for n in ("x", "r")]
    inits = [
        numpy_helper.from_array(np.full(8, 2, np.float32), "s"),
        numpy_helper.from_array(np.ones(8, np.float32), "b"),
    ]
    path = save_model(
        tmp_path / "ln.onnx", nodes, inputs, [helper.make_tensor_value_info("y", TensorProto.FLOAT, SHAPE)], inits
    )
    recorded = {
        "graph_optimization_level": "extended",
        "config_entries": {DISABLE_OPTIMIZERS_ENTRY: "SkipLayerNormFusion"},
    }
    fields = engine_session_options(recorded)
    assert fields == {
        "graph_optimization": "extended",
        "contrib_fusions": False,
        "disabled_optimizers": (),
        "session_config": ((DISABLE_OPTIMIZERS_ENTRY, "SkipLayerNormFusion"),),
    }
    rng = np.random.default_rng(0)
    feeds = {n: rng.standard_normal(SHAPE).astype(np.float32) for n in ("x", "r")}
    h = feeds["x"] + feeds["r"]
    want = (h - h.mean(-1, keepdims=True)) / np.sqrt(h.var(-1, keepdims=True) + 1e-5) * 2 + 1
    ops = {}
    for name, entries in (("recorded", fields["session_config"]), ("without", ())):
        saved = tmp_path / f"{name}.onnx"
        options = OrtOptions(
            intra_op_threads=1, **{**fields, "session_config": entries}, optimized_model_path=str(saved)
        )
        with OrtRuntime(path, options) as rt:
            assert rt.fusions == {} and rt.disabled_optimizers == ()
            np.testing.assert_allclose(rt.run(feeds)["y"], want, atol=1e-4)
        ops[name] = [n.op_type for n in onnx.load(str(saved)).graph.node]
    assert ops["recorded"] == ["Add", "LayerNormalization"]
    assert ops["without"] == ["SkipLayerNormalization"]  # ORT's own fusion ran: the entry is what kept it off


def _stacked_cache_model(tmp_path):
    """An AR step's cache read layer by layer: cache float32[3, 2, 4] -> y_i = cache[i] + x, the
    three Gathers ORT's GatherSliceToSplitFusion turns into one Split of every layer at once."""
    nodes, outputs, inits = [], [], []
    for i in range(3):
        inits.append(numpy_helper.from_array(np.array(i, np.int64), f"i{i}"))
        nodes.append(helper.make_node("Gather", ["cache", f"i{i}"], [f"layer{i}"], axis=0))
        nodes.append(helper.make_node("Add", [f"layer{i}", "x"], [f"y{i}"]))
        outputs.append(helper.make_tensor_value_info(f"y{i}", TensorProto.FLOAT, [2, 4]))
    inputs = [
        helper.make_tensor_value_info("cache", TensorProto.FLOAT, [3, 2, 4]),
        helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 4]),
    ]
    return save_model(tmp_path / "cache.onnx", nodes, inputs, outputs, inits)


def test_a_cpu_session_reads_a_stacked_cache_layer_by_layer_not_split_at_once(tmp_path):
    """Each layer's slice made where it is read (a Gather each), not one Split that holds every
    layer's slice from the start of the forward (+96 MB a decode at GPT-2-medium size)."""
    path = _stacked_cache_model(tmp_path)
    ort = pytest.importorskip("onnxruntime")
    assert "GatherSliceToSplitFusion" in CPU_DISABLED_OPTIMIZERS

    def ops(saved):
        return [n.op_type for n in onnx.load(str(saved)).graph.node]

    # ORT on its own fuses the three Gathers (else this test would check nothing).
    so = ort.SessionOptions()
    so.optimized_model_filepath = str(tmp_path / "ort.onnx")
    ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"])
    assert ops(tmp_path / "ort.onnx").count("Split") == 1
    feeds = {"cache": np.arange(24, dtype=np.float32).reshape(3, 2, 4), "x": np.ones((2, 4), np.float32)}
    opts = OrtOptions(intra_op_threads=1, optimized_model_path=str(tmp_path / "edgekit.onnx"))
    with OrtRuntime(path, opts) as rt:
        out = rt.run(feeds)
    assert "Split" not in ops(tmp_path / "edgekit.onnx")
    assert ops(tmp_path / "edgekit.onnx").count("Gather") == 3
    for i in range(3):
        np.testing.assert_array_equal(out[f"y{i}"], feeds["cache"][i] + 1)


def _mish(x):
    x = x.astype(np.float64)
    return x * np.tanh(np.log1p(np.exp(x)))


def _mish_model(tmp_path, name, *, op=False, swap=False, leak=False, dtype=TensorProto.FLOAT):
    """x -> Neg -> Mish -> Neg -> y, Mish as the exporter's Softplus -> Tanh -> Mul (``swap``:
    Mul(tanh, x)) or the opset-18 ``Mish`` op (``op``); ``leak`` exposes the Tanh output."""
    nodes = [helper.make_node("Neg", ["x"], ["h"])]
    if op:
        nodes.append(helper.make_node("Mish", ["h"], ["m"]))
    else:
        mul = ["t", "h"] if swap else ["h", "t"]
        nodes += [
            helper.make_node("Softplus", ["h"], ["sp"]),
            helper.make_node("Tanh", ["sp"], ["t"]),
            helper.make_node("Mul", mul, ["m"]),
        ]
    nodes.append(helper.make_node("Neg", ["m"], ["y"]))
    outputs = [helper.make_tensor_value_info("y", dtype, SHAPE)]
    if leak:
        outputs.append(helper.make_tensor_value_info("t", dtype, SHAPE))
    inputs = [helper.make_tensor_value_info("x", dtype, SHAPE)]
    graph = helper.make_graph(nodes, name, inputs, outputs)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)], ir_version=8)
    onnx.save(model, str(tmp_path / f"{name}.onnx"))
    return tmp_path / f"{name}.onnx"


@pytest.mark.parametrize("form", ["chain", "swapped", "op"])
def test_mish_becomes_the_logistic_form_with_the_same_values(tmp_path, form):
    """x·tanh(softplus(x)) as s(2-s)/(2-s(2-s)), s = σ(x): the same output name and values (float32
    rounding) from -30 to 30, where σ saturates both ways, in the runtime's session."""
    from edgekit.runtimes.ort_fusions import apply_contrib_fusions, rewrite_mish

    path = _mish_model(tmp_path, form, op=form == "op", swap=form == "swapped")
    model = onnx.load(str(path))
    assert rewrite_mish(model) == 1
    ops = [n.op_type for n in model.graph.node]
    assert ops == ["Neg", "Sigmoid", "Sub", "Mul", "Sub", "Div", "Mul", "Neg"]
    assert not {"Softplus", "Tanh", "Mish"} & set(ops)
    assert apply_contrib_fusions(onnx.load(str(path))) == {"Mish": 1}

    x = np.linspace(-30, 30, int(np.prod(SHAPE)), dtype=np.float32).reshape(SHAPE)
    with OrtRuntime(path, OrtOptions(intra_op_threads=1)) as rt:
        assert rt.fusions == {"Mish": 1}
        y = rt.run({"x": x})["y"]
    np.testing.assert_allclose(y, -_mish(-x), rtol=1e-5, atol=1e-5)


def test_a_mish_whose_tanh_is_read_elsewhere_or_not_float32_is_left_alone(tmp_path):
    from edgekit.runtimes.ort_fusions import rewrite_mish

    assert rewrite_mish(onnx.load(str(_mish_model(tmp_path, "leak", leak=True)))) == 0
    half = onnx.load(str(_mish_model(tmp_path, "half", op=True, dtype=TensorProto.FLOAT16)))
    half.graph.value_info.append(helper.make_tensor_value_info("h", TensorProto.FLOAT16, SHAPE))
    assert rewrite_mish(half) == 0  # the constant 2 is float32
