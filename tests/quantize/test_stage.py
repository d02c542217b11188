"""The quantize stage on the demo bundles: artifact, manifest, budgets, TensorRT rules.

``test_demo_models_meet_default_budgets`` asserts trained-model quality: it passes with the
committed (trained) demo weights and is expected to fail with random-init weights."""

from __future__ import annotations

import shutil

import numpy as np
import pytest

from edgekit.bundle import Bundle
from edgekit.errors import UsageError
from edgekit.quantize import QuantizeConfig, quantize_bundle

pytest.importorskip("onnxruntime")
onnx = pytest.importorskip("onnx")


@pytest.fixture(scope="session")
def quantized(quant_bundles) -> dict[str, dict]:
    """Each demo bundle quantized once with the default (cpu) configuration."""
    return {kind: quantize_bundle(path) for kind, path in quant_bundles.items()}


@pytest.mark.slow  # quantizes the three demo models (minutes under load)
def test_demo_models_meet_default_budgets(quantized):
    for kind, s in quantized.items():
        assert s["passed"], (kind, s["budget"]["checks"], s["fallback"])
        for c in s["budget"]["checks"]:
            assert c["passed"] is True, (kind, c)  # every key measured (the demos have ground truth)
        assert s["int8_flop_share"]["matmul"] >= 0.6, (kind, s["int8_flop_share"])


def _float_weight_bytes(path) -> int:
    """Bytes of FP32 matrices (rank >= 2) left in a model: the layers it computes in float."""
    model = onnx.load(str(path))
    return sum(
        onnx.numpy_helper.to_array(i).nbytes
        for i in model.graph.initializer
        if i.data_type == onnx.TensorProto.FLOAT and len(i.dims) >= 2
    )


@pytest.mark.slow  # quantizes the three demo models (minutes under load)
def test_int8_file_at_most_0_3x_fp32(quantized, quant_bundles):
    """Every weight stored INT8 is ~1/4 of its FP32 size; what the budget (or this host's timing,
    fallback_form) kept in FP32 counts at full size on both sides."""
    for kind, s in quantized.items():
        sizes = s["sizes"]
        kept = _float_weight_bytes(Bundle.load(quant_bundles[kind]).path_of("int8"))
        assert sizes["int8_bytes"] - kept <= 0.3 * (sizes["fp32_bytes"] - kept), (kind, sizes, kept)


@pytest.mark.slow  # quantizes the three demo models (minutes under load)
def test_manifest_records_config_calibration_budget_and_result(quantized, quant_bundles):
    bundle = Bundle.load(quant_bundles["masked"])  # hashes verified: the artifact is intact
    q = bundle.manifest["quantization"]
    assert q["profile"] == "cpu" and q["method"] == "minmax"
    assert q["config"]["calib_samples"] == 8 and q["config"]["settings"]["activation_type"] == "QUInt8"
    assert q["calibration"]["samples"] == 8 and q["calibration"]["feeds"] == 4 * 8  # batch 2: 4 decodes x 8 steps
    assert q["budget"]["limits"] == {"lockstep_token_agreement": 0.99, "event_accuracy_drop": 0.02, "check_margin": 0.0}
    assert set(q["measured"]) >= {"lockstep_token_agreement", "event_accuracy_drop", "final_token_agreement"}
    assert q["sizes"]["int8_bytes"] == bundle.artifact("int8").bytes
    auto = q["selection"]["excluded_auto"]
    assert len(auto) >= 8 and q["selection"]["excluded_user"] == []  # 4 blocks x (QKᵀ, AV)
    reasons = {r["reason"].split(" (")[0] for r in q["selection"]["float"]}
    assert "attention core" in reasons
    assert (
        q["selection"]["float_by_op_type"]["Softmax"] == 4
        and q["selection"]["float_by_op_type"]["LayerNormalization"] == 9
    )
    assert bundle.artifact("int8-calibration").path.endswith(".cache")
    model = onnx.load(str(bundle.path_of("int8")))
    inits = {i.name: i.data_type for i in model.graph.initializer}
    bias_dq = [
        n
        for n in model.graph.node
        if n.op_type == "DequantizeLinear" and inits.get(n.input[0]) == onnx.TensorProto.INT32
    ]
    # cpu profile: every fully INT8 Gemm has an int32 bias, so ORT fuses DQ -> Gemm into QGemm
    # (budget fallbacks are weight-only: float activations, float bias).
    int8_gemms = [r for r in q["selection"]["int8"] if r["op"] == "Gemm"]
    assert len(bias_dq) >= len(int8_gemms) >= 8, (len(bias_dq), len(int8_gemms))
    # The artifact is what `edgekit run --precision int8` opens.
    from edgekit.run import RunRequest, run_bundle

    result = run_bundle(bundle.root, RunRequest(precision="int8"))
    assert result["output"].shape == (2, 64)


