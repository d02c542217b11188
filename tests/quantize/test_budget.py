"""Budget metrics and checks, qdq_loss_debug sensitivity, and the greedy fallback loop."""

from __future__ import annotations

import numpy as np
import pytest

from edgekit.evaluate import snr_db
from edgekit.quantize.budget import EvalRun, check, compare, fallback_until_within_budget, rank_by_sensitivity
from edgekit.quantize.config import QuantizeConfig
from tests.quantize.conftest import build_tiny_model, tiny_feeds


def _run(output, quality=None, decisions=None):
    return EvalRun({"output": output, "cond": {}, "quality": quality}, decisions)


def test_compare_tokens_lockstep_decisions_final_agreement_and_ground_truth_drop():
    a = np.zeros((4, 10), np.int64)
    b = a.copy()
    b[0, :3] = 1  # 3 of 40 final tokens differ
    m = compare("masked", _run(a, {"event_accuracy": 0.9}), _run(b, {"event_accuracy": 0.85}, decisions=(297, 300)))
    assert m["lockstep_token_agreement"] == pytest.approx(0.99)
    assert m["final_token_agreement"] == pytest.approx(37 / 40)
    assert m["event_accuracy_drop"] == pytest.approx(0.05)


def test_lockstep_follows_fp32_and_counts_decisions_where_the_loop_decides():
    from edgekit.decode.masked import MaskedDecodeConfig, decode_masked
    from edgekit.quantize.budget import LockstepRuntime
    from tests.quantize.test_calibrate import MASKED_META, TinyMasked

    class Boosted(TinyMasked):
        """The same network with codebook entry 0 boosted: it wins wherever it was close."""

        boost = 0.0

        def _run_impl(self, feeds):
            out = super()._run_impl(feeds)
            out["logits"][..., 0] += self.boost
            return out

    cond = {"class_id": np.array([0, 1])}
    cfg = MaskedDecodeConfig(steps=4, seed=5)
    plain = decode_masked(TinyMasked(2), MASKED_META, cond, cfg)
    # Decisions = mask positions in each step's input: 2 rows x 12 at step 0, then what stays masked.
    expected_total = 2 * 12 + sum(int(m.sum()) for m in plain.masked_per_step[:-1])
    for boost in (0.0, 3.0):
        int8 = Boosted(2)
        int8.boost = boost
        lock = LockstepRuntime(TinyMasked(2), int8, "masked", MASKED_META, cfg.temperature, seed=5)
        out = decode_masked(lock, MASKED_META, cond, cfg)
        np.testing.assert_array_equal(out.tokens, plain.tokens)  # the loop ran on FP32's outputs
        assert lock.total == expected_total
        if boost == 0.0:
            assert lock.agreeing == lock.total
        else:
            assert 0 < lock.agreeing < lock.total


def test_compare_frames_snr_vs_fp32_and_ground_truth_drop():
    rng = np.random.default_rng(0)
    x = rng.normal(size=(2, 8, 4)).astype(np.float32)
    noise = 0.01 * rng.normal(size=x.shape).astype(np.float32)
    m = compare("flow", _run(x, {"snr_db": 20.0}), _run(x + noise, {"snr_db": 19.25}))
    assert m["snr_db"] == pytest.approx(snr_db(x, x + noise)) and 35 < m["snr_db"] < 45
    assert m["gt_snr_drop_db"] == pytest.approx(0.75)


def test_check_directions_and_unmeasured_keys():
    ok, rows = check({"lockstep_token_agreement": 0.995, "event_accuracy_drop": 0.02}, {"lockstep_token_agreement": 0.99, "event_accuracy_drop": 0.01})
    assert not ok and [r["passed"] for r in rows] == [True, False]
    ok, rows = check({"snr_db": 31.0}, {"snr_db": 30.0, "gt_snr_drop_db": 0.5})  # no ground truth: not measured
    assert ok and rows[1]["passed"] is None


