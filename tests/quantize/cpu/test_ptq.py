"""Node roles, selection and the QDQ graphs ORT writes for each profile (tiny hand-built graph)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from edgekit.arithmetic import quantized_nodes
from edgekit.errors import UsageError
from edgekit.quantize.config import QuantizeConfig
from tests.quantize.conftest import tiny_feeds

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")

from edgekit.quantize import graph as qgraph  # noqa: E402
from edgekit.quantize.calibrate import calibration_reader  # noqa: E402
from edgekit.quantize.cpu import ptq, select, structure  # noqa: E402


def test_roles_attention_core_time_embedding_and_flops(tiny_model):
    plan = qgraph.analyse_graph(tiny_model, time_input="t")
    roles = {n.name: n.role for n in plan.nodes}
    assert [n for n, r in roles.items() if r == "attention-core"] == ["qk", "av"]
    assert {n for n, r in roles.items() if r == "weighted"} == {"q_proj", "k_proj", "proj", "ada_a", "ada_b"}
    # The embedding ends at the tensor both ada Gemms read; they themselves are ordinary layers.
    assert {n for n, r in roles.items() if r == "time-embedding"} == {
        "t_unsq",
        "t_scale",
        "sin",
        "cos",
        "concat",
        "tile",
        "time_mlp",
    }
    by = plan.by_name()
    assert by["q_proj"].flops == 2 * 2 * 4 * 16 * 16 and by["q_proj"].rows == 8
    assert by["qk"].flops == 2 * 2 * 4 * 4 * 16
    assert by["ada_a"].rows == 2
    assert plan.matmul_flops(["q_proj", "proj"]) == 2 * by["q_proj"].flops


def test_default_selection_keeps_core_and_time_embedding_float(tiny_model):
    plan = qgraph.analyse_graph(tiny_model, time_input="t")
    chosen, floated = select.select_nodes(plan, QuantizeConfig())
    assert sorted(chosen) == ["ada_a", "ada_b", "k_proj", "proj", "q_proj"]
    assert floated["qk"].startswith("attention core") and floated["av"].startswith("attention core")
    assert floated["time_mlp"].startswith("flow time embedding")
    naive = QuantizeConfig(float_attention_core=False, float_time_embedding=False)
    assert sorted(select.select_nodes(plan, naive)[0]) == [
        "ada_a",
        "ada_b",
        "av",
        "k_proj",
        "proj",
        "q_proj",
        "qk",
        "time_mlp",
    ]


def test_exclude_by_name_op_type_and_module_path(tiny_model):
    plan = qgraph.analyse_graph(tiny_model, time_input="t", labels={"ada_a": "blocks.0.ada", "ada_b": "blocks.1.ada"})
    chosen, floated = select.select_nodes(plan, QuantizeConfig(exclude=("proj", "blocks.0", "Gemm")))
    assert sorted(chosen) == ["k_proj", "q_proj"]
    assert floated["proj"] == "excluded by --exclude proj"
    assert floated["ada_a"] == "excluded by --exclude blocks.0"
    assert floated["ada_b"] == "excluded by --exclude Gemm"
    with pytest.raises(UsageError, match="matches no node"):
        select.select_nodes(plan, QuantizeConfig(exclude=("blocks.9",)))


def _quantize(tiny_model: Path, tmp_path: Path, profile: str, nodes=None, weight_only=()) -> tuple[Path, list[str]]:
    cfg = QuantizeConfig(profile=profile)
    plan = qgraph.analyse_graph(tiny_model, time_input="t")
    chosen = nodes if nodes is not None else select.select_nodes(plan, cfg)[0]
    out = tmp_path / f"{profile}.onnx"
    ptq.quantize_model(tiny_model, out, calibration_reader(tiny_feeds(6)), chosen, cfg, plan, weight_only=weight_only)
    return out, chosen


def _qdq_by_input(struct):
    return {q["input"]: q for q in struct["qdq"]}


def test_trt_profile_every_zero_point_int8_zero_weights_per_channel_no_bias(tiny_model, tmp_path):
    out, chosen = _quantize(tiny_model, tmp_path, "trt")
    struct = structure.qdq_structure(out)
    assert struct["qdq"], "nothing was quantized"
    for q in struct["qdq"]:
        assert q["zero_point_dtype"] == "int8", q
        assert q["zero_point_max_abs"] == 0, q
        assert q["quantized_dtype"] in (None, "int8"), q
    weights = [q for q in struct["qdq"] if q["constant_input"]]
    assert len(weights) == 5  # Wq, Wk, Wo, Wa, Wb: one DQ each, no bias DQ
    assert all(q["scale_size"] == 16 and q["axis"] == 1 for q in weights)  # per output channel of [K, N]
    assert not any(q["input"].startswith("bo") for q in struct["qdq"])
    assert structure.trt_violations(out) == []
    # Q/DQ sit on inputs of weighted ops only: activations h, a2, e (shared by q/k and ada_a/b).
    assert sorted(q["input"] for q in struct["qdq"] if q["op"] == "QuantizeLinear") == ["a2", "e", "h"]
    assert struct["ops"]["QuantizeLinear"] == 3 and struct["ops"]["DequantizeLinear"] == 3 + 5
    assert set(chosen) <= set(struct["quantized_nodes"])


def test_cpu_profile_u8_activations_and_excluded_nodes_compute_in_float(tiny_model, tmp_path):
    out, chosen = _quantize(tiny_model, tmp_path, "cpu", nodes=["q_proj", "proj"], weight_only=["time_mlp"])
    struct = structure.qdq_structure(out)
    acts = [q for q in struct["qdq"] if q["op"] == "QuantizeLinear"]
    assert {q["zero_point_dtype"] for q in acts} == {"uint8"}  # asymmetric u8: ORT CPU's u8s8 kernels
    assert sorted(q["input"] for q in acts) == ["a2", "h"]  # only the INT8 nodes' activations
    model = onnx.load(str(out))
    by_name = {n.name: n for n in model.graph.node}
    float_plan = {n.name: n for n in qgraph.analyse_graph(tiny_model, time_input="t").nodes}
    for name in ("k_proj", "qk", "av", "ada_a", "ada_b", "time_mlp", "sin", "softmax", "ln"):
        # Activations arrive unquantized: the very tensors of the float graph.
        for a in float_plan[name].activations:
            assert a in by_name[name].input, (name, a, list(by_name[name].input))
    assert set(quantized_nodes(model)) == {"q_proj", "proj"}
    # The time MLP (kept float by rule) stores int8 weights that a DQ feeds it in float; other
    # float nodes keep float weights.
    weights = {q["input"]: q for q in struct["qdq"] if q["constant_input"]}
    assert weights["Wt_weight_only_quantized"]["quantized_dtype"] == "int8"
    assert (
        weights["Wt_weight_only_quantized"]["zero_point_max_abs"] == 0
        and weights["Wt_weight_only_quantized"]["axis"] == 1
    )
    assert "Wk" in {i.name for i in model.graph.initializer} and "Wa" in {i.name for i in model.graph.initializer}
    assert structure.trt_violations(out), "u8 zero points must break the TensorRT rules"


def test_int8_output_is_close_to_float(tiny_model, tmp_path):
    out, _ = _quantize(tiny_model, tmp_path, "cpu")
    ref = ort.InferenceSession(str(tiny_model), providers=["CPUExecutionProvider"])
    q = ort.InferenceSession(str(out), providers=["CPUExecutionProvider"])
    feed = tiny_feeds(1, seed=7)[0]
    a, b = ref.run(None, feed)[0], q.run(None, feed)[0]
    snr = 10 * np.log10(np.sum(a**2) / np.sum((a - b) ** 2))
    assert 25 < snr < 80, snr  # quantized (not bit-exact) and still accurate


def test_empty_selection_writes_the_float_graph(tiny_model, tmp_path):
    out, _ = _quantize(tiny_model, tmp_path, "trt", nodes=[])
    assert structure.qdq_structure(out)["qdq"] == []
    out, _ = _quantize(tiny_model, tmp_path, "cpu", nodes=[], weight_only=["time_mlp"])  # cpu: weight-only DQ
    assert [q["op"] for q in structure.qdq_structure(out)["qdq"]] == ["DequantizeLinear"]


def test_module_labels_from_export_metadata(quant_bundles):
    from edgekit.bundle import Bundle
    from edgekit.quantize.names import module_labels

    labels = module_labels(Bundle.load(quant_bundles["masked"]).path_of("fp32"))
    assert "head" in labels.values()
    assert "blocks.0.attn.qkv" in labels.values()


def test_entropy_calibration_clips_where_minmax_does_not_and_prints_nothing(tiny_model, tmp_path, capsys):
    plan = qgraph.analyse_graph(tiny_model, time_input="t")
    scales = {}
    for method in ("minmax", "entropy"):
        cfg = QuantizeConfig(method=method)
        reader, cache, out = calibration_reader(tiny_feeds(8)), tmp_path / f"{method}.json", tmp_path / f"{method}.onnx"
        assert ptq.calibrate(tiny_model, reader, cfg, cache)
        ptq.quantize_model(
            tiny_model, out, reader, select.select_nodes(plan, cfg)[0], cfg, plan, calibration_cache=cache
        )
        model = onnx.load(str(out))
        inits = {i.name: onnx.numpy_helper.to_array(i) for i in model.graph.initializer}
        scales[method] = {
            n.input[0]: float(inits[n.input[1]]) for n in model.graph.node if n.op_type == "QuantizeLinear"
        }
    # LayerNorm output h has a long tail: the KL threshold (512 bins -> 128 levels) clips it.
    assert scales["entropy"]["h"] < 0.8 * scales["minmax"]["h"]
    assert capsys.readouterr().out == ""  # ORT's histogram calibrators print; --json must stay clean


@pytest.mark.parametrize("profile", ["trt", "cpu"])
def test_budget_fallback_node_is_weight_only_int8_weight_float_activation(tiny_model, tmp_path, profile):
    """A fallback (selected, then left out of ``nodes``) keeps an int8 per-channel weight behind a
    DQ (zero point 0) while its activation arrives unquantized, even where an INT8 sibling
    (k_proj) has Q/DQ on the very same tensor ``h``; ORT runs the result close to float."""
    plan = qgraph.analyse_graph(tiny_model, time_input="t")
    chosen = select.select_nodes(plan, QuantizeConfig(profile=profile))[0]
    nodes = [n for n in chosen if n != "q_proj"]
    out, _ = _quantize(tiny_model, tmp_path, profile, nodes=nodes, weight_only=chosen)
    model = onnx.load(str(out))
    producer = {o: n for n in model.graph.node for o in n.output}
    inits = {i.name: i for i in model.graph.initializer}
    q_proj = next(n for n in model.graph.node if n.name == "q_proj")
    assert q_proj.input[0] == "h"  # the float tensor itself, no DQ in between
    k_dq = producer[next(n for n in model.graph.node if n.name == "k_proj").input[0]]  # INT8 sibling on h
    assert k_dq.op_type == "DequantizeLinear" and producer[k_dq.input[0]].op_type == "QuantizeLinear"
    assert producer[k_dq.input[0]].input[0] == "h"
    dq = producer[q_proj.input[1]]
    assert dq.op_type == "DequantizeLinear" and dq.input[0] in inits
    weight = onnx.numpy_helper.to_array(inits[dq.input[0]])
    assert weight.dtype == np.int8 and np.abs(weight).max() == 127  # symmetric: the row max maps to 127
    zp = onnx.numpy_helper.to_array(inits[dq.input[2]])
    assert (
        zp.dtype == np.int8 and not zp.any() and onnx.numpy_helper.to_array(inits[dq.input[1]]).size == weight.shape[-1]
    )
    assert "Wq" not in inits  # no float copy of the weight is left
    assert structure.weight_only_nodes(model) == {"q_proj"}
    assert quantized_nodes(model) == set(nodes)
    if profile == "trt":
        assert structure.trt_violations(out) == []
    ref = ort.InferenceSession(str(tiny_model), providers=["CPUExecutionProvider"])
    q = ort.InferenceSession(str(out), providers=["CPUExecutionProvider"])
    feed = tiny_feeds(1, seed=7)[0]
    a, b = ref.run(None, feed)[0], q.run(None, feed)[0]
    snr = 10 * np.log10(np.sum(a**2) / np.sum((a - b) ** 2))
    assert 25 < snr < 80, snr


def test_excluded_node_stays_fully_float(tiny_model, tmp_path):
    """--exclude means float weights too: stage passes only rule floats and selected nodes as
    weight-only, so an excluded node never reaches ``weight_only``."""
    plan = qgraph.analyse_graph(tiny_model, time_input="t")
    chosen, floated = select.select_nodes(plan, QuantizeConfig(exclude=("q_proj",)))
    assert "q_proj" not in chosen and floated["q_proj"].startswith("excluded")
    out, _ = _quantize(tiny_model, tmp_path, "cpu", nodes=chosen, weight_only=chosen)
    model = onnx.load(str(out))
    assert "q_proj" not in structure.weight_only_nodes(model) and "Wq" in {i.name for i in model.graph.initializer}


def test_quantize_unbudgeted_of_a_side_file_model_keeps_its_weights_beside_the_output(tmp_path, monkeypatch):
    """The profiler's sweep quantizes its architecture-only models with ``quantize_unbudgeted``;
    one over 2 GB writes its INT8 weights to a side file in a scratch folder: the model at
    ``out_path`` must get them beside it, not read a file deleted with that folder."""
    from edgekit._sidefiles import external_data_locations
    from edgekit.runtimes.onnx_file import save_onnx

    helper = onnx.helper
    rng = np.random.default_rng(0)
    w1, w2 = (onnx.numpy_helper.from_array(rng.standard_normal((64, 64)).astype(np.float32), n) for n in ("w1", "w2"))
    graph = helper.make_graph(
        [
            helper.make_node("MatMul", ["x", "w1"], ["h"], name="fc1"),
            helper.make_node("MatMul", ["h", "w2"], ["y"], name="fc2"),
        ],
        "two",
        [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [4, 64])],
        [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [4, 64])],
        [w1, w2],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    feeds = [{"x": rng.standard_normal((4, 64)).astype(np.float32)} for _ in range(4)]
    onnx.save(model, str(tmp_path / "inline.onnx"))
    expected = ptq.quantize_unbudgeted(tmp_path / "inline.onnx", tmp_path / "int8-inline.onnx", feeds)
    monkeypatch.setenv("EDGEKIT_EXTERNAL_DATA_MB", "0")
    (tmp_path / "side").mkdir()
    fp32 = save_onnx(model, tmp_path / "side" / "fp32.onnx", external=True)
    assert external_data_locations(fp32)
    (tmp_path / "out").mkdir()
    out = ptq.quantize_unbudgeted(fp32, tmp_path / "out" / "int8.onnx", feeds)
    assert external_data_locations(out) == {"int8.onnx.data"}
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["int8.onnx", "int8.onnx.data"]
    got = ort.InferenceSession(str(out), providers=["CPUExecutionProvider"]).run(None, feeds[0])[0]
    want = ort.InferenceSession(str(expected), providers=["CPUExecutionProvider"]).run(None, feeds[0])[0]
    np.testing.assert_array_equal(got, want)


def test_qk_is_the_attention_scores_and_int8_scores_select_it_alone(tiny_model):
    plan = qgraph.analyse_graph(tiny_model, time_input="t")
    assert [n.name for n in plan.nodes if n.attention_scores] == ["qk"]  # av reads the Softmax: not scores
    chosen, floated = select.select_nodes(plan, QuantizeConfig(attention_scores="int8"))
    assert "qk" in chosen and floated["av"].startswith("attention core")
    for cfg in (QuantizeConfig(), QuantizeConfig(runtime="openvino")):  # opt-in, on every runtime
        chosen, floated = select.select_nodes(plan, cfg)
        assert "qk" not in chosen and floated["qk"].startswith("attention core"), cfg
    with pytest.raises(UsageError, match="attention_scores"):
        QuantizeConfig(attention_scores="int4")


def test_int8_attention_scores_are_symmetric_int8_q_and_k_and_nothing_else_changes(tiny_model, tmp_path):
    """OpenVINO's form: Q/DQ with int8 zero point 0 on both inputs of QKᵀ, the other activations
    as the cpu profile quantizes them (u8), AV's inputs float; ORT runs it close to float. The
    default (float scores) writes the graph it always wrote."""
    plan = qgraph.analyse_graph(tiny_model, time_input="t")
    feeds = tiny_feeds(6)
    paths = {}
    for scores in ("float", "int8"):
        cfg = QuantizeConfig(attention_scores=scores)
        paths[scores] = tmp_path / f"{scores}.onnx"
        ptq.quantize_model(
            tiny_model, paths[scores], calibration_reader(feeds), select.select_nodes(plan, cfg)[0], cfg, plan
        )
    acts = {
        r: {q["input"]: q for q in structure.qdq_structure(p)["qdq"] if q["op"] == "QuantizeLinear"}
        for r, p in paths.items()
    }
    assert sorted(acts["float"]) == ["a2", "e", "h"]
    assert sorted(acts["int8"]) == ["a2", "e", "h", "kT", "q"]
    for name in ("q", "kT"):
        q = acts["int8"][name]
        assert q["zero_point_dtype"] == "int8" and q["zero_point_max_abs"] == 0, q
    for name in ("a2", "e", "h"):
        assert acts["int8"][name]["zero_point_dtype"] == "uint8" == acts["float"][name]["zero_point_dtype"]
    av = next(n for n in onnx.load(str(paths["int8"])).graph.node if n.name == "av")
    assert list(av.input) == ["p", "h"]
    ref = ort.InferenceSession(str(tiny_model), providers=["CPUExecutionProvider"])
    q = ort.InferenceSession(str(paths["int8"]), providers=["CPUExecutionProvider"])
    feed = tiny_feeds(1, seed=7)[0]
    a, b = ref.run(None, feed)[0], q.run(None, feed)[0]
    snr = 10 * np.log10(np.sum(a**2) / np.sum((a - b) ** 2))
    assert 25 < snr < 80, snr


def _attention_kernel_precision(path: Path) -> str:
    """The runtime precision of the exec-graph node OpenVINO's CPU plugin runs the softmax in."""
    ov = pytest.importorskip("openvino")
    compiled = ov.Core().compile_model(str(path), "CPU", {"INFERENCE_PRECISION_HINT": "f32"})
    for op in compiled.get_runtime_model().get_ordered_ops():
        info = op.get_rt_info()
        if "softmax" in str(info["originalLayersNames"].astype(str)).split(","):
            return str(info["runtimePrecision"].astype(str))
    raise AssertionError("no exec node holds the softmax")


