"""Tiny flow and masked models (random weights, every parameter perturbed so no block is an
identity) exported once per session: fused-graph and budget tests stay well under a minute.
The fixtures are registered in tests/conftest.py."""

from __future__ import annotations

from pathlib import Path

import pytest


def _perturb(module, seed: int):
    import torch

    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in module.parameters():
            p.add_(0.2 * torch.randn(p.shape, generator=gen))
    return module.eval()


def tiny_flow_spec(batch: int = 2):
    from edgekit.models.flow import FlowConfig, FlowDecoder
    from edgekit.spec import ModelSpec, TensorSpec

    cfg = FlowConfig(channels=4, seq_len=4, frames_per_token=2, vocab_size=8, dim=16, depth=1, heads=2, time_freqs=8)
    return ModelSpec(
        name="tiny-flow",
        kind="flow",
        module=_perturb(FlowDecoder(cfg), 0),
        inputs={
            "x": TensorSpec((batch, cfg.frames, cfg.channels), "float32", -3.0, 3.0),
            "t": TensorSpec((batch,), "float32", 0.0, 1.0),
            "tokens": TensorSpec((batch, cfg.seq_len), "int64", 0, cfg.vocab_size + 1),
        },
        outputs={"v": TensorSpec((batch, cfg.frames, cfg.channels), "float32")},
        meta={"channels": cfg.channels, "frames": cfg.frames, "conditioning": {"tokens": {"uncond": cfg.null_token}}},
        decode_defaults={"steps": 4, "solver": "midpoint", "grid": "cosine", "temperature": 1.0},
    )


def tiny_masked_spec(batch: int = 2):
    from edgekit.models.masked import MaskedConfig, MaskedTransformer
    from edgekit.spec import ModelSpec, TensorSpec

    cfg = MaskedConfig(vocab_size=16, seq_len=12, num_classes=3, dim=16, depth=1, heads=2, mlp_ratio=2)
    return ModelSpec(
        name="tiny-masked",
        kind="masked",
        module=_perturb(MaskedTransformer(cfg), 1),
        inputs={
            "tokens": TensorSpec((batch, cfg.seq_len), "int64", 0, cfg.vocab_size + 1),
            "class_id": TensorSpec((batch,), "int64", 0, cfg.num_classes + 1),
        },
        outputs={"logits": TensorSpec((batch, cfg.seq_len, cfg.vocab_size), "float32")},
        meta={
            "vocab_size": cfg.vocab_size,
            "mask_id": cfg.mask_id,
            "seq_len": cfg.seq_len,
            "conditioning": {"class_id": {"uncond": cfg.uncond_class}},
        },
        decode_defaults={"steps": 6, "schedule": "cosine", "choice_temperature": 4.5, "temperature": 1.0},
    )


def tiny_ar_spec(batch: int = 1, cache: str = "graph", depth: int = 1):
    """The AR baseline of tiny_masked_spec: same vocabulary, classes and length (12 tokens), in
    any cache form (``edgekit.spec.AR_CACHE_IO``: "graph" writes the cache; "loop" and "layers"
    are the NPU forms, "layers" with each layer's cache its own input)."""
    from edgekit.models.ar import ARConfig, CausalTransformer, ar_io, ar_step
    from edgekit.spec import ModelSpec

    cfg = ARConfig(vocab_size=16, max_len=12, num_classes=3, dim=16, depth=depth, heads=2, mlp_ratio=2)
    inputs, outputs = ar_io(cfg, batch, cache)
    meta = {
        "vocab_size": cfg.vocab_size,
        "max_len": cfg.max_len,
        "bos_id": cfg.bos_id,
        "num_classes": cfg.num_classes,
        "conditioning": {"class_id": {"uncond": cfg.num_classes}},
    }
    return ModelSpec(
        name="tiny-ar",
        kind="ar",
        module=ar_step(_perturb(CausalTransformer(cfg), 2), cache),
        inputs=inputs,
        outputs=outputs,
        meta=meta,
        decode_defaults={"temperature": 1.0, "top_k": 0},
    )


@pytest.fixture(scope="session")
def tiny_specs():
    torch = pytest.importorskip("torch")
    # The modules' initial weights come from torch's global generator, whose seed differs per
    # process: fix it (without disturbing anyone else's draws) so every run tests the same models.
    with torch.random.fork_rng():
        torch.manual_seed(0)
        return {"flow": tiny_flow_spec(), "masked": tiny_masked_spec()}


