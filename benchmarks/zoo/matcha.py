"""Matcha-TTS's flow-matching decoder (matcha-tts ``Decoder``, the CFM estimator: a 1-D U-Net of
ResNet and transformer blocks with snake-beta activations) at its published LJSpeech config,
over 400 mel frames (about 4.6 s of speech) — behind edgekit's flow contract.

    edgekit export benchmarks/zoo/matcha.py:make_model -o bundles/matcha --batch 2

The network: x float32[B, 80, T] (the ODE state, channels first), mask float32[B, 1, T], mu
float32[B, 80, T] (the text encoder's aligned output), t float32[B] -> v float32[B, 80, T].
The adapter takes x and mu channels last ([B, T, 80]) and a full mask. Seeded weights.
"""

from __future__ import annotations

import torch
from torch import nn

from edgekit import ModelSpec, TensorSpec

MELS = 80
FRAMES = 400  # a multiple of 4: the U-Net halves the time axis twice


class MatchaAdapter(nn.Module):
    """x [B, T, C], t [B], mu [B, T, C] -> v [B, T, C] over the channels-first estimator."""

    def __init__(self, inner: nn.Module):
        super().__init__()
        self.inner = inner

    def forward(self, x, t, mu):
        xc, muc = x.transpose(1, 2), mu.transpose(1, 2)  # [B, C, T]
        mask = torch.ones_like(xc[:, :1, :])  # [B, 1, T]: every frame is speech
        return self.inner(xc, mask, muc, t).transpose(1, 2)


def sample_conditions(rng, batch: int) -> dict:
    """mu as the text encoder gives it: each phone's mel frame held for a few frames (the
    aligner repeats it by its duration), unit scale. numpy only."""
    import numpy as np

    durations = rng.integers(3, 12, size=(batch, FRAMES))  # frames per phone, more than enough phones
    mu = np.empty((batch, FRAMES, MELS), dtype=np.float32)
    for b in range(batch):
        frames = np.repeat(np.arange(FRAMES), durations[b])[:FRAMES]  # phone index of each frame
        mu[b] = rng.standard_normal((FRAMES, MELS)).astype(np.float32)[frames]
    return {"mu": mu}


def make_model(batch: int = 2, seed: int = 0) -> ModelSpec:
    from matcha.models.components.decoder import Decoder  # lazy: the zoo's own dependency

    torch.manual_seed(seed)
    # configs/model/decoder/default.yaml; in_channels = 2 x n_feats (x and mu packed), single speaker.
    inner = Decoder(
        in_channels=2 * MELS,
        out_channels=MELS,
        channels=(256, 256),
        dropout=0.05,
        attention_head_dim=64,
        n_blocks=1,
        num_mid_blocks=2,
        num_heads=2,
        act_fn="snakebeta",
    ).eval()
    return ModelSpec(
        name="matcha-decoder",
        kind="flow",
        module=MatchaAdapter(inner),
        inputs={
            "x": TensorSpec((batch, FRAMES, MELS), "float32", -3.0, 3.0),
            "t": TensorSpec((batch,), "float32", 0.0, 1.0),
            "mu": TensorSpec((batch, FRAMES, MELS), "float32", -3.0, 3.0),
        },
        outputs={"v": TensorSpec((batch, FRAMES, MELS), "float32")},
        meta={"channels": MELS, "frames": FRAMES, "conditioning": {"mu": {"uncond": None}}},
        # Matcha-TTS synthesises with 10 Euler steps.
        decode_defaults={"steps": 10, "solver": "euler", "grid": "uniform", "temperature": 0.667},
        condition_sampler=f"{__file__}:sample_conditions",
    )
