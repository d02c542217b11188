"""Tiny token and flow models for the load-test tests (random weights, vocab 8, 8 tokens, 2
frames per token: 16 frames per utterance), as factories so a bundle can name its source
(``tests.stream.tiny_stream:flow``) and the torch runtime rebuild the module."""

from __future__ import annotations

V, L, R = 8, 8, 2  # vocab, tokens per utterance, frames per token


def _seeded(build, seed: int):
    """``build()`` under a fixed torch seed (without moving the global one): a rebuilt module
    has the weights the exported one had, as the torch runtime needs."""
    import torch

    with torch.random.fork_rng():
        torch.manual_seed(seed)
        return build()


def flow(batch: int = 1):
    from edgekit.models.flow import FlowConfig, FlowDecoder
    from edgekit.spec import ModelSpec, TensorSpec
    from tests.tiny_models import _perturb

    fc = FlowConfig(channels=4, seq_len=L, frames_per_token=R, vocab_size=V, dim=16, depth=1, heads=2, time_freqs=8)
    return ModelSpec(
        name="tiny-flow",
        kind="flow",
        module=_perturb(_seeded(lambda: FlowDecoder(fc), 0), 0),
        inputs={
            "x": TensorSpec((batch, fc.frames, 4), "float32", -3.0, 3.0),
            "t": TensorSpec((batch,), "float32", 0.0, 1.0),
            "tokens": TensorSpec((batch, L), "int64", 0, V + 1),
        },
        outputs={"v": TensorSpec((batch, fc.frames, 4), "float32")},
        meta={"channels": 4, "frames": fc.frames, "frames_per_token": R, "conditioning": {"tokens": {"uncond": V}}},
        decode_defaults={"steps": 2, "solver": "midpoint", "grid": "cosine", "temperature": 1.0},
    )


def masked(batch: int = 1):
    from edgekit.models.masked import MaskedConfig, MaskedTransformer
    from edgekit.spec import ModelSpec, TensorSpec
    from tests.tiny_models import _perturb

    mc = MaskedConfig(vocab_size=V, seq_len=L, num_classes=3, dim=16, depth=1, heads=2, mlp_ratio=2)
    return ModelSpec(
        name="tiny-masked",
        kind="masked",
        module=_perturb(_seeded(lambda: MaskedTransformer(mc), 1), 1),
        inputs={"tokens": TensorSpec((batch, L), "int64", 0, V + 1), "class_id": TensorSpec((batch,), "int64", 0, 4)},
        outputs={"logits": TensorSpec((batch, L, V), "float32")},
        meta={"vocab_size": V, "mask_id": V, "seq_len": L, "conditioning": {"class_id": {"uncond": 3}}},
        decode_defaults={"steps": 3, "schedule": "cosine", "choice_temperature": 4.5, "temperature": 1.0},
    )


def ar(batch: int = 1):
    from edgekit.models.ar import ARConfig, CausalTransformer, ar_io, ar_step
    from edgekit.spec import ModelSpec
    from tests.tiny_models import _perturb

    ac = ARConfig(vocab_size=V, max_len=L, num_classes=3, dim=16, depth=1, heads=2, mlp_ratio=2)
    inputs, outputs = ar_io(ac, batch, "graph")
    return ModelSpec(
        name="tiny-ar",
        kind="ar",
        module=ar_step(_perturb(_seeded(lambda: CausalTransformer(ac), 2), 2), "graph"),
        inputs=inputs,
        outputs=outputs,
        meta={
            "vocab_size": V,
            "max_len": L,
            "bos_id": V,
            "num_classes": 3,
            "conditioning": {"class_id": {"uncond": 3}},
        },
        decode_defaults={"temperature": 1.0, "top_k": 0},
    )
