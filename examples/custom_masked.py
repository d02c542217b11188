"""Bring your own masked (MaskGIT-style) model: a factory that returns an ``edgekit.ModelSpec``.

    edgekit export examples/custom_masked.py:make_model -o bundles/my-masked --batch 4
    edgekit run bundles/my-masked --steps 6 --cond label=2 -o tokens.npz

The "user" network below is a small token generator in a layout many image-token models use:
logits channels first, [B, V, L], conditioned on a class label. edgekit's masked contract is
tokens int64[B, L] + conditioning -> logits float32[B, L, V], with the mask id one past the
vocabulary, so a thin adapter transposes at the seam. The decode loop (K steps, schedule,
Gumbel-annealed confidence, guidance), export and verification are edgekit's.

Note: ``edgekit export FILE.py:FUNCTION`` imports and runs this file — only export code you trust.
"""

from __future__ import annotations

import torch
from torch import nn

from edgekit import ModelSpec, TensorSpec

VOCAB, LENGTH, LABELS, DIM = 32, 16, 4, 48
MASK_ID = VOCAB  # the id of a masked position: one past the vocabulary
NULL_LABEL = LABELS  # the "no label" class guidance decodes the unconditional rows with


class UserGenerator(nn.Module):
    """Someone else's network: tokens [B, L] (ids 0..V, V = masked), label [B] -> logits [B, V, L]."""

    def __init__(self):
        super().__init__()
        self.tok = nn.Embedding(VOCAB + 1, DIM)
        self.label = nn.Embedding(LABELS + 1, DIM)
        self.pos = nn.Parameter(torch.randn(1, DIM, LENGTH) * 0.1)
        self.mix = nn.Sequential(nn.Conv1d(DIM, DIM, 5, padding=2), nn.GELU(), nn.Conv1d(DIM, DIM, 5, padding=2))
        self.head = nn.Conv1d(DIM, VOCAB, 1)

    def forward(self, tokens, label):
        h = self.tok(tokens).transpose(1, 2) + self.label(label)[:, :, None] + self.pos  # [B, D, L]
        h = h + self.mix(h)
        return self.head(h)  # [B, V, L]


class Adapter(nn.Module):
    """edgekit's layout (logits [B, L, V]) around the user's ([B, V, L])."""

    def __init__(self, inner: nn.Module):
        super().__init__()
        self.inner = inner

    def forward(self, tokens, label):
        return self.inner(tokens, label).transpose(1, 2)


def make_model(batch: int = 1) -> ModelSpec:
    torch.manual_seed(0)  # stands in for loading a checkpoint (safetensors, or torch.load(..., weights_only=True))
    module = Adapter(UserGenerator()).eval()
    return ModelSpec(
        name="custom-masked",
        kind="masked",
        module=module,
        inputs={
            "tokens": TensorSpec((batch, LENGTH), "int64", 0, VOCAB + 1),
            "label": TensorSpec((batch,), "int64", 0, LABELS),
        },
        outputs={"logits": TensorSpec((batch, LENGTH, VOCAB), "float32")},
        meta={
            "vocab_size": VOCAB,
            "mask_id": MASK_ID,
            "seq_len": LENGTH,
            # Each conditioning input's unconditional value for guidance: here a number (the null
            # label); a nested list of one row's shape, "same" or None work too (docs/byo.md).
            "conditioning": {"label": NULL_LABEL},
        },
        decode_defaults={"steps": 6, "schedule": "cosine", "temperature": 1.0, "choice_temperature": 4.5},
    )
