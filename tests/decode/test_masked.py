"""MaskGIT decoding against a plain transcription of the reference loop and its invariants."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from edgekit.decode import MASK_SCHEDULES, MaskedDecodeConfig, decode_masked, mask_ratio
from edgekit.errors import EdgekitError


def reference_maskgit(net, tokens, class_id, steps, choice_temperature, temperature, seed):
    """google-research/maskgit parallel_decode, batch 1, cosine schedule, written out plainly.

    Noise is drawn as edgekit's contract says: per step, float32 Gumbel [1, L, W] then [1, L].
    """
    from edgekit.decode._noise import gumbel as draw_gumbel

    rng = np.random.default_rng(seed)
    mask_id = net.mask_id
    cur = tokens.copy()
    unknown_at_start = np.sum(cur == mask_id)
    for step in range(steps):
        logits = net.row_logits(cur, class_id).astype(np.float64)
        if logits.shape[-1] > mask_id:
            logits[:, mask_id] = -np.inf
        if temperature > 0:
            sampled = np.argmax(logits / temperature + draw_gumbel(rng, (1, *logits.shape))[0], axis=-1)
            gumbel = draw_gumbel(rng, (1, len(cur)))[0]
        else:
            sampled = np.argmax(logits, axis=-1)
            gumbel = np.zeros(len(cur))
        unknown = cur == mask_id
        sampled = np.where(unknown, sampled, cur)
        if step == steps - 1:
            return sampled
        ratio = (step + 1) / steps
        ratio_masked = min(max(math.cos(math.pi / 2 * ratio), 1e-6), 1.0)
        probs = np.exp(logits - logits.max(axis=-1, keepdims=True))
        probs /= probs.sum(axis=-1, keepdims=True)
        selected = np.where(unknown, probs[np.arange(len(cur)), sampled], np.inf)
        mask_len = max(1, min(np.sum(unknown) - 1, math.floor(unknown_at_start * ratio_masked)))
        confidence = np.log(selected) + choice_temperature * (1 - ratio) * gumbel
        cut = np.sort(confidence)[mask_len]
        cur = np.where(confidence < cut, mask_id, sampled)


@pytest.mark.parametrize("temperature, mask_column", [(1.0, False), (0.7, True), (0.0, False), (0.0, True)])
@pytest.mark.parametrize("seed", [0, 5])
def test_matches_reference_transcription(fake_masked, temperature, mask_column, seed):
    net = fake_masked(batch=1, seq_len=16, mask_column=mask_column, mask_bias=3.0)
    start = np.full(16, net.mask_id)
    start[[2, 9]] = [4, 1]  # a little inpainting, so known tokens take the +inf path too
    want = reference_maskgit(net, start, 2, steps=8, choice_temperature=4.5, temperature=temperature, seed=seed)
    cfg = MaskedDecodeConfig(steps=8, temperature=temperature, seed=seed)
    got = decode_masked(net, net.meta, {"class_id": np.array([2])}, cfg, init_tokens=start[None])
    np.testing.assert_array_equal(got.tokens[0], want)


def expected_gamma(schedule, r, n):
    gamma = {
        "cosine": math.cos(math.pi / 2 * r),
        "linear": 1 - r,
        "square": 1 - r**2,
        "pow3": 1 - r**3,
        "log": -math.log2(r) / math.log2(n),
        "exp": 1 - 2 ** (-math.log2(n) * (1 - r)),
    }[schedule]
    return min(max(gamma, 1e-6), 1.0)


@pytest.mark.parametrize("schedule", ["cosine", "linear", "square", "pow3", "log", "exp"])
def test_mask_counts_follow_schedule(fake_masked, schedule):
    net = fake_masked(batch=3, seq_len=16)
    start = np.full((3, 16), net.mask_id)
    start[1, :5] = 3  # 11 unknown
    start[2] = 7  # nothing unknown: left alone
    steps = 6
    cfg = MaskedDecodeConfig(steps=steps, schedule=schedule, seed=1)
    got = decode_masked(net, net.meta, {"class_id": np.array([0, 1, 2])}, cfg, init_tokens=start)
    for row, n0 in enumerate([16, 11, 0]):
        unknown, want = n0, []
        for t in range(steps - 1):
            if n0:
                # float32 product as the reference (tests/decode/test_schedule_float32.py): 16·cos(π/3)
                # at t = 3 is 7.9999995 there, so 7 tokens, not float64's 8
                gamma = np.float32(expected_gamma(schedule, float(np.float32(t + 1) / np.float32(steps)), n0))
                unknown = max(1, min(unknown - 1, math.floor(np.float32(n0) * gamma)))
            want.append(unknown)
        want.append(0)
        assert [int(m[row]) for m in got.masked_per_step] == want, (schedule, row)
    np.testing.assert_array_equal(got.tokens[2], start[2])
    assert got.steps_run == steps and got.state.step == steps


def test_known_tokens_never_change_and_output_has_no_mask(fake_masked):
    net = fake_masked(batch=2, seq_len=16)
    rng = np.random.default_rng(3)
    start = np.where(rng.random((2, 16)) < 0.4, rng.integers(0, net.vocab, (2, 16)), net.mask_id)
    known = start != net.mask_id
    seen = []

    def check(state):
        seen.append(state.step)
        np.testing.assert_array_equal(state.tokens[known], start[known])

    got = decode_masked(
        net, net.meta, {"class_id": np.array([0, 3])}, MaskedDecodeConfig(steps=5), init_tokens=start, callback=check
    )
    assert seen == [1, 2, 3, 4, 5]
    np.testing.assert_array_equal(got.tokens[known], start[known])
    assert not (got.tokens == net.mask_id).any() and got.tokens.max() < net.vocab


@pytest.mark.parametrize("temperature", [0.0, 1.0])
@pytest.mark.parametrize("mask_in_vocab", [False, True])
def test_mask_id_is_never_sampled(fake_masked, temperature, mask_in_vocab):
    net = fake_masked(batch=2, seq_len=16, mask_column=True, mask_bias=50.0)
    assert (net.row_logits(np.full(16, net.mask_id), 0).argmax(-1) == net.mask_id).all()
    # mask_in_vocab: the metadata counts the mask column in V, so only the mask id itself is banned.
    meta = {**net.meta, "vocab_size": net.vocab + 1} if mask_in_vocab else net.meta
    cfg = MaskedDecodeConfig(steps=4, temperature=temperature, guidance=2.0)
    got = decode_masked(net, meta, {"class_id": np.array([0, 1])}, cfg)
    assert got.tokens.dtype == np.int64
    assert not (got.tokens == net.mask_id).any() and (0 <= got.tokens).all() and (got.tokens < net.vocab).all()


@pytest.mark.parametrize("graph_batch_factor", [1, 2])
def test_guidance_zero_equals_unconditional(fake_masked, graph_batch_factor):
    net = fake_masked(batch=2 * graph_batch_factor)
    uncond = net.meta["conditioning"]["class_id"]["uncond"]
    cfg = MaskedDecodeConfig(steps=6, guidance=0.0, seed=2)
    guided = decode_masked(net, net.meta, {"class_id": np.array([0, 1])}, cfg)
    plain = decode_masked(
        fake_masked(batch=2),
        net.meta,
        {"class_id": np.array([uncond, uncond])},
        MaskedDecodeConfig(steps=6, guidance=1.0, seed=2),
    )
    np.testing.assert_array_equal(guided.tokens, plain.tokens)
    conditional = decode_masked(
        fake_masked(batch=2), net.meta, {"class_id": np.array([0, 1])}, MaskedDecodeConfig(steps=6, seed=2)
    )
    assert not np.array_equal(conditional.tokens, plain.tokens)  # the class matters at all


def test_guidance_one_makes_one_call_per_step_and_needs_no_uncond(fake_masked):
    net = fake_masked(batch=2)
    meta = {**net.meta, "conditioning": {"class_id": {"uncond": None}}}
    got = decode_masked(net, meta, {"class_id": np.array([0, 1])}, MaskedDecodeConfig(steps=7))
    assert net.calls == got.runtime_calls == got.nfe == 7


def test_graph_batch_2b_and_b_agree(fake_masked):
    cond = {"class_id": np.array([0, 3])}
    cfg = MaskedDecodeConfig(steps=6, guidance=3.0, seed=4)
    doubled, single = fake_masked(batch=4), fake_masked(batch=2)
    one_call = decode_masked(doubled, doubled.meta, cond, cfg)
    two_calls = decode_masked(single, single.meta, cond, cfg)
    np.testing.assert_array_equal(one_call.tokens, two_calls.tokens)
    assert (doubled.calls, single.calls) == (6, 12)
    assert one_call.nfe == two_calls.nfe == 6 and two_calls.runtime_calls == 12
    unguided = decode_masked(single, single.meta, cond, MaskedDecodeConfig(steps=6, seed=4))
    assert not np.array_equal(unguided.tokens, one_call.tokens)  # g = 3 does steer


def test_stop_and_resume_equals_uninterrupted(fake_masked):
    net = fake_masked(batch=2)
    cond = {"class_id": np.array([1, 2])}
    cfg = MaskedDecodeConfig(steps=8, guidance=2.0, seed=9)
    full = decode_masked(net, net.meta, cond, cfg)
    stopped = decode_masked(net, net.meta, cond, cfg, callback=lambda s: s.step < 3)
    assert stopped.steps_run == 3 and stopped.state.step == 3
    assert (stopped.tokens == net.mask_id).any()
    resumed = decode_masked(net, net.meta, cond, cfg, state=stopped.state)
    again = decode_masked(net, net.meta, cond, cfg, state=stopped.state)
    np.testing.assert_array_equal(resumed.tokens, full.tokens)
    np.testing.assert_array_equal(again.tokens, full.tokens)  # resuming left the saved state alone
    assert resumed.steps_run == 5 and resumed.state.step == 8


def test_callback_edit_is_kept(fake_masked):
    net = fake_masked(batch=1)
    cond = {"class_id": np.array([0])}

    def edit(state):
        if state.step == 2:
            state.tokens[state.tokens == net.mask_id] = 5  # "interrupt and edit": fill every hole

    got = decode_masked(net, net.meta, cond, MaskedDecodeConfig(steps=6), callback=edit)
    at_two = decode_masked(net, net.meta, cond, MaskedDecodeConfig(steps=6), callback=lambda s: s.step < 2)
    assert (at_two.tokens == net.mask_id).any()
    np.testing.assert_array_equal(got.tokens, np.where(at_two.tokens == net.mask_id, 5, at_two.tokens))
    assert [int(m[0]) for m in got.masked_per_step[2:]] == [0, 0, 0, 0]


def test_seed_controls_tokens(fake_masked):
    net = fake_masked(batch=2)
    cond = {"class_id": np.array([1, 1])}
    a, b, c = (decode_masked(net, net.meta, cond, MaskedDecodeConfig(seed=s)).tokens for s in (11, 11, 12))
    np.testing.assert_array_equal(a, b)
    assert not np.array_equal(a, c)


def test_unconditional_model_decodes_graph_batch(fake_masked):
    net = fake_masked(batch=3, conditioned=False)
    got = decode_masked(net, net.meta, {}, MaskedDecodeConfig(steps=4, temperature=0.0))
    assert got.tokens.shape == (3, 16) and not (got.tokens == net.mask_id).any()


# The fixture only hands out a class, so sharing it across examples is safe.
@settings(max_examples=30, deadline=None, database=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    steps=st.integers(1, 12),
    schedule=st.sampled_from(["cosine", "linear", "pow2.5", "log", "exp"]),
    known=st.lists(st.booleans(), min_size=8, max_size=8),
    temperature=st.sampled_from([0.0, 0.5, 1.0]),
    guidance=st.sampled_from([0.0, 1.0, 2.0]),
    seed=st.integers(0, 2**16),
)
def test_any_decode_keeps_known_tokens_and_unmasks_all(
    fake_masked, steps, schedule, known, temperature, guidance, seed
):
    net = fake_masked(batch=1, seq_len=8, mask_column=True, mask_bias=5.0)
    start = np.where(known, np.arange(8) % net.vocab, net.mask_id)[None]
    cfg = MaskedDecodeConfig(steps=steps, schedule=schedule, temperature=temperature, guidance=guidance, seed=seed)
    got = decode_masked(net, net.meta, {"class_id": np.array([1])}, cfg, init_tokens=start)
    assert not (got.tokens == net.mask_id).any()
    np.testing.assert_array_equal(got.tokens[start != net.mask_id], start[start != net.mask_id])
    counts = [int(m[0]) for m in got.masked_per_step]
    assert len(counts) == steps and counts[-1] == 0
    assert all(a >= b for a, b in zip([int((start == net.mask_id).sum())] + counts, counts))


def test_mask_ratio_decreases_within_bounds():
    r = np.linspace(0.01, 1.0, 50)
    for schedule in (*MASK_SCHEDULES, "pow1.5"):
        gamma = mask_ratio(schedule, r, 64)
        assert gamma.shape == r.shape and (gamma >= 1e-6).all() and (gamma <= 1).all(), schedule
        assert (np.diff(gamma) <= 0).all() and gamma[-1] == 1e-6, schedule
    np.testing.assert_allclose(mask_ratio("uniform", r, 1), mask_ratio("linear", r, 1))
    np.testing.assert_allclose(mask_ratio("log", 0.5, np.array([16, 256])), [0.25, 0.125])


@pytest.mark.parametrize(
    "kwargs, cond, needle",
    [
        ({"schedule": "zigzag"}, None, "'zigzag'.*cosine"),
        ({"steps": 0}, None, "steps=0.*>= 1"),
        ({"temperature": -1.0}, None, "temperature=-1.0"),
        ({}, {"label": np.array([0, 1])}, r"\['label'\].*\['class_id'\]"),
        ({}, {"class_id": np.array([[0], [1]])}, r"'class_id' is int64\[2, 1\].*int64\[2\]"),
        ({}, {"class_id": np.array([0.5, 1.0])}, r"'class_id' is float64"),
        ({"guidance": 2.0}, {"class_id": np.array([0, 1, 2])}, "graph batch 4 .* batch 3 .* 3 or 6"),
    ],
)
def test_bad_inputs_raise_one_clear_line(fake_masked, kwargs, cond, needle):
    net = fake_masked(batch=4)
    with pytest.raises(EdgekitError, match=needle) as info:
        decode_masked(net, net.meta, cond or {"class_id": np.array([0, 1])}, MaskedDecodeConfig(**kwargs))
    assert "\n" not in str(info.value)


def test_guidance_without_uncond_value_is_an_error(fake_masked):
    net = fake_masked(batch=4)
    meta = {**net.meta, "conditioning": {"class_id": {"uncond": None}}}
    with pytest.raises(EdgekitError, match="guidance=2.0 .*'class_id'.*guidance=1.0"):
        decode_masked(net, meta, {"class_id": np.array([0, 1])}, MaskedDecodeConfig(guidance=2.0))


def test_bad_init_tokens_are_errors(fake_masked):
    net = fake_masked(batch=2)
    cond = {"class_id": np.array([0, 1])}
    with pytest.raises(EdgekitError, match=r"token id 99; valid: 0\.\.11 or the mask id 12"):
        decode_masked(net, net.meta, cond, init_tokens=np.full((2, 16), 99))
    with pytest.raises(EdgekitError, match=r"batch sizes .*disagree"):
        decode_masked(net, net.meta, cond, init_tokens=np.full((3, 16), net.mask_id))
    with pytest.raises(EdgekitError, match=r"init_tokens is int64\[2, 15\]; valid: int64\[2, 16\]"):
        decode_masked(net, net.meta, cond, init_tokens=np.full((2, 15), net.mask_id))


def test_spacing_commits_the_highest_new_token_within_each_window_first():
    from edgekit.decode.masked import SPACED_BONUS, prefer_spaced

    conf = np.array([[-1.0, -0.5, -2.0, -0.1, -3.0, -0.2, np.inf]], np.float32)
    unknown = np.isfinite(conf)
    out = prefer_spaced(conf, unknown, 1)
    # -0.5 (pos 1) beats its neighbours -1.0, -2.0; -0.1 (pos 3) beats -2.0, -3.0; -0.2 (pos 5)
    # is the highest of -3.0, -0.2 and the known position 6 (never a competitor).
    assert [bool(v > SPACED_BONUS / 2) for v in out[0, :6]] == [False, True, False, True, False, True]
    assert np.isinf(out[0, 6]) and out[0, 0] == conf[0, 0]


def test_spacing_changes_which_tokens_a_step_keeps_and_zero_is_the_reference(fake_masked):
    from edgekit.errors import UsageError

    rt = fake_masked()
    meta, cond = rt.meta, {"class_id": np.array([1, 2])}
    base = decode_masked(rt, meta, cond, MaskedDecodeConfig(steps=4, seed=3))
    zero = decode_masked(rt, meta, cond, MaskedDecodeConfig(steps=4, seed=3, spacing=0))
    np.testing.assert_array_equal(base.tokens, zero.tokens)
    spaced = decode_masked(
        rt, meta, cond, MaskedDecodeConfig(steps=4, seed=3, spacing=2), callback=lambda s: s.step < 1
    )
    first = spaced.tokens[0]
    kept = np.flatnonzero(first != meta["mask_id"])
    assert len(kept) and np.all(np.diff(kept) > 2)  # the first step's few tokens are spread out
    with pytest.raises(UsageError, match="spacing"):
        MaskedDecodeConfig(spacing=-1)