@pytest.fixture(scope="session")
def tiny_bundles(tiny_specs, tmp_path_factory) -> dict[str, Path]:
    """{kind: bundle dir} of the tiny models, host graph exported and verified."""
    from edgekit.export.to_bundle import export_bundle

    root = tmp_path_factory.mktemp("fast")
    return {kind: export_bundle(spec, root / kind, source=spec.name).root for kind, spec in tiny_specs.items()}


@pytest.fixture(scope="session")
def tiny_qnn_bundles(tmp_path_factory) -> dict[str, Path]:
    """{kind: bundle dir} of the tiny models at batch 1 (AR in its stacked "loop" cache form, as
    bundles exported before the "layers" form; the HTP backend's emulation costs
    ~10x a CPU forward), their int8 model from ``quantize --profile qnn`` (budget measured on
    the HTP backend). Tests that write into a bundle copy it first."""
    pytest.importorskip("torch")
    from edgekit.export.to_bundle import export_bundle
    from edgekit.quantize import QuantizeConfig, quantize_bundle

    root = tmp_path_factory.mktemp("qnn")
    out = {}
    import torch

    with torch.random.fork_rng():
        torch.manual_seed(0)
        specs = (
            ("masked", tiny_masked_spec(batch=1)),
            ("flow", tiny_flow_spec(batch=1)),
            ("ar", tiny_ar_spec(batch=1, cache="loop")),
        )
    for kind, spec in specs:
        bundle = export_bundle(spec, root / kind, source=spec.name).root
        # The tiny flow's random weights are far from trained ones (uint8 weights leave ~15 dB,
        # check's 30 dB velocity gate is out of reach): its budget here is what 8 bits reach, so
        # the fixture builds without a promotion search. The tiny AR gets the profile's budget
        # (check's gate included): its search promotes a tensor or two (seconds).
        budget = {"snr_db": 10.0, "check_margin": -1.0} if kind == "flow" else {}
        quantize_bundle(bundle, QuantizeConfig(profile="qnn", calib_samples=2, eval_samples=2, budget=budget))
        out[kind] = bundle
    return out


@pytest.fixture(scope="session")
def tiny_int8_bundles(tiny_bundles, tmp_path_factory) -> dict[str, Path]:
    """The tiny masked model quantized once (cpu profile, scheme exact on every x86 CPU, no
    fallback search, a budget it meets anywhere): ``embedded`` one int8 file, ``buckets`` two
    step buckets' graphs over one weights file, ``external`` its weights in a side file
    (``EDGEKIT_EXTERNAL_DATA_MB=0``, as a model over 2 GB). Seconds in all. Tests that write
    into a bundle copy it first."""
    import dataclasses
    import shutil

    from edgekit.export.to_bundle import export_bundle
    from edgekit.quantize import QuantizeConfig, quantize_bundle

    root = tmp_path_factory.mktemp("tiny-int8")
    loose = {"check_margin": -100.0, "lockstep_token_agreement": 0.0, "event_accuracy_drop": 1.0}
    cfg = QuantizeConfig(calib_samples=2, eval_samples=2, isa="avx2", fallback=False, budget=loose)
    embedded = Path(shutil.copytree(tiny_bundles["masked"], root / "embedded"))
    quantize_bundle(embedded, cfg)
    buckets = Path(shutil.copytree(tiny_bundles["masked"], root / "buckets"))
    quantize_bundle(buckets, dataclasses.replace(cfg, step_buckets=2))
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("EDGEKIT_EXTERNAL_DATA_MB", "0")
        torch = pytest.importorskip("torch")
        with torch.random.fork_rng():
            torch.manual_seed(0)
            spec = tiny_masked_spec()
        external = export_bundle(spec, root / "external", source=spec.name).root
        quantize_bundle(external, cfg)
    return {"embedded": embedded, "buckets": buckets, "external": external}


@pytest.fixture(scope="session")
def tiny_fallback_bundle(tiny_bundles, tmp_path_factory) -> Path:
    """The tiny masked model quantized (cpu profile) with one forced budget fallback: a budget no
    INT8 model meets (agreement above 1) and ``max_fallback=1``, so the most sensitive layer goes
    back to float and the run is recorded as failed. Tests that write into it copy it first."""
    import shutil

    from edgekit.quantize import QuantizeConfig, quantize_bundle

    path = Path(shutil.copytree(tiny_bundles["masked"], tmp_path_factory.mktemp("fallback") / "masked"))
    cfg = QuantizeConfig(calib_samples=2, eval_samples=2, budget={"lockstep_token_agreement": 1.01}, max_fallback=1)
    quantize_bundle(path, cfg)
    return path
