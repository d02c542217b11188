"""The recording proxy sees every network call of every loop (steps, ODE stages, CFG rows, AR
positions), keeps copies, and stays under its byte bound."""

from __future__ import annotations

import numpy as np

from edgekit.decode.dispatch import decode, decode_config
from edgekit.decode.schedules import time_grid
from edgekit.runtimes.base import BaseRuntime
from edgekit.runtimes.recording import RecordingRuntime
from edgekit.spec import TensorSpec

V, L, T, C = 10, 12, 8, 4


class TinyMasked(BaseRuntime):
    """tokens int64[B, L] + class_id int64[B] -> logits float32[B, L, V], reusing one buffer."""

    name = "tiny-masked"

    def __init__(self, batch: int):
        super().__init__(
            {"tokens": TensorSpec((batch, L), "int64"), "class_id": TensorSpec((batch,), "int64")},
            {"logits": TensorSpec((batch, L, V), "float32")},
        )
        self.table = np.random.default_rng(0).normal(size=(V + 1, V)).astype(np.float32)
        self.out = np.empty((batch, L, V), np.float32)

    def _run_impl(self, feeds):
        self.out[:] = self.table[np.roll(feeds["tokens"], -1, axis=1)] + feeds["class_id"][:, None, None]
        return {"logits": self.out}


MASKED_META = {"vocab_size": V, "mask_id": V, "seq_len": L, "conditioning": {"class_id": {"uncond": 3}}}


class TinyFlow(BaseRuntime):
    """x float32[B, T, C], t float32[B], tokens int64[B, L] -> v = tokens-mean - x."""

    name = "tiny-flow"

    def __init__(self, batch: int):
        super().__init__(
            {
                "x": TensorSpec((batch, T, C), "float32"),
                "t": TensorSpec((batch,), "float32"),
                "tokens": TensorSpec((batch, L), "int64"),
            },
            {"v": TensorSpec((batch, T, C), "float32")},
        )

    def _run_impl(self, feeds):
        target = feeds["tokens"].mean(axis=1, keepdims=True)[:, :, None].astype(np.float32)
        return {"v": target - feeds["x"]}


FLOW_META = {"channels": C, "frames": T, "conditioning": {"tokens": {"uncond": V}}}


class TinyAR(BaseRuntime):
    name = "tiny-ar"

    def __init__(self, batch: int, max_len: int = 6):
        cache = TensorSpec((1, batch, 1, max_len, 2), "float32")
        super().__init__(
            {
                "token": TensorSpec((batch, 1), "int64"),
                "pos": TensorSpec((1,), "int64"),
                "k_cache": cache,
                "v_cache": cache,
                "class_id": TensorSpec((batch,), "int64"),
            },
            {"logits": TensorSpec((batch, V), "float32"), "k_cache_out": cache, "v_cache_out": cache},
        )

    def _run_impl(self, feeds):
        logits = np.zeros((len(feeds["token"]), V), np.float32)
        logits[np.arange(len(logits)), (feeds["token"][:, 0] + 1) % V] = 5.0
        k = feeds["k_cache"].copy()
        k[:, :, :, int(feeds["pos"][0])] = 1.0
        return {"logits": logits, "k_cache_out": k, "v_cache_out": k}


AR_META = {"vocab_size": V, "max_len": 6, "bos_id": V, "conditioning": {"class_id": {"uncond": 3}}}


class TinyARLayers(BaseRuntime):
    """The "layers" cache form: per layer k_cache_i / v_cache_i [B, 1, Lmax, 2], attn_mask ->
    logits, k_new / v_new [2, B, 1, 1, 2]; layer i's key at a position is (i + 1) * (pos + 1),
    its value the negative, so every layer's slot says whose it is."""

    name = "tiny-ar-layers"

    def __init__(self, batch: int, max_len: int = 6):
        cache = TensorSpec((batch, 1, max_len, 2), "float32")
        inputs = {"token": TensorSpec((batch, 1), "int64"), "pos": TensorSpec((1,), "int64")}
        inputs.update({f"{kv}_cache_{i}": cache for i in range(2) for kv in "kv"})
        inputs.update(attn_mask=TensorSpec((1, max_len), "float32"), class_id=TensorSpec((batch,), "int64"))
        new = TensorSpec((2, batch, 1, 1, 2), "float32")
        super().__init__(inputs, {"logits": TensorSpec((batch, V), "float32"), "k_new": new, "v_new": new})

    def _run_impl(self, feeds):
        b, pos = len(feeds["token"]), int(feeds["pos"][0])
        logits = np.zeros((b, V), np.float32)
        logits[np.arange(b), (feeds["token"][:, 0] + 1) % V] = 5.0
        k = np.stack([np.full((b, 1, 1, 2), (i + 1) * (pos + 1), np.float32) for i in range(2)])
        return {"logits": logits, "k_new": k, "v_new": -k}


def _decode(kind, runtime, meta, cond, **options):
    rec = RecordingRuntime(runtime, kind, meta)
    cfg = decode_config(kind, {}, options, seed=3)
    result = decode(kind, rec, meta, cond, cfg)
    return rec, result


