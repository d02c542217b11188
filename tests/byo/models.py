"""Bring-your-own test models in the shapes real ones have, each behind the thin adapter the
README describes (edgekit's layouts around the user's):

- ``grid_masked``: a MaskGIT-style image-token model on a 4x4 grid, channels-first inside
  ([B, D, H, W] convolutions), logits [B, V, H, W], three conditioning inputs of different
  dtypes and ranks: ``class_id`` int64[B], ``text`` float32[B, 3, 8] (an encoder output; its
  unconditional value is a per-element null embedding) and ``style`` int32[B, 2] ("same": kept
  in the unconditional rows).
- ``masked_flow``: a channels-first flow estimator (x [B, C, T]) conditioned on an encoder
  output ``enc`` float32[B, 6, T] (channels first) and a binary frame mask ``frame_mask``
  bool[B, T] (its unconditional value is "same": dropping the text keeps the frames).
- ``grn_masked``: a ConvNeXt-style masked model with a GlobalResponseNorm (``torch.norm`` ->
  ReduceL2, an op onnxruntime's symbolic shape inference in ``quant_pre_process`` does not
  handle), logits [B, V, H, W], conditioned on ``label`` int64[B] and ``scale`` float32[B, 1].

Random weights scaled so no block is an identity; small enough that export -> quantize ->
check -> profile through the CLI takes seconds.
"""

from __future__ import annotations

from pathlib import Path

import torch
from torch import nn

from edgekit import ModelSpec, TensorSpec

V, H, W = 12, 4, 4  # codebook, token grid
L = H * W


def _seeded(module: nn.Module, seed: int) -> nn.Module:
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in module.parameters():
            p.copy_(0.5 * torch.randn(p.shape, generator=gen))
    return module.eval()


# ---- 1. a masked grid model with three conditioning inputs ----------------------------------------
class GridNet(nn.Module):
    """tokens [B, H, W], class [B], text [B, S, E], style [B, 2] -> logits [B, V, H, W]."""

    def __init__(self, dim: int = 16, classes: int = 4, text_dim: int = 8, styles: int = 5):
        super().__init__()
        self.tok = nn.Embedding(V + 1, dim)  # + the mask id
        self.cls = nn.Embedding(classes + 1, dim)  # + the unconditional class
        self.text = nn.Linear(text_dim, dim)
        self.style = nn.Embedding(styles, dim)
        self.conv1 = nn.Conv2d(dim, dim, 3, padding=1)
        self.conv2 = nn.Conv2d(dim, dim, 3, padding=1)
        self.head = nn.Conv2d(dim, V, 1)

    def forward(self, tokens, class_id, text, style):
        h = self.tok(tokens).permute(0, 3, 1, 2)  # [B, D, H, W]
        c = self.cls(class_id) + self.text(text).mean(dim=1) + self.style(style).sum(dim=1)  # [B, D]
        h = h + c[:, :, None, None]
        h = h + torch.relu(self.conv1(h))
        h = h + torch.tanh(self.conv2(h))
        return self.head(h)  # [B, V, H, W]


class GridAdapter(nn.Module):
    """edgekit's masked contract: tokens [B, L] + conditioning -> logits [B, L, V]."""

    def __init__(self, inner: nn.Module):
        super().__init__()
        self.inner = inner

    def forward(self, tokens, class_id, text, style):
        logits = self.inner(tokens.reshape(-1, H, W), class_id, text, style)  # [B, V, H, W]
        return logits.flatten(2).transpose(1, 2)  # [B, L, V]


def grid_masked(batch: int = 2) -> ModelSpec:
    module = GridAdapter(_seeded(GridNet(), 11))
    return ModelSpec(
        name="byo-grid-masked",
        kind="masked",
        module=module,
        inputs={
            "tokens": TensorSpec((batch, L), "int64", 0, V + 1),
            "class_id": TensorSpec((batch,), "int64", 0, 4),
            "text": TensorSpec((batch, 3, 8), "float32", -1.0, 1.0),
            "style": TensorSpec((batch, 2), "int32", 0, 5),
        },
        outputs={"logits": TensorSpec((batch, L, V), "float32")},
        meta={
            "vocab_size": V,
            "mask_id": V,
            "seq_len": L,
            "conditioning": {
                "class_id": {"uncond": 4},
                "text": {"uncond": [[0.0] * 8, [0.0] * 8, [0.1] * 8]},  # per element: a null embedding
                "style": {"uncond": "same"},
            },
        },
        decode_defaults={"steps": 4, "schedule": "cosine", "temperature": 1.0, "choice_temperature": 4.5},
    )


# ---- 2. a channels-first flow estimator with an encoder output and a frame mask --------------------
C, T, D_ENC = 4, 8, 6


