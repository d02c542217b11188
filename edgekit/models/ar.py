"""Autoregressive baseline: a causal transformer of the masked generator's width, depth and
vocabulary, decoded one token per step with a static-size KV cache.

The step graph comes in the three cache forms of ``edgekit.spec.AR_CACHE_IO``:
- ``ARLayersStep`` ("layers", what the demo exports; the NPU form without cache copies): token
  int64[B, 1] (BOS = V at position 0), pos int64[1], per layer k_cache_i / v_cache_i
  float32[B, heads, max_len, head_dim] (slots 0..pos-1 filled by the loop), attn_mask
  float32[1, max_len] (1 on those slots, 0 on the rest), class_id int64[B] -> logits
  float32[B, V], k_new / v_new float32[n_layer, B, heads, 1, head_dim] (this token's keys and
  values: the loop writes them at slot ``pos``).
- ``ARLoopStep`` ("loop", bundles exported before "layers"): the same, with the caches stacked
  into k_cache / v_cache float32[n_layer, B, heads, max_len, head_dim].
- ``ARStep`` ("graph"): the stacked caches, no attn_mask -> logits, k_cache_out, v_cache_out
  (slot ``pos`` written by a one-hot blend, not a scatter, so every shape is static).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import nn

from edgekit.errors import EdgekitError, one_of
from edgekit.models._blocks import Block, init_gpt2
from edgekit.spec import AR_CACHE_FORMS, TensorSpec, ar_layer_cache_names

NEG = -1e4  # additive mask: large enough to zero a softmax weight, small enough for fp16


@dataclass(frozen=True)
class ARConfig:
    vocab_size: int = 64  # same codebook as the masked generator; embedding row V is BOS
    max_len: int = 64  # static KV-cache length = the longest sequence it decodes
    num_classes: int = 8  # same conditioning as the masked generator (+1 unconditional row)
    dim: int = 128  # same width/depth/heads as MaskedConfig: a like-for-like baseline
    depth: int = 4
    heads: int = 4
    mlp_ratio: int = 4

    @property
    def bos_id(self) -> int:
        return self.vocab_size

    @property
    def head_dim(self) -> int:
        return self.dim // self.heads

    @property
    def cache_shape(self) -> tuple[int, int, int, int]:
        """(n_layer, heads, max_len, head_dim); the graph inserts batch after n_layer."""
        return (self.depth, self.heads, self.max_len, self.head_dim)


class CausalTransformer(nn.Module):
    def __init__(self, cfg: ARConfig):
        super().__init__()
        self.cfg = cfg
        self.tok_emb = nn.Embedding(cfg.vocab_size + 1, cfg.dim)
        self.pos_emb = nn.Parameter(torch.zeros(1, cfg.max_len, cfg.dim))
        self.cls_emb = nn.Embedding(cfg.num_classes + 1, cfg.dim)
        self.blocks = nn.ModuleList(Block(cfg.dim, cfg.heads, cfg.mlp_ratio) for _ in range(cfg.depth))
        self.ln_f = nn.LayerNorm(cfg.dim)
        self.head = nn.Linear(cfg.dim, cfg.vocab_size)
        init_gpt2(self, cfg.depth)

    def forward(self, inputs: torch.Tensor, class_id: torch.Tensor) -> torch.Tensor:
        """Full causal forward (training and reference). inputs int64[B, T] = BOS + tokens[:-1],
        class_id int64[B] -> logits float32[B, T, V] (position i predicts token i)."""
        T = inputs.shape[1]
        x = self.tok_emb(inputs) + self.pos_emb[:, :T] + self.cls_emb(class_id)[:, None, :]
        causal = torch.full((T, T), NEG, device=inputs.device).triu(1)
        for block in self.blocks:
            x = block(x, causal)
        return self.head(self.ln_f(x))


class ARStep(nn.Module):
    """The per-token step with a static KV cache; wraps a trained ``CausalTransformer``."""

    def __init__(self, model: CausalTransformer):
        super().__init__()
        self.model = model

    def forward(self, token, pos, k_cache, v_cache, class_id):
        m, cfg = self.model, self.model.cfg
        slots = torch.arange(cfg.max_len, device=token.device)
        write = (slots == pos).to(k_cache.dtype)[:, None]  # (Lmax, 1): one-hot at pos
        bias = torch.where(slots <= pos, 0.0, NEG).to(k_cache.dtype)  # (Lmax,): only the past
        x = m.tok_emb(token) + m.pos_emb[0].index_select(0, pos)[None] + m.cls_emb(class_id)[:, None, :]  # (B, 1, D)
        k_out, v_out = [], []
        for layer, block in enumerate(m.blocks):
            q, k, v = block.attn.split(block.ln1(x))  # (B, nh, 1, hs)
            kc = k_cache[layer] * (1 - write) + k * write  # (B, nh, Lmax, hs)
            vc = v_cache[layer] * (1 - write) + v * write
            x = x + block.attn.attend(q, kc, vc, bias)
            x = x + block.mlp(block.ln2(x))
            k_out.append(kc)
            v_out.append(vc)
        logits = m.head(m.ln_f(x))[:, 0]  # (B, V)
        return logits, torch.stack(k_out), torch.stack(v_out)


class ARLoopStep(nn.Module):
    """The per-token step whose cache the decode loop owns (the "loop" form); wraps a trained
    ``CausalTransformer``. Attention runs over the Lmax cache slots plus this token's own key,
    so the graph never writes the cache and computes nothing from ``pos`` but the position
    embedding's row (the usual NPU form of a KV-cache step).

    ``attn_mask`` float32[1, Lmax] is a keep mask (1 = filled slot, 0 = empty), applied to the
    softmax's weights (then renormalised) rather than as an additive -1e4: masked weights are
    exactly 0 whatever the scores' scale, and no tensor has to span a 1e4 range (8-bit attention
    scores would keep a step of ~40: with an additive -1e4 mask input the demo AR's 8-bit QDQ
    gave the FP32 greedy tokens on 12 % of positions on the HTP). No ReduceMax: onnxruntime's
    symbolic shape inference (quant_pre_process) cannot type its opset-18 form."""

    def __init__(self, model: CausalTransformer):
        super().__init__()
        self.model = model

    def forward(self, token, pos, k_cache, v_cache, attn_mask, class_id):
        m = self.model
        x = m.tok_emb(token) + m.pos_emb[0].index_select(0, pos)[None] + m.cls_emb(class_id)[:, None, :]  # (B, 1, D)
        keep = torch.cat([attn_mask, torch.ones_like(attn_mask[:, :1])], dim=-1)  # (1, Lmax + 1): self always kept
        k_new, v_new = [], []
        for layer, block in enumerate(m.blocks):
            q, k, v = block.attn.split(block.ln1(x))  # (B, nh, 1, hs)
            keys = torch.cat([k_cache[layer], k], dim=2)  # (B, nh, Lmax + 1, hs)
            values = torch.cat([v_cache[layer], v], dim=2)
            x = x + _attend_kept(block.attn, q, keys, values, keep)
            x = x + block.mlp(block.ln2(x))
            k_new.append(k)
            v_new.append(v)
        return m.head(m.ln_f(x))[:, 0], torch.stack(k_new), torch.stack(v_new)


class ARLayersStep(nn.Module):
    """The "loop" step with each layer's cache its own input (the "layers" form); wraps a trained
    ``CausalTransformer``. forward(token, pos, k_cache_0, v_cache_0, k_cache_1, ..., attn_mask,
    class_id), the order of ``ar_io(cfg, batch, "layers")``.

    The same attention as ``ARLoopStep`` (``_kept_probs``: the keep-mask softmax), computed without
    joining the cache to the token's key: scores over the cache slots (q @ Kc^T, which reads the
    cache input in place: ORT fuses the transpose into its MatMul) and the token's own score
    (q . k) join as (B, nh, 1, Lmax + 1) scores, and y = probs[:Lmax] @ Vc + probs[Lmax] * v.
    No Gather of a layer's slice, no Concat of a cache: ~100 MB a forward less copied at
    GPT-2-medium size (docs/large-models.md)."""

    def __init__(self, model: CausalTransformer):
        super().__init__()
        self.model = model

    def forward(self, token, pos, *rest):
        m = self.model
        caches, (attn_mask, class_id) = rest[:-2], rest[-2:]  # (k_cache_0, v_cache_0, ...), then the rest
        x = m.tok_emb(token) + m.pos_emb[0].index_select(0, pos)[None] + m.cls_emb(class_id)[:, None, :]  # (B, 1, D)
        keep = torch.cat([attn_mask, torch.ones_like(attn_mask[:, :1])], dim=-1)  # (1, Lmax + 1): self always kept
        k_new, v_new = [], []
        for layer, block in enumerate(m.blocks):
            q, k, v = block.attn.split(block.ln1(x))  # (B, nh, 1, hs)
            kc, vc = caches[2 * layer], caches[2 * layer + 1]  # (B, nh, Lmax, hs)
            x = x + _attend_cache_and_self(block.attn, q, kc, vc, k, v, keep)
            x = x + block.mlp(block.ln2(x))
            k_new.append(k)
            v_new.append(v)
        return m.head(m.ln_f(x))[:, 0], torch.stack(k_new), torch.stack(v_new)


def _kept_probs(scores, keep):
    """Softmax over the kept slots only. scores (B, nh, 1, S), keep (1, S) in {0, 1} with the last
    slot (the token itself) kept -> weights (B, nh, 1, S) summing to 1 over the kept slots."""
    own = scores[..., -1:]
    # Empty slots take the token's own score before the softmax (no outlier constant in any
    # tensor's range; Softmax shifts by its own max, so it stays stable), then drop out of the
    # renormalised weights. The kept weights sum to >= 1/S: the division is safe.
    probs = torch.softmax((scores - own) * keep + own, dim=-1) * keep
    return probs / probs.sum(dim=-1, keepdim=True)


def _attend_kept(attn, q, keys, values, keep):
    """Softmax attention over the kept slots only. q (B, nh, 1, hs), keys/values (B, nh, S, hs),
    keep (1, S) in {0, 1} with the last slot (the token itself) kept -> (B, 1, D)."""
    scores = (q @ keys.transpose(-2, -1)) * (1.0 / math.sqrt(attn.head_dim))  # (B, nh, 1, S)
    return _project(attn, _kept_probs(scores, keep) @ values)  # (B, nh, 1, hs) -> (B, 1, D)


def _attend_cache_and_self(attn, q, kc, vc, k, v, keep):
    """``_attend_kept`` over the cache slots and the token itself, never joining the cache to the
    token's key or value. q, k, v (B, nh, 1, hs), kc/vc (B, nh, Lmax, hs), keep (1, Lmax + 1)
    -> (B, 1, D)."""
    scale = 1.0 / math.sqrt(attn.head_dim)
    slots = kc.shape[2]
    scores = torch.cat([q @ kc.transpose(-2, -1), q @ k.transpose(-2, -1)], dim=-1) * scale  # (B, nh, 1, Lmax + 1)
    probs = _kept_probs(scores, keep)
    y = probs[..., :slots] @ vc + probs[..., slots:] * v  # (B, nh, 1, hs)
    return _project(attn, y)


def _project(attn, y):
    """(B, nh, 1, hs) heads -> the attention's output projection (B, 1, D)."""
    B = y.shape[0]
    return attn.proj(y.transpose(1, 2).reshape(B, 1, attn.heads * attn.head_dim))