def test_budget_keys_per_kind_and_overrides():
    cfg = QuantizeConfig(budget={"snr_db": 25})
    assert cfg.budget_for("flow") == {"snr_db": 25.0, "gt_snr_drop_db": 1.0, "check_margin": 0.0}
    from edgekit.errors import UsageError

    with pytest.raises(UsageError, match="does not apply to the masked model"):
        cfg.budget_for("masked")
    with pytest.raises(UsageError, match="valid keys"):
        QuantizeConfig(budget={"accuracy": 1})


def test_fallback_loop_with_fakes_moves_most_sensitive_first_until_met():
    built = []

    def build(nodes):
        built.append(list(nodes))
        return f"model{len(built)}"

    def measure(model):  # each of a, b costs 0.02 of agreement; c costs nothing
        nodes = built[-1]
        return {"lockstep_token_agreement": 1.0 - 0.02 * sum(n in nodes for n in ("a", "b"))}

    def sensitivity(model, nodes):
        return {"a": {"added_sqnr_db": 20.0}, "b": {"added_sqnr_db": 25.0}, "c": {"added_sqnr_db": 50.0}}

    model, out = fallback_until_within_budget(["c", "b", "a"], {"lockstep_token_agreement": 0.99}, build, measure, sensitivity)
    assert out.passed and out.quantized == ["c"]
    assert [f["node"] for f in out.fallback] == ["a", "b"]
    assert out.fallback[0]["reason"].startswith("budget fallback #1") and "20.0 dB" in out.fallback[0]["reason"]
    assert [h["lockstep_token_agreement"] for h in out.history] == pytest.approx([0.96, 0.98, 1.0])
    assert model == "model3"
    _, capped = fallback_until_within_budget(["c", "b", "a"], {"lockstep_token_agreement": 0.99}, build, measure, sensitivity, max_fallback=1)
    assert not capped.passed and len(capped.fallback) == 1
    _, off = fallback_until_within_budget(["c", "b", "a"], {"lockstep_token_agreement": 0.99}, build, measure, sensitivity, enabled=False)
    assert not off.passed and off.fallback == [] and len(off.history) == 1


def test_rank_by_sensitivity_lowest_added_sqnr_first():
    assert rank_by_sensitivity({"x": {"added_sqnr_db": 40.0}, "y": {"added_sqnr_db": 12.0}}) == ["y", "x"]


NAIVE_OPS = ("MatMul", "Gemm", "Conv", "LayerNormalization", "Softmax", "Sin", "Cos")


