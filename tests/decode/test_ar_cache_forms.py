"""The AR step's three cache forms (edgekit.spec.AR_CACHE_IO) decode the same tokens: the
"layers" form (each layer's cache its own input, attention-mask input, only the new K/V out, the
loop writes the cache: what edgekit exports), the "loop" form (the same with the caches stacked,
as bundles exported before "layers") and the "graph" form (the graph writes slot pos), the same
weights exported each way and run on ORT."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("torch")

from edgekit.decode import ARDecodeConfig, decode_ar  # noqa: E402
from edgekit.errors import EdgekitError  # noqa: E402
from edgekit.runtimes.base import KeyedFeeds, RuntimeProxy  # noqa: E402
from edgekit.runtimes.memo import MemoRuntime, feed_digest  # noqa: E402
from edgekit.runtimes.ort import OrtRuntime  # noqa: E402
from edgekit.spec import ModelSpec, TensorSpec, ar_cache_feeds, ar_cache_form, kind_io  # noqa: E402
from tests.tiny_models import tiny_ar_spec  # noqa: E402

FORMS = ("layers", "loop", "graph")


@pytest.fixture(scope="module")
def forms(tmp_path_factory):
    """{form: (bundle, runtime)}: tiny AR (batch 2, two layers) exported in each cache form, verified."""
    import torch

    from edgekit.export.to_bundle import export_bundle

    root = tmp_path_factory.mktemp("ar-forms")
    out = {}
    for form in FORMS:
        with torch.random.fork_rng():
            torch.manual_seed(0)  # the same weights in every form
            spec = tiny_ar_spec(batch=2, cache=form, depth=2)
        b = export_bundle(spec, root / form, source="tiny-ar")
        out[form] = (b, OrtRuntime(b.path_of("fp32")))
    yield out
    for _, rt in out.values():
        rt.close()


@pytest.mark.parametrize(
    "cfg",
    [
        ARDecodeConfig(),
        ARDecodeConfig(temperature=1.0, top_k=4, seed=3),
        ARDecodeConfig(guidance=2.0, seed=1),
        ARDecodeConfig(length=5),
    ],
)
def test_every_cache_form_decodes_the_same_tokens(forms, cfg):
    # With guidance the batch-2 graph takes two calls per step (conditional rows, then unconditional).
    cond = {"class_id": np.array([0, 2], np.int64)}
    results = {form: decode_ar(rt, b.meta, cond, cfg) for form, (b, rt) in forms.items()}
    for form in ("layers", "loop"):
        np.testing.assert_array_equal(results[form].tokens, results["graph"].tokens, err_msg=form)
        assert results[form].nfe == results["graph"].nfe


def test_the_layers_graph_gives_the_loop_graphs_outputs_at_every_position(forms):
    """The exported "layers" graph, fed views of the stacked caches, gives the exported "loop"
    graph's logits and new K/V at every position of a decode (junk in the empty slots)."""
    (lb, layers), (_, loop) = forms["layers"], forms["loop"]
    rng = np.random.default_rng(0)
    k = rng.normal(0, 30, loop.inputs["k_cache"].shape).astype(np.float32)  # junk: the mask must hide it
    v = rng.normal(0, 30, k.shape).astype(np.float32)
    mask = np.zeros(loop.inputs["attn_mask"].shape, np.float32)
    token = np.full((2, 1), lb.meta["bos_id"], np.int64)
    cond = {"class_id": np.array([1, 0], np.int64)}
    for pos in range(lb.meta["max_len"]):
        common = {"token": token, "pos": np.array([pos], np.int64), "attn_mask": mask, **cond}
        want = {n: a.copy() for n, a in loop.run({**common, "k_cache": k, "v_cache": v}).items()}
        got = layers.run({**common, **ar_cache_feeds(layers.inputs, k, v)})
        for name in ("logits", "k_new", "v_new"):
            np.testing.assert_allclose(got[name], want[name], atol=1e-5, rtol=1e-5, err_msg=f"{name} at {pos}")
        k[:, :, :, pos], v[:, :, :, pos] = want["k_new"][:, :, :, 0], want["v_new"][:, :, :, 0]
        mask[0, pos] = 1
        token = want["logits"].argmax(-1)[:, None].astype(np.int64)


