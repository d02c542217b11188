"""An autoregressive baseline of real size: edgekit's causal transformer (the demo AR's
architecture) at GPT-2-medium width and depth (dim 1024, 24 layers, 16 heads: 303 M
parameters in its blocks), a 1024-token codebook and a static KV cache of 256 tokens — the
aMUSEd-256 token grid decoded one token at a time.

    edgekit export benchmarks/zoo/ar_large.py:make_model -o bundles/ar-large --batch 1

The "layers" form of ``edgekit.spec.AR_CACHE_IO`` (what the demo AR exports): token, pos,
k_cache_0, v_cache_0, ..., k_cache_23, v_cache_23 float32[B, 16, 256, 64] (each layer's cache
its own input, read in place), attn_mask, class_id -> logits, k_new, v_new float32[24, B, 16, 1, 64].
Bundles exported before it (``/tmp/rs-ar/ar-gpt-medium``) hold the "loop" form, the caches
stacked into k_cache/v_cache float32[24, B, 16, 256, 64]: ``make_model(form="loop")``.
Seeded GPT-2 initialisation. ``max_len`` is a factory argument: ``make_model(max_len=1024)``
is the long-sequence case quantize's recording must hold in memory
(``make_model_1024``, the zoo's ``ar-gpt-medium-1024``).
"""

from __future__ import annotations

import dataclasses

from edgekit import ModelSpec
from edgekit.models.ar import ARConfig, CausalTransformer, ar_io, ar_step

VOCAB = 1024
CLASSES = 16


def make_model(batch: int = 1, seed: int = 0, max_len: int = 256, form: str = "layers") -> ModelSpec:
    import torch  # lazy: torch

    torch.manual_seed(seed)
    cfg = ARConfig(vocab_size=VOCAB, max_len=max_len, num_classes=CLASSES, dim=1024, depth=24, heads=16, mlp_ratio=4)
    inputs, outputs = ar_io(cfg, batch, form)
    return ModelSpec(
        name="ar-gpt-medium",
        kind="ar",
        module=ar_step(CausalTransformer(cfg).eval(), form),
        inputs=inputs,
        outputs=outputs,
        meta={
            "vocab_size": VOCAB,
            "max_len": max_len,
            "bos_id": cfg.bos_id,
            "num_classes": CLASSES,
            "conditioning": {"class_id": {"uncond": CLASSES}},
        },
        decode_defaults={"temperature": 1.0, "top_k": 0},
    )


def make_model_1024(batch: int = 1, seed: int = 0) -> ModelSpec:
    """The same network with a 1024-token static KV cache (float32[B, 16, 1024, 64] per layer):
    a decode is 1024 calls that each read 200 MB of cache, what quantize's recording must bound."""
    spec = make_model(batch, seed, max_len=1024)
    return dataclasses.replace(spec, name="ar-gpt-medium-1024")