def test_naive_quantization_fails_first_then_falls_back_within_budget(tmp_path):
    """Everything INT8 (attention core, LayerNorm, Softmax, the sinusoid of 1000·t, the time MLP):
    8 bits cannot resolve 1000·t radians, so the output is ruined; the loop must find and float
    the culprits with ORT's qdq_loss_debug and end within a 30 dB budget."""
    ort = pytest.importorskip("onnxruntime")
    from edgekit.quantize import graph as qgraph
    from edgekit.quantize import ptq
    from edgekit.quantize.budget import isolated_output_sqnr, node_sensitivity
    from edgekit.quantize.calibrate import calibration_reader

    model = build_tiny_model(tmp_path / "tiny.onnx", seed=3)
    cfg = QuantizeConfig(op_types=NAIVE_OPS, float_attention_core=False, float_time_embedding=False)
    plan = qgraph.analyse_graph(model, time_input="t")
    chosen, floated = qgraph.select_nodes(plan, cfg)
    assert {"sin", "cos", "time_mlp", "qk", "av", "ln", "softmax"} <= set(chosen) and not floated
    calib, held_out = tiny_feeds(16, seed=1), tiny_feeds(8, seed=2)
    reader = calibration_reader(calib)
    ref = ort.InferenceSession(str(model), providers=["CPUExecutionProvider"])
    expected = np.concatenate([ref.run(None, f)[0] for f in held_out])
    n = iter(range(100))

    def build(nodes):
        out = tmp_path / f"int8-{next(n)}.onnx"
        ptq.quantize_model(model, out, reader, nodes, cfg, plan, calibration_cache=tmp_path / "cache.json")
        return out

    def measure(path):
        sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
        return {"snr_db": snr_db(expected, np.concatenate([sess.run(None, f)[0] for f in held_out]))}

    def sensitivity(path, nodes):  # as the stage ranks: qdq_loss_debug + one layer at a time
        scores = node_sensitivity(model, path, calib[:4], {k: plan.by_name()[k] for k in nodes})
        alone = isolated_output_sqnr(model, build, nodes, calib[:4], "y")
        return {k: scores.get(k, {}) | {"isolated_output_sqnr_db": alone[k]} for k in nodes}

    _, out = fallback_until_within_budget(chosen, {"snr_db": 30.0}, build, measure, sensitivity)
    assert out.history[0]["snr_db"] < 30.0 and not out.history[0]["passed"]  # made to fail first
    assert out.passed and out.metrics["snr_db"] >= 30.0
    fell = [f["node"] for f in out.fallback]
    assert set(fell[:2]) == {"sin", "cos"}, fell  # the sinusoid of 1000·t is what 8 bits break
    assert len(fell) <= 3, fell  # the ranking found it, not a sweep over everything
    assert out.ranking["sin"]["isolated_output_sqnr_db"] < 25 < 30 < out.ranking["ln"]["isolated_output_sqnr_db"]
    assert set(out.quantized) == set(chosen) - set(fell)
    assert all(f["reason"].startswith("budget fallback #") for f in out.fallback)


def test_parse_budget_and_decode_options():
    from edgekit.errors import UsageError
    from edgekit.decode.dispatch import parse_decode_options
    from edgekit.quantize.config import parse_budget

    assert parse_budget(["lockstep-token-agreement=0.98", "snr_db=25"]) == {"lockstep_token_agreement": 0.98, "snr_db": 25.0}
    for bad in (["lockstep_token_agreement"], ["agreement=1"], ["snr_db=high"]):
        with pytest.raises(UsageError):
            parse_budget(bad)
    got = parse_decode_options(["guidance=2", "solver=heun", "sway=-0.5", "steps=4"])
    assert got == {"guidance": 2.0, "solver": "heun", "sway": -0.5, "steps": 4}
    assert isinstance(got["guidance"], float) and isinstance(got["steps"], int)  # export bakes these as written
    with pytest.raises(UsageError, match="KEY=VALUE"):
        parse_decode_options(["guidance"])
    with pytest.raises(UsageError, match="steps needs an integer"):
        parse_decode_options(["steps=4.5"])


def test_default_budgets_agree_with_edgekit_check():
    """A bundle quantize passes must not fail `edgekit check` on the same ground-truth metric."""
    from edgekit.check.thresholds import QUALITY_DROP_DEFAULTS
    from edgekit.quantize.config import DEFAULT_BUDGETS

    assert DEFAULT_BUDGETS["flow"]["gt_snr_drop_db"] <= QUALITY_DROP_DEFAULTS["snr_db"].threshold
    assert DEFAULT_BUDGETS["masked"]["event_accuracy_drop"] <= QUALITY_DROP_DEFAULTS["event_accuracy"].threshold
    assert DEFAULT_BUDGETS["ar"]["event_accuracy_drop"] <= QUALITY_DROP_DEFAULTS["event_accuracy"].threshold


def test_the_lockstep_measure_has_its_own_name_and_the_old_key_still_parses():
    """Issue #15: quantize's lockstep agreement (0.99) and check's free-running token agreement
    (0.93 on the same model) were both 'token_agreement'."""
    from edgekit.quantize.config import BUDGET_RULES, parse_budget

    assert "token_agreement" not in BUDGET_RULES and "lockstep_token_agreement" in BUDGET_RULES
    assert parse_budget(["token_agreement=0.97"]) == {"lockstep_token_agreement": 0.97}