@pytest.mark.slow  # quantizes the three demo models (minutes under load)
def test_range_drift_table_covers_every_step(quantized):
    masked = quantized["masked"]["range_drift"]
    rows = masked["steps"]
    assert rows[0]["calls"][0] == 0 and rows[-1]["calls"][1] == 7  # all 8 MaskGIT steps
    assert rows[0]["position"][0] == 1.0 and rows[-1]["position"][1] < 0.5  # mask share falls
    assert all(0 < r["min_share"] <= r["mean_share"] <= 1.0 for r in rows)
    flow = quantized["flow"]["range_drift"]["steps"]
    assert flow[0]["position"][0] == 0.0  # t = 0: pure noise in
    assert len(quantized["ar"]["range_drift"]["steps"]) == 8  # 64 positions in 8 groups


@pytest.mark.slow  # quantizes the three demo models (minutes under load)
def test_flow_time_embedding_stays_float(quantized, quant_bundles):
    q = quantized["flow"]
    float_labels = {r["label"] for r in q["selection"]["float"] if r["reason"].startswith("flow time embedding")}
    assert {"time_mlp.0", "time_mlp.2"} <= float_labels
    # The blocks' layers are INT8 unless the budget fell back (never floated by the time rule).
    int8_or_budget = {r["label"] for r in q["selection"]["int8"] + q["selection"]["weight_only"]}
    int8_or_budget |= {r["label"] for r in q["selection"]["float"] if r["source"] == "budget"}
    assert "blocks.0.ada" in int8_or_budget and "blocks.0.conv_in" in int8_or_budget


def test_trt_profile_on_demo_graph_all_zero_points_int8_zero(demo_bundles, tmp_path):
    path = shutil.copytree(demo_bundles["masked"], tmp_path / "masked")
    cfg = QuantizeConfig(profile="trt", calib_samples=2, eval_samples=2, fallback=False, exclude=("head",))
    s = quantize_bundle(path, cfg)
    assert s["structure"]["trt_rules"] == "pass"
    model = onnx.load(str(Bundle.load(path).path_of("int8")))
    inits = {i.name: onnx.numpy_helper.to_array(i) for i in model.graph.initializer}
    qdq = [n for n in model.graph.node if n.op_type in ("QuantizeLinear", "DequantizeLinear")]
    assert len(qdq) >= 2 * 17
    for node in qdq:
        zp = inits[node.input[2]]
        assert zp.dtype == np.int8 and not zp.any(), node.name
        if node.input[0] in inits:  # a weight: int8 values, one scale per output channel
            assert inits[node.input[0]].dtype == np.int8 and inits[node.input[1]].size > 1, node.name
    head = [n for n in model.graph.node if n.name.startswith("node_MatMul_179")]
    dq_outputs = {o for n in qdq for o in n.output}
    assert head and not any(i in dq_outputs for i in head[0].input)  # --exclude head: really float
    assert [r["label"] for r in s["selection"]["float"] if r["source"] == "user"] == ["head"]
    # --exclude means fully float (FP32 weights too), never weight-only.
    assert [r["label"] for r in s["selection"]["fully_float"] if r["source"] == "user"] == ["head"]
    assert all(r["source"] != "user" for r in s["selection"]["weight_only"])
    assert not any(inits[i].dtype == np.int8 for i in head[0].input if i in inits)


def test_quantize_remakes_what_an_earlier_quantize_wrote_when_its_files_are_gone(demo_bundles, tmp_path):
    """The error for a missing INT8 artifact says "run `edgekit quantize` again": that run must work,
    whichever of quantize's own files (graph, TensorRT calibration table) were deleted."""
    path = shutil.copytree(demo_bundles["masked"], tmp_path / "masked")
    cfg = QuantizeConfig(profile="trt", calib_samples=2, eval_samples=2, fallback=False)
    quantize_bundle(path, cfg)
    bundle = Bundle.load(path)
    made = [bundle.path_of(n) for n in ("int8", "int8-calibration")]
    for f in made:
        f.unlink()
    s = quantize_bundle(path, cfg)
    assert set(s["artifact"]) == {"int8", "int8-calibration"}
    Bundle.load(path).verify()
    assert all((path / s["artifact"][n]).is_file() for n in s["artifact"])