class MaskedEstimator(nn.Module):
    """x [B, C, T], t [B], enc [B, D, T], mask [B, T] -> v [B, C, T] (zero where masked out)."""

    def __init__(self, hidden: int = 16):
        super().__init__()
        self.inp = nn.Conv1d(C + D_ENC, hidden, 3, padding=1)
        self.time = nn.Linear(1, hidden)
        self.mid = nn.Conv1d(hidden, hidden, 3, padding=1)
        self.out = nn.Conv1d(hidden, C, 1)

    def forward(self, x, t, enc, mask):
        m = mask.to(x.dtype)[:, None, :]  # [B, 1, T]
        h = self.inp(torch.cat([x, enc], dim=1)) + self.time(t[:, None])[:, :, None]
        h = h + torch.nn.functional.silu(self.mid(h))
        return self.out(h) * m


class FlowAdapter(nn.Module):
    def __init__(self, inner: nn.Module):
        super().__init__()
        self.inner = inner

    def forward(self, x, t, enc, frame_mask):
        return self.inner(x.transpose(1, 2), t, enc, frame_mask).transpose(1, 2)  # [B, T, C]


def masked_flow(batch: int = 2) -> ModelSpec:
    module = FlowAdapter(_seeded(MaskedEstimator(), 12))
    return ModelSpec(
        name="byo-masked-flow",
        kind="flow",
        module=module,
        inputs={
            "x": TensorSpec((batch, T, C), "float32", -3.0, 3.0),
            "t": TensorSpec((batch,), "float32", 0.0, 1.0),
            "enc": TensorSpec((batch, D_ENC, T), "float32", -1.0, 1.0),
            "frame_mask": TensorSpec((batch, T), "bool", 0, 2),
        },
        outputs={"v": TensorSpec((batch, T, C), "float32")},
        meta={"channels": C, "frames": T, "conditioning": {"enc": {"uncond": 0.0}, "frame_mask": {"uncond": "same"}}},
        decode_defaults={"steps": 3, "solver": "euler", "grid": "uniform"},
        # realistic conditions where no --cond-data is given (numpy only: runs on a device too)
        condition_sampler=f"{Path(__file__).with_name('samplers.py')}:flow_conditions",
    )


# ---- 3. ConvNeXt-style with GlobalResponseNorm (ReduceL2) -------------------------------------------
class GlobalResponseNorm(nn.Module):
    """ConvNeXt V2's GRN on [B, D, H, W]: x·(‖x‖₂ over H, W / its channel mean)·γ + β + x."""

    def __init__(self, dim: int):
        super().__init__()
        self.gamma = nn.Parameter(torch.zeros(1, dim, 1, 1))
        self.beta = nn.Parameter(torch.zeros(1, dim, 1, 1))

    def forward(self, x):
        gx = torch.norm(x, p=2, dim=(2, 3), keepdim=True)  # exports as ReduceL2
        nx = gx / (gx.mean(dim=1, keepdim=True) + 1e-6)
        return self.gamma * (x * nx) + self.beta + x


class GrnNet(nn.Module):
    def __init__(self, dim: int = 16, labels: int = 3):
        super().__init__()
        self.tok = nn.Embedding(V + 1, dim)
        self.label = nn.Embedding(labels + 1, dim)
        self.scale = nn.Linear(1, dim)
        self.dw = nn.Conv2d(dim, dim, 3, padding=1, groups=dim)
        self.pw1 = nn.Conv2d(dim, 2 * dim, 1)
        self.grn = GlobalResponseNorm(2 * dim)
        self.pw2 = nn.Conv2d(2 * dim, dim, 1)
        self.head = nn.Conv2d(dim, V, 1)

    def forward(self, tokens, label, scale):
        h = self.tok(tokens).permute(0, 3, 1, 2)  # [B, D, H, W]
        h = h + (self.label(label) + self.scale(scale))[:, :, None, None]
        h = h + self.pw2(self.grn(torch.nn.functional.gelu(self.pw1(self.dw(h)))))
        return self.head(h)  # [B, V, H, W]


class GrnAdapter(nn.Module):
    def __init__(self, inner: nn.Module):
        super().__init__()
        self.inner = inner

    def forward(self, tokens, label, scale):
        return self.inner(tokens.reshape(-1, H, W), label, scale).flatten(2).transpose(1, 2)


def grn_masked(batch: int = 2) -> ModelSpec:
    module = GrnAdapter(_seeded(GrnNet(), 13))
    return ModelSpec(
        name="byo-grn-masked",
        kind="masked",
        module=module,
        inputs={
            "tokens": TensorSpec((batch, L), "int64", 0, V + 1),
            "label": TensorSpec((batch,), "int64", 0, 3),
            "scale": TensorSpec((batch, 1), "float32", 0.5, 2.0),
        },
        outputs={"logits": TensorSpec((batch, L, V), "float32")},
        meta={
            "vocab_size": V,
            "mask_id": V,
            "seq_len": L,
            "conditioning": {"label": {"uncond": 3}, "scale": {"uncond": "same"}},
        },
        decode_defaults={"steps": 4, "schedule": "cosine"},
    )
