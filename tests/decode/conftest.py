"""Tiny deterministic numpy networks behind the ``Runtime`` protocol, for the decode loop tests.

Each fake reuses one preallocated output buffer per output (as ORT IOBinding does), so a loop
that keeps a returned array past the next ``run`` or feeds it back as an input gets wrong
results. Every fake is row-wise: a row's output depends only on that row's inputs, so the same
rows give bit-identical outputs whatever the graph batch.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

# tests/ has no __init__ files and edgekit may not be installed: import it from the checkout.
_ROOT = Path(__file__).resolve().parents[2]
if str(_ROOT) not in sys.path:
    sys.path.insert(0, str(_ROOT))

from edgekit.runtimes.base import BaseRuntime  # noqa: E402
from edgekit.spec import TensorSpec  # noqa: E402


class FakeMasked(BaseRuntime):
    """tokens int64[Bg, L] + class_id int64[Bg] -> logits float32[Bg, L, W].

    logits[b, l] = pos[l] + cls[class_id[b]] + ctx[tokens[b, (l + 1) % L]]: a fixed random table,
    so predictions depend on position, class and the (partly masked) neighbour.
    W = V + 1 when ``mask_column`` (the mask id's own column, plus ``mask_bias`` on it).
    """

    name = "fake-masked"

    def __init__(
        self, batch=2, seq_len=16, vocab=12, n_classes=4, mask_column=False, mask_bias=0.0, conditioned=True, seed=0
    ):
        self.vocab, self.seq_len, self.mask_id, self.n_classes = vocab, seq_len, vocab, n_classes
        width = vocab + 1 if mask_column else vocab
        rng = np.random.default_rng(seed)
        self.pos = rng.normal(size=(seq_len, width)).astype(np.float32)
        self.cls = rng.normal(size=(n_classes + 1, width)).astype(np.float32)  # row n_classes: uncond
        self.ctx = rng.normal(size=(vocab + 1, width)).astype(np.float32)  # row vocab: the mask id
        if mask_column:
            self.pos[:, vocab] += mask_bias
        inputs = {"tokens": TensorSpec((batch, seq_len), "int64")}
        if conditioned:
            inputs["class_id"] = TensorSpec((batch,), "int64")
        super().__init__(inputs, {"logits": TensorSpec((batch, seq_len, width), "float32")})
        self.meta = {
            "vocab_size": vocab,
            "mask_id": self.mask_id,
            "seq_len": seq_len,
            "conditioning": {"class_id": {"uncond": n_classes}} if conditioned else {},
        }
        self.calls = 0
        self._out = np.empty(self.outputs["logits"].shape, dtype=np.float32)

    def row_logits(self, tokens: np.ndarray, class_id: int | None) -> np.ndarray:
        """float32 [L, W] for one row: the network as a plain function (for reference loops)."""
        out = self.pos + self.ctx[np.roll(tokens, -1)]
        return out + self.cls[class_id] if class_id is not None else out

    def _run_impl(self, feeds):
        self.calls += 1
        classes = feeds.get("class_id")
        for b, row in enumerate(feeds["tokens"]):
            self._out[b] = self.row_logits(row, None if classes is None else classes[b])
        return {"logits": self._out}


class FakeFlow(BaseRuntime):
    """x float32[Bg, T, C], t float32[Bg] + spk float32[Bg, C] -> v = rate · (spk − x).

    The exact flow from x0 is x(t) = spk + (x0 − spk) · exp(−rate · t): a closed form to check
    the solvers against. ``rate`` depends on nothing but the constructor, t is recorded.
    """

    name = "fake-flow"

    def __init__(self, batch=2, frames=5, channels=3, rate=1.5, uncond=0.0):
        self.rate = np.float32(rate)
        spec_x = TensorSpec((batch, frames, channels), "float32")
        inputs = {"x": spec_x, "t": TensorSpec((batch,), "float32"), "spk": TensorSpec((batch, channels), "float32")}
        super().__init__(inputs, {"v": spec_x})
        self.meta = {"channels": channels, "frames": frames, "conditioning": {"spk": {"uncond": uncond}}}
        self.calls = 0
        self.seen_t: list[float] = []
        self._out = np.empty(spec_x.shape, dtype=np.float32)

    def _run_impl(self, feeds):
        self.calls += 1
        self.seen_t.append(float(feeds["t"][0]))
        np.multiply(self.rate, feeds["spk"][:, None, :] - feeds["x"], out=self._out)
        return {"v": self._out}


class FakeAR(BaseRuntime):
    """token int64[Bg,1], pos int64[1], caches float32[NL,Bg,H,Lmax,HD] + class_id -> logits, caches.

    Slot ``pos`` of the caches gets an embedding of (token, class, pos); the logits depend on the
    sum of every cache slot written so far, so a cache that is lost, stale or aliased changes the
    tokens. Output buffers are reused and filled with NaN first, so feeding an output back as an
    input poisons the next step.
    """

    name = "fake-ar"
    n_layer, heads, head_dim = 2, 2, 3

    def __init__(self, batch=2, vocab=10, max_len=8, n_classes=3, seed=0):
        self.vocab, self.max_len, self.bos_id, self.n_classes = vocab, max_len, vocab, n_classes
        rng = np.random.default_rng(seed)
        entry = (self.n_layer, self.heads, self.head_dim)
        self.tok_k = rng.normal(size=(vocab + 1, *entry)).astype(np.float32)  # row vocab: bos
        self.tok_v = rng.normal(size=(vocab + 1, *entry)).astype(np.float32)
        self.cls_k = rng.normal(size=(n_classes + 1, *entry)).astype(np.float32)  # row n_classes: uncond
        self.pos_k = rng.normal(size=(max_len, *entry)).astype(np.float32)
        self.base = rng.normal(size=(max_len, vocab)).astype(np.float32)
        self.freq = rng.uniform(1.0, 4.0, size=vocab).astype(np.float32)
        cache = TensorSpec((self.n_layer, batch, self.heads, max_len, self.head_dim), "float32")
        inputs = {
            "token": TensorSpec((batch, 1), "int64"),
            "pos": TensorSpec((1,), "int64"),
            "k_cache": cache,
            "v_cache": cache,
            "class_id": TensorSpec((batch,), "int64"),
        }
        outputs = {"logits": TensorSpec((batch, vocab), "float32"), "k_cache_out": cache, "v_cache_out": cache}
        super().__init__(inputs, outputs)
        self.meta = {
            "vocab_size": vocab,
            "max_len": max_len,
            "bos_id": self.bos_id,
            "conditioning": {"class_id": {"uncond": n_classes}},
        }
        self.calls = 0
        self._out = {name: np.empty(spec.shape, dtype=np.float32) for name, spec in outputs.items()}

    def write_slot(self, k, v, b, token, class_id, pos):
        """Write slot ``pos`` of row ``b`` of caches [NL, B, H, Lmax, HD]."""
        k[:, b, :, pos] = self.tok_k[token] + self.cls_k[class_id] + self.pos_k[pos]
        v[:, b, :, pos] = self.tok_v[token] * self.cls_k[class_id]

    def logits_from(self, k, v, b, pos) -> np.ndarray:
        """float32 [V] logits of row ``b`` at ``pos`` from caches whose slots 0..pos are written."""
        s = k[:, b, :, : pos + 1].sum() + 0.5 * v[:, b, :, : pos + 1].sum()
        return self.base[pos] + np.sin(self.freq * s)

    def _run_impl(self, feeds):
        self.calls += 1
        out = self._out
        for buf in out.values():
            buf.fill(np.nan)
        np.copyto(out["k_cache_out"], feeds["k_cache"])
        np.copyto(out["v_cache_out"], feeds["v_cache"])
        pos = int(feeds["pos"][0])
        for b in range(feeds["token"].shape[0]):
            self.write_slot(out["k_cache_out"], out["v_cache_out"], b, feeds["token"][b, 0], feeds["class_id"][b], pos)
            out["logits"][b] = self.logits_from(out["k_cache_out"], out["v_cache_out"], b, pos)
        return out


@pytest.fixture
def fake_masked():
    return FakeMasked


@pytest.fixture
def fake_flow():
    return FakeFlow


@pytest.fixture
def fake_ar():
    return FakeAR
