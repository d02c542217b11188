"""MaskGIT-style masked token generator: a bidirectional transformer over [MASK]-able tokens.

Graph (what export sees): tokens int64[B, L] (ids 0..V-1, or mask_id = V), class_id int64[B]
(0..num_classes-1, or num_classes = unconditional) -> logits float32[B, L, V]. The logits cover
the codebook only, so the mask id can never be sampled.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from edgekit.models._blocks import Block, init_gpt2


@dataclass(frozen=True)
class MaskedConfig:
    vocab_size: int = 64  # codebook V; the embedding has V + 1 rows, the last is [MASK]
    seq_len: int = 64  # L, static: learned positions, the graph's token axis
    num_classes: int = 8  # class conditioning; one extra row is the CFG "unconditional" class
    dim: int = 128  # width; small enough for a 2-core CPU, large enough to learn the corpus
    depth: int = 4  # blocks
    heads: int = 4  # head dim 32
    mlp_ratio: int = 4  # the usual transformer MLP expansion
    local_kernel: int = 5  # width of the depthwise positional conv on the embeddings

    @property
    def mask_id(self) -> int:
        return self.vocab_size

    @property
    def uncond_class(self) -> int:
        return self.num_classes


class MaskedTransformer(nn.Module):
    def __init__(self, cfg: MaskedConfig):
        super().__init__()
        self.cfg = cfg
        self.tok_emb = nn.Embedding(cfg.vocab_size + 1, cfg.dim)
        self.pos_emb = nn.Parameter(torch.zeros(1, cfg.seq_len, cfg.dim))
        self.cls_emb = nn.Embedding(cfg.num_classes + 1, cfg.dim)
        # Depthwise conv over neighbouring positions: a local inductive bias, so the model sees
        # its neighbours from step one instead of learning them through absolute positions
        # (a plain bidirectional transformer takes far longer to train on this corpus).
        self.local = nn.Conv1d(cfg.dim, cfg.dim, cfg.local_kernel, padding=cfg.local_kernel // 2, groups=cfg.dim)
        self.blocks = nn.ModuleList(Block(cfg.dim, cfg.heads, cfg.mlp_ratio) for _ in range(cfg.depth))
        self.ln_f = nn.LayerNorm(cfg.dim)
        self.head = nn.Linear(cfg.dim, cfg.vocab_size)  # codebook only: never the mask id
        init_gpt2(self, cfg.depth)

    def forward(self, tokens: torch.Tensor, class_id: torch.Tensor) -> torch.Tensor:
        """tokens int64[B, L], class_id int64[B] -> logits float32[B, L, V]."""
        x = self.tok_emb(tokens) + self.pos_emb + self.cls_emb(class_id)[:, None, :]  # (B, L, D)
        x = x + self.local(x.transpose(1, 2)).transpose(1, 2)
        for block in self.blocks:
            x = block(x)
        return self.head(self.ln_f(x))
