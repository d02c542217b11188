"""Metric arithmetic on tiny numpy runtimes whose outputs are known in closed form."""

from __future__ import annotations

import math
from types import SimpleNamespace

import numpy as np
import pytest

from edgekit.decode.dispatch import Decoded, decode, decode_config
from edgekit.decode.schedules import time_grid
from edgekit.errors import EdgekitError, UsageError
from edgekit.evaluate.metrics import (
    ARAccumulator,
    FlowAccumulator,
    MaskedAccumulator,
    ShadowRecorder,
    accumulator_for,
    load_metric_hook,
    logits_pair_sums,
    near_tie_note,
    quality_drops,
    run_metric_hook,
)
from edgekit.runtimes.base import Runtime


def _softmax(x):
    e = np.exp(x - x.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


def _kl(p, q):
    return float(np.sum(p * (np.log(p) - np.log(q)), axis=-1).mean())


# ---- ShadowRecorder ---------------------------------------------------------------------------
def test_recording_runtime_forwards_records_copies_and_shadows(fakes):
    inner = fakes.TableMasked(2, fakes.masked_table(0))
    shadow = fakes.TableMasked(2, fakes.masked_table(1))
    rec = ShadowRecorder(
        inner, record="tokens", shadow=shadow, on_pair=lambda f, a, b: [np.abs(a["logits"] - b["logits"]).sum(), 1.0]
    )
    assert isinstance(rec, Runtime)
    assert rec.inputs == inner.inputs and rec.outputs == inner.outputs and rec.device == inner.device
    tokens = np.array([[0, 1, 2, 3, 6], [6, 6, 6, 6, 6]], dtype=np.int64)
    feeds = {"tokens": tokens, "class_id": np.array([0, 2], dtype=np.int64)}
    out = rec.run(feeds)
    expected = inner.run(feeds)["logits"]
    np.testing.assert_array_equal(out["logits"], expected)
    tokens[0, 0] = 5  # the loop edits its state in place: the record must be a copy
    assert rec.recorded[0][0, 0] == 0
    diff = np.abs(expected - shadow.run({"tokens": rec.recorded[0], "class_id": feeds["class_id"]})["logits"]).sum()
    assert rec.paired[0][0] == pytest.approx(diff, rel=1e-6) and rec.calls == 1
    rec.close()  # closes neither runtime: the check opened them and closes them
    inner.run(feeds)
    rec.reset()
    assert rec.recorded == [] and rec.paired == [] and rec.calls == 0
    with pytest.raises(ValueError):
        ShadowRecorder(inner, shadow=shadow)


# ---- logits statistics ------------------------------------------------------------------------
def test_logits_pair_sums_matches_hand_computed_kl_and_ignores_the_mask_column():
    # vocab 2 + a mask column (id 2) the decode never samples.
    ref = np.log(np.array([[[1.0, 3.0, 1e6]], [[2.0, 1.0, 1.0]]]))  # (2, 1, 3); mask logit huge
    cand = np.log(np.array([[[1.2, 1.0, 1.0]], [[2.0, 1.0, 1e-6]]]))
    where = np.array([[True], [True]])
    kl_sum, agree, count, ties, tie_flips = logits_pair_sums(ref, cand, where, vocab=2, mask_id=2)
    p1, q1 = np.array([0.25, 0.75]), np.array([1.2, 1.0]) / 2.2
    expected = float(np.sum(p1 * np.log(p1 / q1)))  # row 2: identical codebook logits, KL 0
    assert count == 2
    assert kl_sum == pytest.approx(expected, abs=1e-12)
    assert agree == 1  # row 1: argmax 1 vs 0; row 2: 0 vs 0
    assert ties == tie_flips == 0  # FP32's top two: log 3 and log 2 nats apart, no near-tie
    # Positions not selected do not count.
    assert logits_pair_sums(ref, cand, np.array([[False], [True]]), 2, 2).tolist() == [0.0, 1.0, 1.0, 0.0, 0.0]


def test_near_ties_are_counted_and_a_top1_gate_failing_on_them_says_so():
    """Four positions of a 3-token codebook: FP32's top two within 0.1 nats at three, of which
    the candidate flips two; the decided one it keeps. 2 of 2 flips at near-ties: the note."""
    ref = np.array([[0.0, 0.05, -3.0], [0.0, 0.02, -3.0], [0.0, 0.09, -3.0], [2.0, 0.0, 0.0]])
    cand = np.array([[0.1, 0.0, -3.0], [0.1, 0.0, -3.0], [0.0, 0.1, -3.0], [1.9, 0.0, 0.0]])
    _, agree, count, ties, tie_flips = logits_pair_sums(ref, cand, np.ones(4, bool), vocab=3, mask_id=3)
    assert (agree, count, ties, tie_flips) == (2, 4, 3, 2)
    acc = MaskedAccumulator({"vocab_size": 3, "mask_id": 3})
    acc.step_sums = np.array([[0.001, agree, count, ties, tie_flips]])
    scalars, _ = acc.teacher_forced()
    assert scalars["reference_near_ties"] == 0.75 and scalars["flips_at_near_ties"] == 1.0
    note = near_tie_note(scalars)
    assert (
        note is not None
        and "100% of its flips" in note
        and "0.1 nats" in note
        and "75% of the decisions compared" in note
    )
    # Flips at decided positions: no note; no flips at all: no share, no note.
    assert near_tie_note({**scalars, "flips_at_near_ties": 0.5}) is None
    assert near_tie_note({**scalars, "flips_at_near_ties": float("nan")}) is None


# ---- masked ---------------------------------------------------------------------------------------
def _recorder(recorded, paired=()):
    rec = ShadowRecorder(SimpleNamespace(name="recorded"))  # only its records are read
    rec.recorded = [np.asarray(r) for r in recorded]
    rec.paired = [np.asarray(p, dtype=float) for p in paired]
    return rec


def test_masked_first_divergence_step_and_per_step_agreement(fakes):
    m = fakes.MASK
    s0 = np.full((2, 4), m)
    s1 = np.array([[1, m, m, m], [2, m, m, m]])
    s2 = np.array([[1, 3, m, m], [2, 4, m, m]])
    final = np.array([[1, 3, 5, 0], [2, 4, 1, 1]])
    c2 = np.array([[1, 3, m, m], [2, 5, m, m]])  # row 1 differs after step 2
    c_final = np.array([[1, 3, 5, 0], [2, 5, 1, 0]])
    ref = _recorder([s0, s1, s2], paired=[[0.3, 4, 8], [0.1, 5, 6], [0.2, 3, 4]])
    cand = _recorder([s0, s1, c2])
    acc = MaskedAccumulator({**fakes.MASKED_META, "seq_len": 4})
    acc.add(ref, cand, Decoded(final, 3, 3, 3), Decoded(c_final, 3, 3, 3), rows=2)
    scalars, curves = acc.result()
    assert scalars["first_divergence_step"] == 3.0  # row 0 never (K + 1 = 4), row 1 after step 2
    assert scalars["token_agreement"] == 6 / 8
    assert scalars["sequence_exact_match"] == 0.5
    assert curves["token_agreement_per_step"] == [1.0, 7 / 8, 6 / 8]
    assert scalars["logits_kl"] == pytest.approx(0.6 / 18) and scalars["top1_agreement"] == pytest.approx(12 / 18)
    assert curves["logits_kl_per_step"] == pytest.approx([0.3 / 8, 0.1 / 6, 0.2 / 4])
    # Padding rows (beyond ``rows``) never count.
    acc2 = MaskedAccumulator({**fakes.MASKED_META, "seq_len": 4})
    acc2.add(ref, cand, Decoded(final, 3, 3, 3), Decoded(c_final, 3, 3, 3), rows=1)
    assert acc2.result()[0]["token_agreement"] == 1.0


def _decode_pair(kind, meta, ref_rt, cand_rt, cfg, cond, acc, rows=None):
    rec_ref = ShadowRecorder(ref_rt, record=acc.state_input, shadow=cand_rt, on_pair=acc.on_pair)
    rec_cand = ShadowRecorder(cand_rt, record=acc.state_input)
    r = decode(kind, rec_ref, meta, cond, cfg)
    c = decode(kind, rec_cand, meta, cond, cfg)
    acc.add(rec_ref, rec_cand, r, c, rows or len(r.output))
    return r, c


def test_masked_identical_networks_agree_exactly_with_guidance(fakes):
    table = fakes.masked_table(0)
    cfg = decode_config("masked", {}, {"steps": 4, "guidance": 2.0}, seed=3)
    acc = MaskedAccumulator(fakes.MASKED_META)
    cond = {"class_id": np.array([0, 1, 2], dtype=np.int64)}
    r, _ = _decode_pair(
        "masked", fakes.MASKED_META, fakes.TableMasked(3, table), fakes.TableMasked(3, table), cfg, cond, acc
    )
    assert r.runtime_calls == 8  # graph batch = B: cond and uncond calls per step
    scalars, curves = acc.result()
    assert scalars["token_agreement"] == 1.0 and scalars["sequence_exact_match"] == 1.0
    assert scalars["first_divergence_step"] == 5.0  # K + 1: never
    assert scalars["logits_kl"] == pytest.approx(0.0, abs=1e-12) and scalars["top1_agreement"] == 1.0
    assert len(curves["logits_kl_per_step"]) == 4 and len(curves["token_agreement_per_step"]) == 4


def test_masked_teacher_forced_kl_is_the_candidate_network_error(fakes):
    table = fakes.masked_table(0)
    other = table + np.random.default_rng(9).normal(0, 0.5, table.shape)
    cfg = decode_config("masked", {}, {"steps": 3}, seed=0)
    acc = MaskedAccumulator(fakes.MASKED_META)
    classes = np.array([0, 2], dtype=np.int64)
    _decode_pair(
        "masked",
        fakes.MASKED_META,
        fakes.TableMasked(2, table),
        fakes.TableMasked(2, other),
        cfg,
        {"class_id": classes},
        acc,
    )
    _, curves = acc.result()
    # Step 1 sees all-mask inputs in both networks: KL of the mask rows' distributions.
    p = _softmax(table[fakes.MASK] + 0.1 * classes[:, None])
    q = _softmax(other[fakes.MASK] + 0.1 * classes[:, None])
    assert curves["logits_kl_per_step"][0] == pytest.approx(_kl(p, q), rel=1e-6)
    assert curves["logits_kl_per_step"][0] > 0.01


def test_masked_schedule_swap_diverges_at_step_one_but_not_in_the_network(fakes):
    table = fakes.masked_table(0)
    meta = {**fakes.MASKED_META, "seq_len": 5}
    acc = MaskedAccumulator(meta)
    rec_ref = ShadowRecorder(
        fakes.TableMasked(4, table), record="tokens", shadow=fakes.TableMasked(4, table), on_pair=acc.on_pair
    )
    rec_cand = ShadowRecorder(fakes.TableMasked(4, table), record="tokens")
    cond = {"class_id": np.arange(4, dtype=np.int64) % 3}
    r = decode("masked", rec_ref, meta, cond, decode_config("masked", {}, {"steps": 4, "schedule": "cosine"}))
    c = decode("masked", rec_cand, meta, cond, decode_config("masked", {}, {"steps": 4, "schedule": "linear"}))
    acc.add(rec_ref, rec_cand, r, c, 4)
    scalars, curves = acc.result()
    assert scalars["logits_kl"] == pytest.approx(0.0, abs=1e-12)  # same network
    assert curves["token_agreement_per_step"][0] < 1.0  # another number of tokens unmasked at step 1
    assert scalars["first_divergence_step"] == 1.0


# ---- ar -------------------------------------------------------------------------------------------
def test_ar_first_divergence_position_and_agreement(fakes):
    ref_out = np.array([[1, 2, 3, 4, 5], [1, 2, 3, 4, 5], [0, 0, 0, 0, 0]])
    cand_out = np.array([[1, 2, 3, 4, 5], [1, 2, 0, 4, 5], [1, 0, 0, 0, 0]])
    acc = ARAccumulator(fakes.AR_META)
    acc.add(
        _recorder([], [[0.0, 1, 1]] * 5), _recorder([]), Decoded(ref_out, 5, 5, 5), Decoded(cand_out, 5, 5, 5), rows=3
    )
    scalars, curves = acc.result()
    assert scalars["first_divergence_position"] == pytest.approx((5 + 2 + 0) / 3)
    assert scalars["token_agreement"] == pytest.approx(13 / 15)
    assert scalars["sequence_exact_match"] == pytest.approx(1 / 3)
    assert len(curves["logits_kl_per_step"]) == 5


def test_ar_teacher_forced_kl_at_the_first_token(fakes):
    table = fakes.masked_table(4)
    other = table.copy()
    other[fakes.V] += np.array([1.0, 0, 0, 0, 0, 0])  # only the BOS row differs
    cfg = decode_config("ar", {}, {"temperature": 1.0}, seed=1)
    acc = ARAccumulator(fakes.AR_META)
    r, c = _decode_pair("ar", fakes.AR_META, fakes.TableAR(2, table), fakes.TableAR(2, other), cfg, {}, acc)
    _, curves = acc.result()
    assert curves["logits_kl_per_step"][0] == pytest.approx(
        _kl(_softmax(table[fakes.V]), _softmax(other[fakes.V])), rel=1e-6
    )
    assert curves["logits_kl_per_step"][1:] == pytest.approx([0.0] * 4, abs=1e-12)  # later tokens never feed BOS


# ---- flow -----------------------------------------------------------------------------------------
def test_flow_snr_cosine_and_divergence_curve_match_closed_form(fakes):
    cfg = decode_config("flow", {}, {"steps": 2, "solver": "euler", "grid": "uniform"}, seed=5)
    acc = FlowAccumulator(fakes.FLOW_META)
    _decode_pair("flow", fakes.FLOW_META, fakes.LinearFlow(2, 0.5), fakes.LinearFlow(2, 0.55), cfg, {}, acc)
    scalars, curves = acc.result()

    x0 = np.random.default_rng(5).standard_normal((2, 4, 3)).astype(np.float32).astype(np.float64)
    t = time_grid("uniform", 2)

    def euler(a):
        xs = [x0]
        for t0, t1 in zip(t[:-1], t[1:]):
            xs.append(xs[-1] + (t1 - t0) * (a * xs[-1] + t0))
        return xs

    r, c = euler(0.5), euler(0.55)
    snr = 10 * math.log10(np.sum(r[2] ** 2) / np.sum((c[2] - r[2]) ** 2))
    assert scalars["snr_db"] == pytest.approx(snr, abs=1e-3)
    assert scalars["max_abs_error"] == pytest.approx(np.abs(c[2] - r[2]).max(), abs=1e-5)
    cos = [np.dot(a.ravel(), b.ravel()) / np.linalg.norm(a) / np.linalg.norm(b) for a, b in zip(r[2], c[2])]
    assert scalars["cosine_similarity"] == pytest.approx(np.mean(cos), abs=1e-6)
    assert curves["divergence_per_step"] == pytest.approx(
        [np.linalg.norm(c[k] - r[k]) / np.linalg.norm(r[k]) for k in (1, 2)], rel=1e-4
    )
    # Teacher forced: v_c − v_r = 0.05·x_ref at every evaluation.
    v0 = 0.5 * x0 + t[0]
    assert curves["velocity_snr_db_per_step"][0] == pytest.approx(
        10 * math.log10(np.sum(v0**2) / np.sum((0.05 * x0) ** 2)), abs=1e-3
    )


def test_flow_identical_networks_have_infinite_snr(fakes):
    cfg = decode_config("flow", {}, {"steps": 3, "solver": "midpoint"}, seed=0)
    acc = FlowAccumulator(fakes.FLOW_META)
    r, _ = _decode_pair("flow", fakes.FLOW_META, fakes.LinearFlow(2, 0.3), fakes.LinearFlow(2, 0.3), cfg, {}, acc)
    assert r.runtime_calls == 6
    scalars, curves = acc.result()
    assert scalars["snr_db"] == math.inf and scalars["velocity_snr_db"] == math.inf
    assert scalars["max_abs_error"] == 0.0 and scalars["cosine_similarity"] == pytest.approx(1.0, abs=1e-12)
    assert curves["divergence_per_step"] == [0.0, 0.0, 0.0]


def test_accumulator_for_unknown_kind():
    with pytest.raises(UsageError, match="valid: masked, flow, ar"):
        accumulator_for("diffusion", {})


# ---- quality and the user hook ------------------------------------------------------------------
def test_quality_drops_sign_and_undefined_values():
    ref = {"validity": 0.9, "nll_per_token": 1.0, "snr_db": 20.0, "l1": 0.1, "custom": 0.5, "gone": 1.0}
    cand = {"validity": 0.8, "nll_per_token": 1.2, "snr_db": 21.0, "l1": 0.08, "custom": 0.25, "gone": float("nan")}
    drops = quality_drops(ref, cand)
    assert drops["validity"] == pytest.approx(0.1) and drops["nll_per_token"] == pytest.approx(0.2)
    assert drops["snr_db"] == pytest.approx(-1.0) and drops["l1"] == pytest.approx(-0.02)
    assert drops["custom"] == pytest.approx(0.25)  # hook metrics: higher is better
    assert drops["gone"] == math.inf
    assert quality_drops({"nll_per_token": float("nan")}, {"nll_per_token": float("nan")}) == {"nll_per_token": None}
    # NLL over the valid sequences only: none valid on one side is the validity metric's business.
    assert quality_drops({"nll_per_token": 0.7}, {"nll_per_token": float("nan")}) == {"nll_per_token": None}
    assert quality_drops({"custom": float("nan")}, {"custom": 1.0}) == {"custom": -math.inf}


def test_metric_hook_from_a_file_runs_and_is_checked(tmp_path):
    hook_file = tmp_path / "my_metrics.py"
    hook_file.write_text(
        "import numpy as np\n"
        "def mean_token(output, cond):\n    return {'mean_token': float(np.mean(output))}\n"
        "def broken(output, cond):\n    raise RuntimeError('boom')\n"
        "def not_a_dict(output, cond):\n    return 3\n"
    )
    ref = f"{hook_file}:mean_token"
    hook = load_metric_hook(ref)
    assert run_metric_hook(hook, ref, np.array([[1, 3]]), {}) == {"mean_token": 2.0}
    with pytest.raises(EdgekitError, match="raised RuntimeError: boom"):
        run_metric_hook(load_metric_hook(f"{hook_file}:broken"), "x", np.zeros(1), {})
    with pytest.raises(EdgekitError, match="valid: a non-empty dict"):
        run_metric_hook(load_metric_hook(f"{hook_file}:not_a_dict"), "x", np.zeros(1), {})
    with pytest.raises(UsageError, match="has no function 'nope'"):
        load_metric_hook(f"{hook_file}:nope")
    with pytest.raises(UsageError, match="not module:function"):
        load_metric_hook("just_a_name")
    with pytest.raises(EdgekitError, match="importing metric hook 'no_such_pkg_xyz'"):
        load_metric_hook("no_such_pkg_xyz:f")
