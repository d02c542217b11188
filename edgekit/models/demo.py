"""The built-in demo models: reference architectures with weights trained on the demo corpus
(``edgekit train-demo`` reproduces them), as ``ModelSpec``s for any static batch size."""

from __future__ import annotations

from pathlib import Path

from edgekit._deps import require
from edgekit.errors import EdgekitError
from edgekit.models.corpus import default_corpus
from edgekit.spec import ModelSpec, TensorSpec

WEIGHTS_DIR = Path(__file__).parent / "weights"


def configs():
    """The three demo configurations, sized from the corpus."""
    from edgekit.models.ar import ARConfig  # lazy: torch
    from edgekit.models.flow import FlowConfig  # lazy: torch
    from edgekit.models.masked import MaskedConfig  # lazy: torch

    c = default_corpus().config
    return {
        "masked-demo": MaskedConfig(vocab_size=c.vocab_size, seq_len=c.seq_len, num_classes=c.num_classes),
        "flow-demo": FlowConfig(
            channels=c.channels, seq_len=c.seq_len, frames_per_token=c.frames_per_token, vocab_size=c.vocab_size
        ),
        "ar-demo": ARConfig(vocab_size=c.vocab_size, max_len=c.seq_len, num_classes=c.num_classes),
    }


def build_module(name: str):
    """An untrained module of the demo architecture ``name`` (training starts here)."""
    from edgekit.models.ar import CausalTransformer  # lazy: torch
    from edgekit.models.flow import FlowDecoder  # lazy: torch
    from edgekit.models.masked import MaskedTransformer  # lazy: torch

    cls = {"masked-demo": MaskedTransformer, "flow-demo": FlowDecoder, "ar-demo": CausalTransformer}[name]
    return cls(configs()[name])


def load_trained(name: str, weights: Path | None = None):
    """The demo module with its committed weights (safetensors: no pickle is ever loaded)."""
    require("torch")
    load_file = require("safetensors.torch").load_file
    path = weights or WEIGHTS_DIR / f"{name}.safetensors"
    if not path.is_file():
        raise EdgekitError(f"demo weights {path} are missing", hint="run `edgekit train-demo` to train them")
    module = build_module(name)
    module.load_state_dict(load_file(str(path)))
    return module.eval()


def masked_demo(batch: int = 1, weights: Path | None = None) -> ModelSpec:
    cfg = configs()["masked-demo"]
    return ModelSpec(
        name="masked-demo",
        kind="masked",
        module=load_trained("masked-demo", weights),
        inputs={
            "tokens": TensorSpec((batch, cfg.seq_len), "int64", 0, cfg.vocab_size + 1),
            "class_id": TensorSpec((batch,), "int64", 0, cfg.num_classes + 1),
        },
        outputs={"logits": TensorSpec((batch, cfg.seq_len, cfg.vocab_size), "float32")},
        meta={
            "vocab_size": cfg.vocab_size,
            "mask_id": cfg.mask_id,
            "seq_len": cfg.seq_len,
            "num_classes": cfg.num_classes,
            "conditioning": {"class_id": {"uncond": cfg.uncond_class}},
        },
        # spacing 3 and choice temperature 2: measured on 64 held-out conditions (decode/masked.py):
        # K = 8 event accuracy 0.82 -> 0.89, K = 16 0.89 -> 0.92 against the reference's 0 and 4.5.
        decode_defaults={"steps": 8, "schedule": "cosine", "choice_temperature": 2.0, "temperature": 1.0, "spacing": 3},
        ground_truth="corpus-tokens",
    )


def flow_demo(batch: int = 1, weights: Path | None = None) -> ModelSpec:
    cfg = configs()["flow-demo"]
    return ModelSpec(
        name="flow-demo",
        kind="flow",
        module=load_trained("flow-demo", weights),
        inputs={
            "x": TensorSpec((batch, cfg.frames, cfg.channels), "float32", -3.0, 3.0),
            "t": TensorSpec((batch,), "float32", 0.0, 1.0),
            "tokens": TensorSpec((batch, cfg.seq_len), "int64", 0, cfg.vocab_size + 1),
        },
        outputs={"v": TensorSpec((batch, cfg.frames, cfg.channels), "float32")},
        meta={
            "channels": cfg.channels,
            "frames": cfg.frames,
            "frames_per_token": cfg.frames_per_token,
            "conditioning": {"tokens": {"uncond": cfg.null_token}},
        },
        decode_defaults={"steps": 4, "solver": "midpoint", "grid": "cosine", "temperature": 1.0},
        ground_truth="corpus-frames",
    )


def ar_demo(batch: int = 1, weights: Path | None = None, cache: str = "layers") -> ModelSpec:
    """The AR baseline; ``cache``: the step graph's cache form ("layers", the default: the NPU
    form with each layer's cache its own input, read in place; "loop": the same with the caches
    stacked, as bundles exported before it; "graph": the graph writes the cache), see
    ``edgekit.spec.AR_CACHE_IO``."""
    from edgekit.models.ar import ar_io, ar_step  # lazy: torch

    cfg = configs()["ar-demo"]
    inputs, outputs = ar_io(cfg, batch, cache)
    return ModelSpec(
        name="ar-demo",
        kind="ar",
        module=ar_step(load_trained("ar-demo", weights), cache),
        inputs=inputs,
        outputs=outputs,
        meta={
            "vocab_size": cfg.vocab_size,
            "max_len": cfg.max_len,
            "bos_id": cfg.bos_id,
            "num_classes": cfg.num_classes,
            "conditioning": {"class_id": {"uncond": cfg.num_classes}},
        },
        decode_defaults={"temperature": 1.0, "top_k": 0},
        ground_truth="corpus-tokens",
    )
