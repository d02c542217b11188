import pytest

torch = pytest.importorskip("torch")

from edgekit.errors import EdgekitError  # noqa: E402
from edgekit.models import load_spec  # noqa: E402
from edgekit.models.ar import (  # noqa: E402
    ARConfig,
    ARLayersStep,
    ARLoopStep,
    ARStep,
    CausalTransformer,
    ar_io,
    ar_step,
)
from edgekit.models.flow import FlowConfig, FlowDecoder  # noqa: E402
from edgekit.models.masked import MaskedConfig, MaskedTransformer  # noqa: E402
from edgekit.spec import ModelSpec, ar_cache_feeds  # noqa: E402

SMALL = dict(dim=32, depth=2, heads=2)


def test_masked_logits_cover_codebook_only():
    cfg = MaskedConfig(vocab_size=10, seq_len=6, num_classes=3, **SMALL)
    m = MaskedTransformer(cfg).eval()
    tokens = torch.full((2, 6), cfg.mask_id)
    logits = m(tokens, torch.tensor([0, cfg.uncond_class]))
    assert logits.shape == (2, 6, 10)  # the mask id (10) has no column: it can never be sampled


def test_masked_is_bidirectional():
    torch.manual_seed(0)
    m = MaskedTransformer(MaskedConfig(vocab_size=10, seq_len=6, num_classes=3, **SMALL)).eval()
    a = torch.tensor([[1, 2, 3, 4, 5, 6]])
    b = a.clone()
    b[0, 5] = 0
    with torch.no_grad():
        assert not torch.allclose(m(a, torch.tensor([0]))[0, 0], m(b, torch.tensor([0]))[0, 0])


def _ar_sequences() -> tuple[ARConfig, CausalTransformer, torch.Tensor, torch.Tensor]:
    """A seeded small AR model, and 2 rows of its step inputs (BOS + 7 random tokens) with their
    class ids: (cfg, model, inputs int64[2, 8], class_id int64[2])."""
    torch.manual_seed(0)
    cfg = ARConfig(vocab_size=10, max_len=8, num_classes=3, **SMALL)
    model = CausalTransformer(cfg).eval()
    tokens = torch.randint(0, 10, (2, 8))
    inputs = torch.cat([torch.full((2, 1), cfg.bos_id), tokens[:, :-1]], dim=1)
    return cfg, model, inputs, torch.tensor([1, 2])


def test_ar_step_with_static_cache_equals_full_causal_forward():
    cfg, model, inputs, cls = _ar_sequences()
    B = len(inputs)
    step = ARStep(model).eval()
    with torch.no_grad():
        full = model(inputs, cls)  # (B, 8, V)
        k = torch.zeros(cfg.depth, B, cfg.heads, cfg.max_len, cfg.head_dim)
        v = torch.zeros_like(k)
        for pos in range(8):
            logits, k, v = step(inputs[:, pos : pos + 1], torch.tensor([pos]), k, v, cls)
            torch.testing.assert_close(logits, full[:, pos], atol=1e-5, rtol=1e-5)


def test_ar_cache_slots_after_pos_are_ignored():
    torch.manual_seed(0)
    cfg = ARConfig(vocab_size=10, max_len=8, num_classes=3, **SMALL)
    step = ARStep(CausalTransformer(cfg)).eval()
    k = torch.zeros(cfg.depth, 1, cfg.heads, cfg.max_len, cfg.head_dim)
    junk = k.clone()
    junk[..., 3:, :] = 100.0  # stale entries beyond pos must not leak in
    args = (torch.tensor([[4]]), torch.tensor([2]))
    with torch.no_grad():
        a = step(*args, k, k, torch.tensor([0]))[0]
        b = step(*args, junk, junk, torch.tensor([0]))[0]
    torch.testing.assert_close(a, b)


def test_ar_loop_form_step_equals_full_causal_forward():
    """The NPU form: the loop writes k_new/v_new at slot pos and unmasks it; same logits as the
    full causal forward (the still-empty slots get weight 0)."""
    cfg, model, inputs, cls = _ar_sequences()
    B = len(inputs)
    step = ARLoopStep(model).eval()
    with torch.no_grad():
        full = model(inputs, cls)
        k = torch.zeros(cfg.depth, B, cfg.heads, cfg.max_len, cfg.head_dim)
        v = torch.zeros_like(k)
        mask = torch.zeros(1, cfg.max_len)
        for pos in range(8):
            logits, k_new, v_new = step(inputs[:, pos : pos + 1], torch.tensor([pos]), k, v, mask, cls)
            assert k_new.shape == (cfg.depth, B, cfg.heads, 1, cfg.head_dim)
            torch.testing.assert_close(logits, full[:, pos], atol=1e-5, rtol=1e-5)
            k[:, :, :, pos], v[:, :, :, pos] = k_new[:, :, :, 0], v_new[:, :, :, 0]
            mask[0, pos] = 1


