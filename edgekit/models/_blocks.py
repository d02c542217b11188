"""Transformer pieces shared by the masked generator, the AR baseline and the flow decoder.

Attention is written out (MatMul, Softmax, MatMul) rather than through
``scaled_dot_product_attention`` so the exported graph shows the attention core as plain ops
that quantization can recognise and leave in float.
"""

from __future__ import annotations

import math

import torch
from torch import nn
from torch.nn import functional as F


class SelfAttention(nn.Module):
    def __init__(self, dim: int, heads: int):
        super().__init__()
        assert dim % heads == 0, f"dim {dim} must divide by heads {heads}"
        self.heads, self.head_dim = heads, dim // heads
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)

    def split(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        B, T, D = x.shape
        q, k, v = self.qkv(x).split(D, dim=-1)
        # (B, T, D) -> (B, nh, T, hs)
        return tuple(t.view(B, T, self.heads, self.head_dim).transpose(1, 2) for t in (q, k, v))

    def attend(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
        """q (B, nh, Tq, hs), k/v (B, nh, Tk, hs), bias additive (.., Tq, Tk) -> (B, Tq, D)."""
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(self.head_dim))
        if bias is not None:
            att = att + bias
        y = F.softmax(att, dim=-1) @ v  # (B, nh, Tq, hs)
        B, _, Tq, _ = y.shape
        return self.proj(y.transpose(1, 2).reshape(B, Tq, self.heads * self.head_dim))

    def forward(self, x: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
        return self.attend(*self.split(x), bias)


class MLP(nn.Module):
    def __init__(self, dim: int, hidden: int):
        super().__init__()
        self.fc = nn.Linear(dim, hidden)
        self.out = nn.Linear(hidden, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.out(F.gelu(self.fc(x), approximate="tanh"))


class Block(nn.Module):
    """Pre-LN transformer block."""

    def __init__(self, dim: int, heads: int, mlp_ratio: int):
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.attn = SelfAttention(dim, heads)
        self.mlp = MLP(dim, mlp_ratio * dim)

    def forward(self, x: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
        x = x + self.attn(self.ln1(x), bias)
        return x + self.mlp(self.ln2(x))


def init_gpt2(module: nn.Module, depth: int) -> None:
    """GPT-2 initialisation: Linear and Embedding weights N(0, 0.02), biases 0, and the residual
    projections scaled by 1/sqrt(2·depth). PyTorch's default Linear init makes each block's
    output ~25x larger than 0.02-scale embeddings, drowning the token identity at the start;
    bidirectional (masked) models then take far longer to learn to read their neighbours."""
    for name, p in module.named_parameters():
        if p.dim() >= 2 and ("weight" in name or "emb" in name):
            std = 0.02 / math.sqrt(2 * depth) if name.endswith(("attn.proj.weight", "mlp.out.weight")) else 0.02
            nn.init.normal_(p, std=std)
        elif name.endswith("bias"):
            nn.init.zeros_(p)
