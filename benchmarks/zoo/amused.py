"""aMUSEd-256's masked image-token transformer (diffusers ``UVit2DModel``, 603.5 M parameters,
2.25 GiB in FP32: over protobuf's 2 GB limit) behind edgekit's masked contract.

    edgekit export benchmarks/zoo/amused.py:make_model -o bundles/amused --batch 1

The network: input_ids int64[B, 16, 16] (codebook 8192, mask id 8255), the text encoder's
hidden states float32[B, 77, 768] and pooled embedding float32[B, 768], micro-conditions
float32[B, 5] (original size, crop, aesthetic score) -> logits float32[B, 8192, 16, 16]
(channels first). The adapter flattens the grid: tokens int64[B, 256] -> logits [B, 256, 8192].
Weights are drawn from a fixed seed (diffusers' own initialisation): the decode is as costly as
the trained model's, its images are noise.
"""

from __future__ import annotations

import torch
from torch import nn

from edgekit import ModelSpec, TensorSpec

GRID = 16  # aMUSEd-256: a 256x256 image is 16x16 VQ tokens
CODEBOOK = 8192
VOCAB = 8256  # codebook + special ids; aMUSEd's mask id is the last
MASK_ID = VOCAB - 1
TEXT_LEN, TEXT_DIM = 77, 768  # CLIP ViT-L/14 text encoder states
MICRO = 5  # orig_width, orig_height, crop_top, crop_left, aesthetic score


class GridAdapter(nn.Module):
    """tokens int64[B, L] + conditions -> logits float32[B, L, V] over the inner [B, V, H, W]."""

    def __init__(self, inner: nn.Module):
        super().__init__()
        self.inner = inner

    def forward(self, tokens, text_states, text_pooled, micro_conds):
        logits = self.inner(tokens.reshape(-1, GRID, GRID), text_states, text_pooled, micro_conds)  # [B, V, H, W]
        return logits.flatten(2).transpose(1, 2)  # [B, L, V]


def sample_conditions(rng, batch: int) -> dict:
    """Prompts as a text encoder gives them (unit-scale states, a pooled vector) and aMUSEd's
    usual micro-conditions (256x256 original, no crop, aesthetic score 6). numpy only."""
    import numpy as np

    return {
        "text_states": rng.standard_normal((batch, TEXT_LEN, TEXT_DIM)).astype(np.float32),
        "text_pooled": rng.standard_normal((batch, TEXT_DIM)).astype(np.float32),
        "micro_conds": np.tile(np.array([256.0, 256.0, 0.0, 0.0, 6.0], dtype=np.float32), (batch, 1)),
    }


def make_model(batch: int = 1, seed: int = 0) -> ModelSpec:
    from diffusers import UVit2DModel  # lazy: the zoo's own dependency

    torch.manual_seed(seed)
    # aMUSEd-256's transformer config (the diffusers defaults are that model's, sample_size aside).
    inner = UVit2DModel(
        hidden_size=1024,
        cond_embed_dim=768,
        micro_cond_encode_dim=256,
        micro_cond_embed_dim=1280,
        encoder_hidden_size=TEXT_DIM,
        vocab_size=VOCAB,
        codebook_size=CODEBOOK,
        in_channels=768,
        block_out_channels=768,
        num_res_blocks=3,
        downsample=False,
        upsample=False,
        block_num_heads=12,
        num_hidden_layers=22,
        num_attention_heads=16,
        intermediate_size=2816,
        sample_size=GRID,
    ).eval()
    L = GRID * GRID
    return ModelSpec(
        name="amused-256",
        kind="masked",
        module=GridAdapter(inner),
        inputs={
            "tokens": TensorSpec((batch, L), "int64", 0, VOCAB),
            "text_states": TensorSpec((batch, TEXT_LEN, TEXT_DIM), "float32", -3.0, 3.0),
            "text_pooled": TensorSpec((batch, TEXT_DIM), "float32", -3.0, 3.0),
            "micro_conds": TensorSpec((batch, MICRO), "float32", 0.0, 6.0),
        },
        outputs={"logits": TensorSpec((batch, L, CODEBOOK), "float32")},
        meta={
            "vocab_size": CODEBOOK,
            "mask_id": MASK_ID,
            "seq_len": L,
            # Guidance drops the prompt (a null text embedding) and keeps the micro-conditions.
            "conditioning": {
                "text_states": {"uncond": 0.0},
                "text_pooled": {"uncond": 0.0},
                "micro_conds": {"uncond": "same"},
            },
        },
        # aMUSEd decodes in 12 steps with a cosine schedule.
        decode_defaults={"steps": 12, "schedule": "cosine", "temperature": 1.0, "choice_temperature": 4.5},
        condition_sampler=f"{__file__}:sample_conditions",
    )