def test_openvino_runs_the_int8_attention_scores_as_an_int8_kernel(tiny_model, tmp_path):
    """The point of the form: the attention (QKᵀ, softmax, AV) compiles to an i8 kernel; with the
    profile's u8 (zero point) Q/DQ on the same tensors it stays f32 (a separate Subtract)."""
    plan = qgraph.analyse_graph(tiny_model, time_input="t")
    feeds = tiny_feeds(6)
    cfg = QuantizeConfig(attention_scores="int8")
    nodes = select.select_nodes(plan, cfg)[0]
    int8 = tmp_path / "int8-scores.onnx"
    ptq.quantize_model(tiny_model, int8, calibration_reader(feeds), nodes, cfg, plan)
    assert _attention_kernel_precision(int8) == "i8"
    u8 = tmp_path / "u8-scores.onnx"  # the same nodes with ORT's own (u8) Q/DQ on Q and K
    ptq.quantize_model(tiny_model, u8, calibration_reader(feeds), nodes, QuantizeConfig(attention_scores="float"), plan)
    assert "kT" in {q["input"] for q in structure.qdq_structure(u8)["qdq"]}
    assert _attention_kernel_precision(u8) == "f32"
    float_core = tmp_path / "float-core.onnx"
    ptq.quantize_model(tiny_model, float_core, calibration_reader(feeds), [n for n in nodes if n != "qk"], cfg, plan)
    assert _attention_kernel_precision(float_core) == "f32"


def test_attention_scores_option_reaches_the_config(monkeypatch, tmp_path):
    """`quantize --attention-scores int8` is the config's field (and a bad value is one line)."""
    from typer.testing import CliRunner

    from edgekit.cli import app

    seen = {}

    def fake(path, cfg=None, progress=None, warn=None):
        seen["cfg"] = cfg
        raise SystemExit(0)

    monkeypatch.setattr("edgekit.quantize.quantize_bundle", fake)
    r = CliRunner().invoke(app, ["quantize", str(tmp_path), "--attention-scores", "int8"])
    assert seen["cfg"].attention_scores == "int8", r.output
    bad = CliRunner().invoke(app, ["quantize", str(tmp_path), "--attention-scores", "int4"])
    assert bad.exit_code == 2 and "--attention-scores" in bad.stderr and "Traceback" not in bad.output
