"""Conditional flow-matching decoder: the velocity network of a Matcha/CosyVoice-style decoder.

Graph (what export sees): x float32[B, T, C] (the state at time t; t=0 noise, t=1 data),
t float32[B] in [0, 1], tokens int64[B, L] (token ids at 1/r of the frame rate, V = the
unconditional "null" id) -> v float32[B, T, C]. Tokens are upsampled r× inside the graph.
Time enters through a sinusoidal embedding and adaLN modulation (DiT-style, zero-initialised
so each block starts as the identity).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import nn
from torch.nn import functional as F

from edgekit.models._blocks import SelfAttention


@dataclass(frozen=True)
class FlowConfig:
    channels: int = 80  # C: spectrum bins per frame
    seq_len: int = 64  # L: condition tokens per sequence
    frames_per_token: int = 2  # r: the frame rate is r× the token rate; T = r·L
    vocab_size: int = 64  # token codebook; embedding row V is the CFG null token
    dim: int = 128  # width
    depth: int = 4  # blocks, each attention + a convolutional MLP
    heads: int = 4
    conv_kernel: int = 5  # local context across frames: smooths token boundaries
    time_freqs: int = 64  # sinusoid pairs in the time embedding

    @property
    def frames(self) -> int:
        return self.seq_len * self.frames_per_token

    @property
    def null_token(self) -> int:
        return self.vocab_size


def timestep_embedding(t: torch.Tensor, freqs: int) -> torch.Tensor:
    """t float[B] in [0,1] -> float[B, 2*freqs]; scaled by 1000 as diffusion models do."""
    scales = torch.exp(-math.log(10000.0) * torch.arange(freqs, device=t.device, dtype=torch.float32) / freqs)
    angles = 1000.0 * t[:, None] * scales[None]
    return torch.cat([torch.cos(angles), torch.sin(angles)], dim=-1)


def modulate(x: torch.Tensor, shift: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    return x * (1 + scale[:, None]) + shift[:, None]


class FlowBlock(nn.Module):
    def __init__(self, cfg: FlowConfig):
        super().__init__()
        d = cfg.dim
        self.ln1 = nn.LayerNorm(d, elementwise_affine=False)
        self.ln2 = nn.LayerNorm(d, elementwise_affine=False)
        self.attn = SelfAttention(d, cfg.heads)
        self.conv_in = nn.Conv1d(d, 2 * d, cfg.conv_kernel, padding=cfg.conv_kernel // 2)
        self.conv_out = nn.Conv1d(2 * d, d, 1)
        self.ada = nn.Linear(d, 6 * d)
        nn.init.zeros_(self.ada.weight)
        nn.init.zeros_(self.ada.bias)

    def forward(self, h: torch.Tensor, temb: torch.Tensor) -> torch.Tensor:
        """h float[B, T, D], temb float[B, D] -> float[B, T, D]."""
        s1, c1, g1, s2, c2, g2 = self.ada(temb).chunk(6, dim=-1)
        h = h + g1[:, None] * self.attn(modulate(self.ln1(h), s1, c1))
        y = modulate(self.ln2(h), s2, c2).transpose(1, 2)  # (B, D, T) for Conv1d
        y = self.conv_out(F.gelu(self.conv_in(y), approximate="tanh")).transpose(1, 2)
        return h + g2[:, None] * y


class FlowDecoder(nn.Module):
    def __init__(self, cfg: FlowConfig):
        super().__init__()
        self.cfg = cfg
        d = cfg.dim
        self.in_proj = nn.Linear(cfg.channels, d)
        self.tok_emb = nn.Embedding(cfg.vocab_size + 1, d)
        self.pos_emb = nn.Parameter(torch.zeros(1, cfg.frames, d))
        self.time_mlp = nn.Sequential(nn.Linear(2 * cfg.time_freqs, d), nn.SiLU(), nn.Linear(d, d))
        self.blocks = nn.ModuleList(FlowBlock(cfg) for _ in range(cfg.depth))
        self.ln_out = nn.LayerNorm(d, elementwise_affine=False)
        self.ada_out = nn.Linear(d, 2 * d)
        self.out_proj = nn.Linear(d, cfg.channels)
        # GPT-2 style: all embeddings at std 0.02, so positions are not drowned by token rows.
        nn.init.normal_(self.tok_emb.weight, std=0.02)
        nn.init.normal_(self.pos_emb, std=0.02)
        nn.init.zeros_(self.ada_out.weight)
        nn.init.zeros_(self.ada_out.bias)

    def forward(self, x: torch.Tensor, t: torch.Tensor, tokens: torch.Tensor) -> torch.Tensor:
        """x float32[B, T, C], t float32[B], tokens int64[B, L] -> v float32[B, T, C]."""
        B, L = tokens.shape
        r = self.cfg.frames_per_token
        cond = self.tok_emb(tokens)[:, :, None, :].expand(B, L, r, self.cfg.dim).reshape(B, L * r, self.cfg.dim)
        # A window shorter than cfg.frames (a chunked-decoding graph) takes the first T positions.
        h = self.in_proj(x) + cond + self.pos_emb[:, : x.shape[1]]  # (B, T, D)
        temb = F.silu(self.time_mlp(timestep_embedding(t, self.cfg.time_freqs)))  # (B, D)
        for block in self.blocks:
            h = block(h, temb)
        shift, scale = self.ada_out(temb).chunk(2, dim=-1)
        return self.out_proj(modulate(self.ln_out(h), shift, scale))
