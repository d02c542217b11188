"""Autoregressive baseline: a causal transformer of the masked generator's width, depth and
vocabulary, decoded one token per step with a static-size KV cache.

Step graph (what export sees): token int64[B, 1] (BOS = V at position 0), pos int64[1],
k_cache / v_cache float32[n_layer, B, heads, max_len, head_dim], class_id int64[B]
-> logits float32[B, V] (for the token at ``pos``), k_cache_out, v_cache_out (slot ``pos``
written). The cache write is a one-hot blend, not a scatter, so every shape is static and the
graph needs no data-dependent ops.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from edgekit.models._blocks import Block, init_gpt2

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
