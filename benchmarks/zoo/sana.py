"""Sana's transformer (diffusers ``SanaTransformer2DModel``, a rectified-flow DiT) at the published
Sana_600M_512px config (28 layers, hidden 1152, 36 heads of linear ReLU attention, cross-attention
to 300 Gemma-2 caption states of width 2304, Mix-FFN with a 3x3 depthwise conv: 592 M parameters,
2.20 GiB in FP32, over protobuf's 2 GB) on a 16x16 latent of 32 channels (512 px through
DC-AE's 32x downsampling) — behind edgekit's flow contract.

    edgekit export benchmarks/zoo/sana.py:make_model -o bundles/sana --batch 1

The network: x float32[B, 256, 32] (the latent's positions as frames, channels last as edgekit's
contract), t float32[B], text_emb float32[B, 300, 2304] -> v float32[B, 256, 32]. Sana's
time runs the other way (1000 = noise, its velocity points from data to noise); edgekit's runs
0 = noise -> 1 = data, so the adapter gives Sana 1000 (1 - t) and returns the negated velocity.
Guidance drops the caption (a null embedding of zeros; Sana's own is the empty prompt's).
"""

from __future__ import annotations

import torch
from torch import nn

from edgekit import ModelSpec, TensorSpec

CHANNELS, GRID, TEXT_LEN, TEXT_DIM = 32, 16, 300, 2304


class LatentAdapter(nn.Module):
    """x [B, H*W, C], t [B], text_emb [B, S, 2304] -> v [B, H*W, C] over the inner [B, C, H, W]."""

    def __init__(self, inner: nn.Module):
        super().__init__()
        self.inner = inner

    def forward(self, x, t, text_emb):
        b = x.shape[0]
        latent = x.transpose(1, 2).reshape(b, CHANNELS, GRID, GRID)
        out = self.inner(
            hidden_states=latent, encoder_hidden_states=text_emb, timestep=(1.0 - t) * 1000.0, return_dict=False
        )[0]
        return -out.reshape(b, CHANNELS, GRID * GRID).transpose(1, 2)


def sample_conditions(rng, batch: int) -> dict:
    """Captions as Gemma-2's last hidden states give them to Sana (RMS-normed: unit scale), a prompt
    of 20-120 tokens followed by the padding's states (small). numpy only."""
    import numpy as np

    states = 0.05 * rng.standard_normal((batch, TEXT_LEN, TEXT_DIM))
    for row in range(batch):
        n = int(rng.integers(20, 121))
        states[row, :n] = rng.standard_normal((n, TEXT_DIM))
    return {"text_emb": states.astype(np.float32)}


def make_model(batch: int = 1, seed: int = 0) -> ModelSpec:
    from diffusers import SanaTransformer2DModel  # lazy: the zoo's own dependency

    torch.manual_seed(seed)
    inner = SanaTransformer2DModel(
        in_channels=CHANNELS,
        out_channels=CHANNELS,
        num_attention_heads=36,
        attention_head_dim=32,
        num_layers=28,
        num_cross_attention_heads=16,
        cross_attention_head_dim=72,
        cross_attention_dim=1152,
        caption_channels=TEXT_DIM,
        mlp_ratio=2.5,
        dropout=0.0,
        attention_bias=False,
        sample_size=GRID,
        patch_size=1,
        norm_elementwise_affine=False,
        norm_eps=1e-6,
    ).eval()
    return ModelSpec(
        name="sana-600m",
        kind="flow",
        module=LatentAdapter(inner),
        inputs={
            "x": TensorSpec((batch, GRID * GRID, CHANNELS), "float32", -3.0, 3.0),
            "t": TensorSpec((batch,), "float32", 0.0, 1.0),
            "text_emb": TensorSpec((batch, TEXT_LEN, TEXT_DIM), "float32", -3.0, 3.0),
        },
        outputs={"v": TensorSpec((batch, GRID * GRID, CHANNELS), "float32")},
        meta={"channels": CHANNELS, "frames": GRID * GRID, "conditioning": {"text_emb": {"uncond": 0.0}}},
        # Sana samples 20 flow-DPM-solver steps with CFG 4.5; 4 Euler steps keep a 2-core CPU in
        # minutes (a decode is 8 network calls: the conditional and the unconditional pass).
        decode_defaults={"steps": 4, "solver": "euler", "grid": "uniform", "guidance": 4.5, "temperature": 1.0},
        condition_sampler=f"{__file__}:sample_conditions",
    )