def test_masked_every_step_recorded_as_a_copy_with_its_mask_share():
    rec, result = _decode("masked", TinyMasked(2), MASKED_META, {"class_id": np.array([0, 1])}, steps=6)
    assert len(rec.feeds) == result.runtime_calls == 6
    shares = [c.position for c in rec.calls]
    assert shares[0] == 1.0 and all(a > b for a, b in zip(shares, shares[1:]))  # the schedule unmasks
    # Copies, not the loop's reused buffers: step 0 still shows the all-mask input.
    assert (rec.feeds[0]["tokens"] == V).all() and not (rec.feeds[-1]["tokens"] == V).all()
    assert [c.call for c in rec.calls] == list(range(6))


def test_every_nth_call_is_recorded_and_the_decode_still_runs_every_call():
    """`every`: an AR step's feeds hold its KV cache, so a long decode recorded whole ran a 24 GiB
    host out of memory (the int8 length sweep at 1024 tokens); keeping calls 0, n, 2n, ... of
    each decode bounds it while the loop still sees every call's outputs."""
    rec = RecordingRuntime(TinyMasked(2), "masked", MASKED_META, every=4)
    result = decode(
        "masked", rec, MASKED_META, {"class_id": np.array([0, 1])}, decode_config("masked", {}, {"steps": 10}, seed=3)
    )
    assert result.runtime_calls == 10
    assert [c.call for c in rec.calls] == [0, 4, 8] and len(rec.feeds) == 3
    assert (rec.feeds[0]["tokens"] == V).all()  # call 0 (all masked) is always kept
    rec.begin_decode()
    decode(
        "masked", rec, MASKED_META, {"class_id": np.array([0, 1])}, decode_config("masked", {}, {"steps": 10}, seed=4)
    )
    assert [(c.decode, c.call) for c in rec.calls][3:] == [(1, 0), (1, 4), (1, 8)]  # the count restarts per decode


def test_a_recording_past_its_byte_bound_keeps_every_nth_call_of_every_decode():
    """quantize recorded every call of its calibration decodes: an AR model's step feeds hold the
    whole KV cache (the demo baseline at 1024 tokens, batch 8: 34 GB per decode). Past
    ``max_bytes`` the stride doubles and the calls off it are dropped, in every decode alike."""
    rec = RecordingRuntime(TinyMasked(2), "masked", MASKED_META)
    decode(
        "masked", rec, MASKED_META, {"class_id": np.array([0, 1])}, decode_config("masked", {}, {"steps": 10}, seed=3)
    )
    per_call = sum(a.nbytes for a in rec.feeds[0].values())
    bounded = RecordingRuntime(TinyMasked(2), "masked", MASKED_META, max_bytes=4 * per_call)
    for seed in (3, 4):
        bounded.begin_decode()
        result = decode(
            "masked",
            bounded,
            MASKED_META,
            {"class_id": np.array([0, 1])},
            decode_config("masked", {}, {"steps": 10}, seed=seed),
        )
        assert result.runtime_calls == 10  # the loop still ran every call
    assert bounded.every == 8 and [(c.decode, c.call) for c in bounded.calls] == [(0, 0), (0, 8), (1, 0), (1, 8)]
    assert sum(a.nbytes for f in bounded.feeds for a in f.values()) <= 4 * per_call


def test_a_bound_under_one_call_per_decode_keeps_each_decodes_first_call_and_ends():
    """Thinning never drops a decode's first call: a bound those alone pass (three decodes' first
    calls against one call's bytes) kept doubling the stride for good; now it stops there."""
    rec = RecordingRuntime(TinyMasked(2), "masked", MASKED_META, max_bytes=1)
    for seed in (3, 4, 5):
        rec.begin_decode()
        decode(
            "masked",
            rec,
            MASKED_META,
            {"class_id": np.array([0, 1])},
            decode_config("masked", {}, {"steps": 10}, seed=seed),
        )
    assert [(c.decode, c.call) for c in rec.calls] == [(0, 0), (1, 0), (2, 0)] and rec.every >= 16


def test_masked_cfg_on_a_batch_b_graph_records_conditional_and_unconditional_calls():
    rec, result = _decode("masked", TinyMasked(2), MASKED_META, {"class_id": np.array([0, 1])}, steps=4, guidance=3.0)
    assert len(rec.feeds) == result.runtime_calls == 8  # cond call + uncond call per step
    classes = [tuple(f["class_id"]) for f in rec.feeds]
    assert classes.count((0, 1)) == 4 and classes.count((3, 3)) == 4


def test_flow_every_ode_evaluation_and_cfg_row_recorded():
    rec, result = _decode(
        "flow",
        TinyFlow(4),
        FLOW_META,
        {"tokens": np.ones((2, L), np.int64)},
        steps=3,
        solver="midpoint",
        grid="cosine",
        guidance=2.0,
    )
    assert len(rec.feeds) == result.nfe == 6  # 3 steps x 2 evaluations, cond + uncond rows in one call
    grid = time_grid("cosine", 3)
    expected = sorted([*grid[:-1], *(grid[:-1] + np.diff(grid) / 2)])
    np.testing.assert_allclose(sorted(c.position for c in rec.calls), expected, atol=1e-6)
    for feed in rec.feeds:
        assert (feed["tokens"][:2] == 1).all() and (feed["tokens"][2:] == V).all()  # CFG rows included


