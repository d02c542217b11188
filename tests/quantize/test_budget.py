"""Budget metrics and checks: the held-out decodes, lockstep decisions, the budget keys."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from edgekit.evaluate import snr_db
from edgekit.quantize.budget import EvalRun, check, compare
from edgekit.quantize.config import QuantizeConfig


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
    from tests.runtimes.test_recording import MASKED_META, TinyMasked

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
    ok, rows = check(
        {"lockstep_token_agreement": 0.995, "event_accuracy_drop": 0.02},
        {"lockstep_token_agreement": 0.99, "event_accuracy_drop": 0.01},
    )
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


def test_parse_budget_and_decode_options():
    from edgekit.decode.dispatch import parse_decode_options
    from edgekit.errors import UsageError
    from edgekit.quantize.config import parse_budget

    assert parse_budget(["lockstep-token-agreement=0.98", "snr_db=25"]) == {
        "lockstep_token_agreement": 0.98,
        "snr_db": 25.0,
    }
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
    from edgekit.evaluate.thresholds import QUALITY_DROP_DEFAULTS
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


def test_a_missed_lockstep_budget_says_when_its_flips_were_fp32s_own_near_ties():
    """Greedy AR decisions over a 3-token vocabulary: FP32's top two within 0.1 nats in two of
    three rows, the candidate flips exactly those: both flips at near-ties, one line says so;
    a candidate that flips the decided row instead gets no line."""
    from edgekit.quantize.budget import LockstepRuntime, budget_notes

    class Fixed:
        name = "fixed"

        def __init__(self, logits):
            self.logits = np.asarray(logits, np.float64)

        def run(self, feeds):
            return {"logits": self.logits.copy()}

    fp32 = [[0.0, 0.05, -3.0], [0.0, 0.02, -3.0], [2.0, 0.0, 0.0]]
    meta = {"vocab_size": 3}
    for cand, note in (
        ([[0.1, 0.0, -3.0], [0.1, 0.0, -3.0], [2.0, 0.0, 0.0]], True),
        ([[0.0, 0.05, -3.0], [0.0, 0.02, -3.0], [0.0, 2.0, 0.0]], False),
    ):
        lock = LockstepRuntime(Fixed(fp32), Fixed(cand), "ar", meta, temperature=0.0, seed=0)
        lock.run({"token": np.zeros((3, 1), np.int64)})
        assert (lock.total, lock.near_ties) == (3, 2)
        int8 = EvalRun(
            {"output": np.zeros((3, 1)), "cond": {}, "quality": None},
            (lock.agreeing, lock.total),
            None,
            (lock.near_ties, lock.flips_at_near_ties),
        )
        m = compare("ar", _run(np.zeros((3, 1))), int8)
        assert m["lockstep_near_ties"] == pytest.approx(2 / 3)
        assert m["lockstep_flips_at_near_ties"] == (1.0 if note else 0.0)
        ok, rows = check(m, {"lockstep_token_agreement": 0.99})
        assert not ok
        notes = budget_notes(rows, m | {"check_metrics": {"logits_kl": 1e-4}})
        if note:
            assert len(notes) == 1 and notes[0].startswith("lockstep_token_agreement 0.3333: 100% of its flips")
            assert "Gumbel" in notes[0] and "logits_kl 0.0001" in notes[0]
        else:
            assert notes == []


def test_check_s_gate_is_skipped_only_where_the_budget_s_own_keys_missed_already():
    from edgekit.quantize.budget import gate_cannot_save

    flow = {"snr_db": 30.0, "gt_snr_drop_db": 1.0, "check_margin": 0.0}
    assert gate_cannot_save({"snr_db": 31.0, "gt_snr_drop_db": 0.5}, flow) is None  # the gate decides
    assert gate_cannot_save({"snr_db": 31.0}, flow) is None  # unmeasured ground truth does not miss
    why = gate_cannot_save({"snr_db": 18.6, "gt_snr_drop_db": 0.5}, flow)
    assert why is not None and "snr_db" in why and "gt_snr_drop_db" not in why
    tokens = {"lockstep_token_agreement": 0.99, "event_accuracy_drop": 0.02, "check_margin": 0.0}
    assert gate_cannot_save({"lockstep_token_agreement": 0.98, "event_accuracy_drop": 0.0}, tokens) is None
    assert "event_accuracy_drop" in gate_cannot_save(
        {"lockstep_token_agreement": 1.0, "event_accuracy_drop": 0.1}, tokens
    )
    assert gate_cannot_save({"snr_db": 1.0}, {"check_margin": 0.0}) is None  # no own key to miss


@pytest.mark.slow  # quantizes the flow demo once (under a minute)
def test_a_candidate_whose_own_keys_miss_is_not_judged_by_check_s_gate(quant_bundles, tmp_path, monkeypatch):
    """The budget's snr_db out of reach: the candidate fails on it whatever check's gate would say,
    so the gate's decodes are not run, and the record says why check_margin is unmeasured."""
    import shutil

    from edgekit.quantize import QuantizeConfig, quantize_bundle

    root = Path(shutil.copytree(quant_bundles["flow"], tmp_path / "flow"))
    monkeypatch.setattr("edgekit.quantize.context.gate_runtimes", lambda *a, **k: pytest.fail("gate run"))
    s = quantize_bundle(root, QuantizeConfig(calib_samples=2, eval_samples=2, budget={"snr_db": 500.0}, fallback=False))
    skipped = s["measured"]["check_skipped"]
    assert not s["passed"] and "snr_db" in skipped and "missed the budget already" in skipped
    row = next(c for c in s["budget"]["checks"] if c["key"] == "check_margin")
    assert row["value"] is None and row["passed"] is None