def test_wrong_budget_key_fails_before_any_work(quant_bundles):
    with pytest.raises(UsageError, match="does not apply to the masked model"):
        quantize_bundle(quant_bundles["masked"], QuantizeConfig(budget={"snr_db": 20}))


@pytest.mark.slow  # quantizes the three demo models (minutes under load)
def test_budget_fallbacks_take_the_form_the_manifest_records(quantized, quant_bundles):
    """Every budget fallback is in the form ``fallback_form`` chose on this host (the choice is timed,
    so either may come out): weight-only keeps an int8 weight behind a DQ and reads its activation
    unquantized; float keeps FP32 weights. Needs the trained demo weights: the flow demo (cpu
    profile, default budget) falls back at least one node."""
    assert quantized["flow"]["fallback"], "the flow demo meets its budget only with fallbacks"
    for kind, s in quantized.items():
        sel = s["selection"]
        int8 = {r["node"] for r in sel["int8"]}
        weight_only = {r["node"] for r in sel["weight_only"]}
        fully_float = {r["node"] for r in sel["fully_float"]}
        form = s["fallback_form"]
        assert (form["chosen"] == "none") == (not s["fallback"]), (kind, form)
        assert form["chosen"] == "none" or form["why"], (kind, form)
        # A fallback whose weight-only noise alone broke the budget was escalated to fully float.
        escalated = {f["node"] for f in s["fallback"] if f["reason"].endswith("fully float")}
        fallback = {f["node"] for f in s["fallback"]} - escalated
        assert not (weight_only & int8) and not (fallback & int8), kind
        assert escalated <= fully_float and len(escalated) <= len(s["fallback"]), kind
        expected = weight_only if form["chosen"] == "weight-only" else fully_float
        assert fallback <= expected, (kind, form["chosen"], fallback - expected)
        model = onnx.load(str(Bundle.load(quant_bundles[kind]).path_of("int8")))
        inits = {i.name: i for i in model.graph.initializer}
        producer = {o: n for n in model.graph.node for o in n.output}
        for node in model.graph.node:
            if node.name not in fallback:
                continue
            act = producer.get(node.input[0])
            assert act is None or act.op_type != "DequantizeLinear", (kind, node.name)  # float activation
            weight = producer.get(node.input[1])
            if form["chosen"] == "weight-only":
                assert (
                    weight.op_type == "DequantizeLinear" and inits[weight.input[0]].data_type == onnx.TensorProto.INT8
                ), (kind, node.name)
            else:  # FP32 weight read straight from the initializer
                assert weight is None and inits[node.input[1]].data_type == onnx.TensorProto.FLOAT, (kind, node.name)


@pytest.mark.parametrize(
    "loads,int8_ms,verdict,warns",
    [
        ((0.3,), [70], "faster", None),
        ((0.3,), [130], "slower", "INT8 is 0.77x FP32 per decode on this host (avx2, ort): slower"),
        ((3.1,), [70], "within noise", "INT8 ran 1.43x FP32 per decode on this host (avx2, ort), within noise after 3"),
    ],
)
def test_the_speed_record_says_how_int8_was_timed_and_warns_once(loads, int8_ms, verdict, warns):
    """INT8 against FP32 on a stand-in clock and load: the record keeps the samples, spread, loads
    and CPU class; a busy host was timed again, then one warning says build ships FP32."""
    from edgekit.host import HostFacts
    from edgekit.probes.speed import decide
    from edgekit.quantize.speed import speed_record
    from tests.fakes.host import StandInHost

    host = StandInHost(loads=loads)
    fns = {"fp32": host.call("fp32", [100]), "int8": host.call("int8", int8_ms)}
    decision = decide(fns, 5, pair=lambda t: ("int8", "fp32"), probe=host.probe)
    doc, warning = speed_record(decision, "ort", HostFacts("x86_64", "EPYC", None, None, False, ("avx2",)), 2, 1)
    assert doc["verdict"] == verdict and doc["int8_speedup"] == pytest.approx(100 / int8_ms[0])
    assert (doc["fp32_ms_per_decode"], doc["int8_ms_per_decode"]) == (100.0, float(int8_ms[0]))
    timing = doc["timing"]["timings"]["int8"]
    assert (timing["n"], timing["cores"], timing["cpu_class"], timing["load_before"]) == (5, 2, "avx2", loads[0])
    assert warning is None if warns is None else (warns in warning and "\n" not in warning)
    if verdict == "within noise":
        assert doc["unsure"] == ["load 3.1 on 2 cores (2.1 of it other processes)"] and doc["timing"]["rounds"] == 3
        assert "`edgekit build --precision auto` ships FP32" in warning