def test_ar_every_position_recorded():
    rec, result = _decode("ar", TinyAR(2), AR_META, {"class_id": np.array([0, 1])}, temperature=0.0)
    assert [c.position for c in rec.calls] == [0, 1, 2, 3, 4, 5]
    assert rec.feeds[0]["k_cache"].sum() == 0 and rec.feeds[3]["k_cache"].sum() > 0  # copies per step


def test_ar_layers_form_records_each_calls_own_layer_caches(tmp_path):
    """The "layers" form is fed views of the loop's one stacked cache (``ar_cache_feeds``), which
    the loop writes after every call: a recording, in memory or spilled, holds each call's own
    per-layer caches, each layer its own slice (never another layer's, never a later call's)."""
    for spill in (None, tmp_path / "calls"):
        rec = RecordingRuntime(TinyARLayers(2), "ar", AR_META, spill=spill)
        result = decode("ar", rec, AR_META, {"class_id": np.array([0, 1])}, decode_config("ar", {}, {}, seed=3))
        assert result.runtime_calls == len(rec.feeds) == 6
        for call, feed in enumerate(rec.feeds):
            for layer in range(2):
                want = np.zeros((2, 1, 6, 2), np.float32)
                want[:, :, :call] = ((layer + 1) * np.arange(1, call + 1, dtype=np.float32))[:, None]
                np.testing.assert_array_equal(feed[f"k_cache_{layer}"], want, err_msg=f"call {call} layer {layer}")
                np.testing.assert_array_equal(feed[f"v_cache_{layer}"], -want)
            assert feed["attn_mask"].sum() == call


def test_a_spilled_recording_reads_back_what_an_in_memory_one_holds_and_holds_no_call(tmp_path):
    """``spill``: the kept feeds wait on disk (quantize's recording of an AR model, 1.5 GiB of KV
    caches at 256 tokens, sat in memory to the end of the run). The same calls come back, thinned
    alike past the byte bound, the dropped calls' files go, and nothing of a call stays in memory."""
    from edgekit.runtimes.recording import SpilledFeeds, pick

    def record(**kwargs):
        rec = RecordingRuntime(TinyMasked(2), "masked", MASKED_META, **kwargs)
        for seed in (3, 4):
            rec.begin_decode()
            cfg = decode_config("masked", {}, {"steps": 10}, seed=seed)
            decode("masked", rec, MASKED_META, {"class_id": np.array([0, 1])}, cfg)
        return rec

    per_call = sum(a.nbytes for a in record().feeds[0].values())
    plain = record(max_bytes=4 * per_call)
    spilled = record(max_bytes=4 * per_call, spill=tmp_path / "calls")
    assert isinstance(spilled.feeds, SpilledFeeds)
    assert spilled.calls == plain.calls and spilled.every == plain.every == 8
    assert len(spilled.feeds) == len(plain.feeds) == 4
    for mine, theirs in zip(spilled.feeds, plain.feeds):
        assert mine.keys() == theirs.keys()
        assert all(np.array_equal(mine[k], theirs[k]) and mine[k].dtype == theirs[k].dtype for k in mine)
    assert len(list((tmp_path / "calls").iterdir())) == 4  # the thinned calls' files are gone
    assert not any(isinstance(v, np.ndarray) for v in vars(spilled.feeds).values())
    assert [f["tokens"].tolist() for f in spilled.feeds[1:3]] == [f["tokens"].tolist() for f in plain.feeds[1:3]]
    view = pick(spilled.feeds, [3, 0])
    assert isinstance(view, SpilledFeeds) and np.array_equal(view[0]["tokens"], plain.feeds[3]["tokens"])
    assert pick(plain.feeds, [3, 0])[1] is plain.feeds[0]


def test_spilled_feeds_take_any_input_name(tmp_path):
    from edgekit.runtimes.recording import SpilledFeeds

    feeds = SpilledFeeds(tmp_path)
    feeds.append({"file": np.arange(3), "a/b:0": np.ones((2, 2), np.float16)})  # np.savez's own argument, a path
    (back,) = list(feeds)
    assert list(back) == ["file", "a/b:0"] and back["a/b:0"].dtype == np.float16


def test_a_subset_reads_the_same_files_and_never_overwrites_one(tmp_path):
    from edgekit.runtimes.recording import SpilledFeeds

    feeds = SpilledFeeds(tmp_path / "calls")
    for i in range(4):
        feeds.append({"x": np.full((2,), i, np.float32)})
    view = feeds.subset([3, 1])
    assert [int(f["x"][0]) for f in view] == [3, 1]
    view.append({"x": np.full((2,), 9, np.float32)})  # a new file, not one of the recording's
    assert [int(f["x"][0]) for f in feeds] == [0, 1, 2, 3] and int(view[2]["x"][0]) == 9
