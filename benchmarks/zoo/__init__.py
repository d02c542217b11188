"""Real architectures at their published sizes, from their own packages, with seeded random
weights (nothing is downloaded, nothing is committed): what ``benchmarks/real_size.py`` runs
through every edgekit command.

Each entry is an ``edgekit export`` factory (``benchmarks/zoo/<file>.py:make_model``) behind
the thin adapter edgekit's contract asks for, plus how the benchmark exports and decodes it.
Install the packages with ``pip install -c constraints.txt -r benchmarks/zoo/requirements.txt``
and ``pip install --no-deps -r benchmarks/zoo/requirements-nodeps.txt`` (their own pins pull
torchaudio, gradio and the like, which the per-step networks never import).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent


@dataclass(frozen=True)
class ZooModel:
    name: str
    factory: str  # `edgekit export` model reference
    kind: str
    batch: int
    source: str  # the package and class, at which published config
    # The conditions `edgekit run` decodes with (quantize, check and profile draw them from the
    # model's condition sampler): none = a .npz the sampler writes.
    run_cond: tuple[str, ...] = ()

    @property
    def file(self) -> Path:
        return Path(self.factory.rpartition(":")[0])


ZOO: dict[str, ZooModel] = {
    m.name: m
    for m in (
        ZooModel(
            "amused-256",
            f"{HERE / 'amused.py'}:make_model",
            "masked",
            1,
            "diffusers UVit2DModel, aMUSEd-256 config (603.5 M parameters, 16x16 tokens, codebook 8192)",
        ),
        ZooModel(
            "matcha-decoder",
            f"{HERE / 'matcha.py'}:make_model",
            "flow",
            2,
            "matcha-tts Decoder (the CFM estimator), LJSpeech config, 400 frames of 80 mels",
        ),
        ZooModel(
            "f5-dit",
            f"{HERE / 'f5_dit.py'}:make_model",
            "flow",
            1,
            "f5-tts DiT, F5TTS_v1_Base config (dim 1024, depth 22), 256 frames of 100 mels",
        ),
        ZooModel(
            "sana-600m",
            f"{HERE / 'sana.py'}:make_model",
            "flow",
            1,
            "diffusers SanaTransformer2DModel, Sana_600M_512px config (592 M parameters, 2.20 GiB), 16x16 latent",
        ),
        ZooModel(
            "ar-gpt-medium",
            f"{HERE / 'ar_large.py'}:make_model",
            "ar",
            1,
            "edgekit's causal transformer at GPT-2-medium width and depth (dim 1024, depth 24), 256 tokens",
            ("--cond", "class_id=3"),
        ),
        ZooModel(
            "ar-gpt-medium-1024",
            f"{HERE / 'ar_large.py'}:make_model_1024",
            "ar",
            1,
            "the same causal transformer with a 1024-token KV cache (1024 calls a decode)",
            ("--cond", "class_id=3"),
        ),
    )
}