def test_ar_layers_form_step_equals_the_loop_form_at_every_position():
    """The "layers" form (each layer's cache its own input, attention without joining the cache
    to the token's key) gives the loop form's logits and new K/V at every position, half-filled
    caches with junk in the empty slots included, and the full causal forward's logits."""
    cfg, model, inputs, cls = _ar_sequences()
    B = len(inputs)
    loop, layers = ARLoopStep(model).eval(), ARLayersStep(model).eval()
    with torch.no_grad():
        full = model(inputs, cls)
        k = torch.randn(cfg.depth, B, cfg.heads, cfg.max_len, cfg.head_dim) * 50  # junk in the empty slots
        v = torch.randn_like(k) * 50
        mask = torch.zeros(1, cfg.max_len)
        for pos in range(8):
            args = (inputs[:, pos : pos + 1], torch.tensor([pos]))
            want = loop(*args, k, v, mask, cls)
            caches = ar_cache_feeds({"k_cache_0": None}, k, v).values()  # k_cache_0, v_cache_0, k_cache_1, ...
            got = layers(*args, *caches, mask, cls)
            for name, w, g in zip(("logits", "k_new", "v_new"), want, got, strict=True):
                torch.testing.assert_close(g, w, atol=1e-6, rtol=1e-5, msg=f"{name} at pos {pos}")
            torch.testing.assert_close(got[0], full[:, pos], atol=1e-5, rtol=1e-5)
            k[:, :, :, pos], v[:, :, :, pos] = got[1][:, :, :, 0], got[2][:, :, :, 0]
            mask[0, pos] = 1


def test_ar_io_names_each_cache_form_and_the_step_module_matches():
    cfg = ARConfig(vocab_size=10, max_len=8, num_classes=3, **SMALL)
    model = CausalTransformer(cfg)
    per_layer = [f"{kv}_cache_{i}" for i in range(cfg.depth) for kv in "kv"]
    for form, caches, extra_in, outs, step in (
        ("layers", per_layer, ["attn_mask"], ["logits", "k_new", "v_new"], ARLayersStep),
        ("loop", ["k_cache", "v_cache"], ["attn_mask"], ["logits", "k_new", "v_new"], ARLoopStep),
        ("graph", ["k_cache", "v_cache"], [], ["logits", "k_cache_out", "v_cache_out"], ARStep),
    ):
        inputs, outputs = ar_io(cfg, 2, form)
        assert list(inputs) == ["token", "pos", *caches, *extra_in, "class_id"]
        assert list(outputs) == outs
        assert type(ar_step(model, form)) is step
    assert outputs["k_cache_out"].shape == (cfg.depth, 2, cfg.heads, cfg.max_len, cfg.head_dim)
    assert ar_io(cfg, 2)[0]["k_cache_1"].shape == (2, cfg.heads, cfg.max_len, cfg.head_dim)  # "layers" by default
    assert type(ar_step(model)) is ARLayersStep
    with pytest.raises(EdgekitError, match="valid: graph, loop, layers"):
        ar_step(model, "ring")


def test_flow_shapes_and_time_dependence():
    torch.manual_seed(0)
    cfg = FlowConfig(channels=8, seq_len=4, frames_per_token=2, vocab_size=10, dim=32, depth=2, heads=2)
    m = FlowDecoder(cfg).eval()
    for p in m.parameters():  # leave adaLN-zero: make every path live for the test
        torch.nn.init.normal_(p, std=0.1)
    x = torch.randn(2, cfg.frames, 8)
    tok = torch.randint(0, 11, (2, 4))
    with torch.no_grad():
        v0 = m(x, torch.zeros(2), tok)
        v1 = m(x, torch.ones(2), tok)
    assert v0.shape == (2, 8, 8)
    assert not torch.allclose(v0, v1)


@pytest.mark.parametrize("name,kind", [("masked-demo", "masked"), ("flow-demo", "flow"), ("ar-demo", "ar")])
def test_builtin_specs(name, kind):
    spec = load_spec(name, batch=3)
    assert isinstance(spec, ModelSpec) and spec.kind == kind and spec.batch == 3
    assert spec.ground_truth in ("corpus-tokens", "corpus-frames")


def test_user_factory_errors(tmp_path):
    with pytest.raises(EdgekitError, match="not a known model"):
        load_spec("no-such-model")
    with pytest.raises(EdgekitError, match="does not exist"):
        load_spec(str(tmp_path / "missing.py") + ":f")
    bad = tmp_path / "bad.py"
    bad.write_text(
        "def f(batch=1):\n    return 42\n\ndef g(batch=1):\n    raise RuntimeError('kaput')\n\ndef h():\n    return 1\n"
    )
    with pytest.raises(EdgekitError, match="returned int, not an edgekit.ModelSpec"):
        load_spec(f"{bad}:f")
    with pytest.raises(EdgekitError, match="raised RuntimeError: kaput"):
        load_spec(f"{bad}:g")
    with pytest.raises(EdgekitError, match="takes no 'batch'"):
        load_spec(f"{bad}:h", batch=2)
    with pytest.raises(EdgekitError, match="has no function 'nope'"):
        load_spec(f"{bad}:nope")


def test_spec_validation():
    from edgekit.spec import TensorSpec

    with pytest.raises(EdgekitError, match="not static"):
        TensorSpec((1, -1), "float32")
    with pytest.raises(EdgekitError, match="lacks metadata"):
        ModelSpec(
            "m",
            "masked",
            None,
            {"tokens": TensorSpec((1, 2), "int64")},
            {"logits": TensorSpec((1, 2, 3), "float32")},
            meta={},
        )
    with pytest.raises(EdgekitError, match="no input named"):
        ModelSpec(
            "m",
            "flow",
            None,
            {"y": TensorSpec((1, 2, 3), "float32")},
            {"v": TensorSpec((1, 2, 3), "float32")},
            meta={"channels": 3, "frames": 2, "conditioning": {}},
        )
