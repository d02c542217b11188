"""Bring your own model: a factory that returns an ``edgekit.ModelSpec``.

    edgekit export examples/custom_model.py:make_model -o bundles/mine --batch 2
    edgekit run bundles/mine --solver heun --steps 4 --cond speaker=0.5

The "user" network below is a small velocity estimator in the layout many TTS decoders use:
channels first, x [B, C, T], with a speaker vector and a time scalar. edgekit's flow contract is
x [B, T, C], t [B] + conditioning -> v [B, T, C], so a thin adapter transposes at the seam.
Nothing else changes: the decode loop, export and verification are edgekit's.

Note: ``edgekit export FILE.py:FUNCTION`` imports and runs this file — only export code you trust.
"""

from __future__ import annotations

import torch
from torch import nn

from edgekit import ModelSpec, TensorSpec

CHANNELS, FRAMES, SPEAKER_DIM = 16, 32, 8


class UserEstimator(nn.Module):
    """Someone else's network: x [B, C, T], t [B], spk [B, S] -> v [B, C, T]."""

    def __init__(self):
        super().__init__()
        self.spk = nn.Linear(SPEAKER_DIM, CHANNELS)
        self.time = nn.Linear(1, CHANNELS)
        self.net = nn.Sequential(
            nn.Conv1d(CHANNELS, 64, 3, padding=1), nn.SiLU(), nn.Conv1d(64, CHANNELS, 3, padding=1)
        )

    def forward(self, x, t, spk):
        h = x + self.spk(spk)[:, :, None] + self.time(t[:, None])[:, :, None]
        return self.net(h)


class Adapter(nn.Module):
    """edgekit's layout ([B, T, C]) around the user's ([B, C, T])."""

    def __init__(self, inner: nn.Module):
        super().__init__()
        self.inner = inner

    def forward(self, x, t, speaker):
        return self.inner(x.transpose(1, 2), t, speaker).transpose(1, 2)


def make_model(batch: int = 1) -> ModelSpec:
    torch.manual_seed(0)  # stands in for loading a checkpoint:
    # inner.load_state_dict(safetensors.torch.load_file("ckpt.safetensors"))  or
    # inner.load_state_dict(torch.load("ckpt.pt", weights_only=True))  — never plain pickle
    module = Adapter(UserEstimator()).eval()
    return ModelSpec(
        name="custom-flow",
        kind="flow",
        module=module,
        inputs={
            "x": TensorSpec((batch, FRAMES, CHANNELS), "float32", -3.0, 3.0),
            "t": TensorSpec((batch,), "float32", 0.0, 1.0),
            "speaker": TensorSpec((batch, SPEAKER_DIM), "float32", -1.0, 1.0),
        },
        outputs={"v": TensorSpec((batch, FRAMES, CHANNELS), "float32")},
        meta={
            "channels": CHANNELS,
            "frames": FRAMES,
            # The speaker vector is the CFG condition; all-zeros is "no speaker".
            "conditioning": {"speaker": {"uncond": 0.0}},
        },
        decode_defaults={"steps": 4, "solver": "euler", "grid": "uniform"},
    )