def test_each_form_is_recognised_by_its_io(forms):
    for form, (_, rt) in forms.items():
        assert ar_cache_form(rt.inputs, rt.outputs) == form
    _, rt = forms["layers"]
    assert rt.outputs["k_new"].shape[3] == 1 and rt.inputs["k_cache_1"].shape == rt.inputs["v_cache_0"].shape
    state_in, state_out = kind_io("ar", rt.inputs, rt.outputs)
    assert state_in == ("token", "pos", "k_cache_0", "v_cache_0", "k_cache_1", "v_cache_1", "attn_mask")
    assert state_out == ("logits", "k_new", "v_new")
    assert kind_io("ar", forms["loop"][1].inputs, forms["loop"][1].outputs)[0][-1] == "attn_mask"


@pytest.mark.parametrize(("form", "drop"), [("loop", "attn_mask"), ("layers", "attn_mask"), ("layers", "v_cache_1")])
def test_a_spec_without_one_of_its_forms_inputs_is_refused(form, drop):
    spec = tiny_ar_spec(batch=1, cache=form, depth=2)
    inputs = {k: v for k, v in spec.inputs.items() if k != drop}
    with pytest.raises(EdgekitError, match=drop):
        ModelSpec(name="x", kind="ar", module=spec.module, inputs=inputs, outputs=spec.outputs, meta=spec.meta)
    assert isinstance(spec.inputs[drop], TensorSpec)


@pytest.mark.parametrize("form", ["layers", "loop"])
def test_the_mask_forms_graphs_take_quantizations_pre_processing(forms, form, tmp_path):
    """quant_pre_process (symbolic shape inference) must type every tensor of the mask forms:
    a ReduceMax in its attention once made it fail, and INT8 then ran without fused MatMul+Add."""
    from onnxruntime.quantization.shape_inference import quant_pre_process

    b, _ = forms[form]
    quant_pre_process(str(b.path_of("fp32")), str(tmp_path / "pre.onnx"))
    assert (tmp_path / "pre.onnx").stat().st_size > 0


class _KeySpy(RuntimeProxy):
    """Per call: (the digest a memo keys it by, the digest of every byte it was fed) and which
    cache inputs came vouched (``KeyedFeeds``)."""

    def __init__(self, inner):
        super().__init__(inner, owns_inner=False)
        self.seen: list[tuple[str, str]] = []
        self.vouched: list[set[str]] = []

    def run(self, feeds):
        self.seen.append((feed_digest(feeds), feed_digest(dict(feeds))))
        self.vouched.append(set(feeds.content_keys) if isinstance(feeds, KeyedFeeds) else set())
        return self.inner.run(feeds)


@pytest.mark.parametrize("guidance", [1.0, 2.0])  # 2.0: two calls a step, each fed its rows of the caches
@pytest.mark.parametrize("form", ["layers", "loop"])
def test_the_loops_cache_key_names_the_caches_content_exactly(forms, form, guidance):
    # The loop keys its caches by the writes that made them, so a memo need not read 200 MB a
    # call: one key must never stand for two contents (a memo would answer wrongly), and a decode
    # repeated gets the same keys (else the memo never hits). Two keys for one content are allowed
    # (a miss): with guidance, one call's rows may match another decode's while the caches differ.
    b, rt = forms[form]
    spy = _KeySpy(rt)
    for rows, seed in (([0, 2], 0), ([0, 1], 0), ([0, 2], 0), ([0, 2], 5)):
        cfg = ARDecodeConfig(temperature=1.0, top_k=4, guidance=guidance, seed=seed)
        decode_ar(spy, b.meta, {"class_id": np.array(rows, np.int64)}, cfg)
    caches = {n for n in rt.inputs if "cache" in n}
    assert all(v == caches for v in spy.vouched)
    content_of: dict[str, str] = {}
    for keyed, content in spy.seen:
        assert content_of.setdefault(keyed, content) == content
    n = len(spy.seen) // 4
    assert spy.seen[:n] == spy.seen[2 * n : 3 * n]  # the repeated decode: the same keys
    assert len(content_of) > 2 * n  # the other decodes fed other caches


def test_a_memo_under_the_loop_answers_repeated_decodes_and_nothing_else(forms):
    b, rt = forms["layers"]
    memo = MemoRuntime(rt, name="memo")
    cfg = ARDecodeConfig(temperature=1.0, top_k=4, seed=2)
    for rows in ([0, 2], [0, 2], [1, 3]):
        cond = {"class_id": np.array(rows, np.int64)}
        misses = memo.misses
        got = decode_ar(memo, b.meta, cond, cfg)
        np.testing.assert_array_equal(got.tokens, decode_ar(rt, b.meta, cond, cfg).tokens)
        if rows == [0, 2] and misses:  # the second decode of [0, 2]: every call a hit
            assert memo.misses == misses
    assert memo.hits == memo.misses // 2