_STEPS: dict[str, type[nn.Module]] = {"layers": ARLayersStep, "loop": ARLoopStep, "graph": ARStep}


def ar_step(model: CausalTransformer, form: str = "layers") -> nn.Module:
    """The step module of ``model`` in cache ``form`` (``AR_CACHE_FORMS``), in eval mode."""
    one_of("AR cache form", form, AR_CACHE_FORMS, error=EdgekitError)
    return _STEPS[form](model).eval()


def ar_io(cfg: ARConfig, batch: int, form: str = "layers") -> tuple[dict, dict]:
    """(inputs, outputs) TensorSpecs of the step graph in cache ``form``, class-conditioned, in
    the order the step module's forward takes them."""
    one_of("AR cache form", form, AR_CACHE_FORMS, error=EdgekitError)
    stacked = TensorSpec((cfg.depth, batch, cfg.heads, cfg.max_len, cfg.head_dim), "float32", -1.0, 1.0)
    inputs = {
        "token": TensorSpec((batch, 1), "int64", 0, cfg.vocab_size + 1),
        "pos": TensorSpec((1,), "int64", 0, cfg.max_len),
    }
    if form == "layers":
        layer = TensorSpec(stacked.shape[1:], "float32", -1.0, 1.0)
        inputs.update(dict.fromkeys(ar_layer_cache_names(cfg.depth), layer))
    else:
        inputs.update(k_cache=stacked, v_cache=stacked)
    outputs = {"logits": TensorSpec((batch, cfg.vocab_size), "float32")}
    if form == "graph":
        outputs.update(k_cache_out=stacked, v_cache_out=stacked)
    else:
        new = TensorSpec((cfg.depth, batch, cfg.heads, 1, cfg.head_dim), "float32")
        # A keep mask; verification feeds real ones (export/verify.py fills the cache step by step).
        inputs["attn_mask"] = TensorSpec((1, cfg.max_len), "float32", 0.0, 1.0)
        outputs.update(k_new=new, v_new=new)
    inputs["class_id"] = TensorSpec((batch,), "int64", 0, cfg.num_classes + 1)
    return inputs, outputs
