"""Bring-your-own test models for ``edgekit debug``: a small masked model whose INT8 error enters
at a known layer (tests/debug/conftest.py plants or provokes it).

``step_masked``: tokens [B, 16] (codebook 12, mask id 12) + ``class_id`` -> logits [B, 16, 12].
The mask token embeds near zero, so the ``ctx`` layer, which reads the mean token embedding over
the sequence, sees an input that grows step by step as MaskGIT unmasks tokens: a range set from
the early steps is exceeded only by the late ones.

``outlier_masked``: the same network with one channel of ``fc2``'s input scaled x100 (and that
channel's weights /100, so the float model barely changes): a per-tensor INT8 range set by the
outlier leaves the other channels a few levels, and ``fc2`` breaks at every step.
"""

from __future__ import annotations

import torch
from torch import nn

from edgekit import ModelSpec, TensorSpec

V, L, D, CLASSES = 12, 16, 16, 3


class StepNet(nn.Module):
    """tokens int64[B, L], class_id int64[B] -> logits float32[B, L, V]."""

    def __init__(self, outlier: float = 1.0):
        super().__init__()
        self.tok = nn.Embedding(V + 1, D)
        self.cls = nn.Embedding(CLASSES + 1, D)
        self.ctx = nn.Linear(D, D)
        self.fc1 = nn.Linear(D, 2 * D)
        self.fc2 = nn.Linear(2 * D, D)
        self.head = nn.Linear(D, V)
        gain = torch.ones(2 * D)
        gain[3] = outlier
        self.register_buffer("gain", gain)
        gen = torch.Generator().manual_seed(7)
        with torch.no_grad():
            for p in self.parameters():
                p.copy_(0.5 * torch.randn(p.shape, generator=gen))
            self.tok.weight[V] *= 0.05  # the mask token: the context grows as tokens are unmasked
            self.fc2.weight[:, 3] /= outlier
        self.eval()

    def forward(self, tokens, class_id):
        e = self.tok(tokens)  # [B, L, D]
        h = e + self.ctx(e.mean(dim=1, keepdim=True)) + self.cls(class_id)[:, None, :]
        h = h + self.fc2(torch.relu(self.fc1(h)) * self.gain)
        return self.head(h)  # [B, L, V]


def _spec(name: str, module: nn.Module, batch: int) -> ModelSpec:
    return ModelSpec(
        name=name,
        kind="masked",
        module=module,
        inputs={
            "tokens": TensorSpec((batch, L), "int64", 0, V + 1),
            "class_id": TensorSpec((batch,), "int64", 0, CLASSES),
        },
        outputs={"logits": TensorSpec((batch, L, V), "float32")},
        meta={"vocab_size": V, "mask_id": V, "seq_len": L, "conditioning": {"class_id": {"uncond": CLASSES}}},
        decode_defaults={"steps": 4, "schedule": "cosine", "temperature": 1.0, "choice_temperature": 2.0},
    )


def step_masked(batch: int = 1) -> ModelSpec:
    return _spec("debug-step-masked", StepNet(), batch)


def outlier_masked(batch: int = 1) -> ModelSpec:
    return _spec("debug-outlier-masked", StepNet(outlier=100.0), batch)
