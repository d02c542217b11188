"""F5-TTS's DiT (f5-tts ``DiT``, the flow-matching velocity network) at its published
F5TTS_v1_Base config (dim 1024, depth 22, 16 heads, ff_mult 2, text_dim 512, 4 ConvNeXt text
layers: 336 M parameters), over 256 mel frames (about 2.7 s at 24 kHz, hop 256) — behind
edgekit's flow contract.

    edgekit export benchmarks/zoo/f5_dit.py:make_model -o bundles/f5 --batch 1

The network: x float32[B, N, 100] (the noised mel, channels last as edgekit's contract),
cond float32[B, N, 100] (the masked reference audio), text int64[B, N] (character ids padded
to the frame count), time float32[B] -> v float32[B, N, 100]. Classifier-free guidance drops
both (F5's drop_audio_cond / drop_text: zero audio, the filler text id 0).

f5-tts's package front doors import its trainer (wandb, accelerate, torchdiffeq, ...) and its
modules import torchaudio, librosa, rjieba and pypinyin at the top for the mel front end and the
tokenizer, which the DiT never calls; torchaudio has no build for every torch (none for 2.13,
the one this project pins). So the DiT's own files are imported without the package's
__init__ files, and each of those front-end packages that is not installed is an empty module.
The DiT's code runs unchanged.
"""

from __future__ import annotations

import sys
import types

import torch
from torch import nn

from edgekit import ModelSpec, TensorSpec

MELS = 100
FRAMES = 256
TEXT_VOCAB = 2545  # F5TTS_v1_Base's pinyin vocabulary (Emilia_ZH_EN)


def _import_dit() -> type:
    """f5_tts.model.backbones.dit.DiT, imported past the package front doors (module doc)."""
    import importlib

    root = importlib.util.find_spec("f5_tts")
    if root is None or not root.submodule_search_locations:
        raise ImportError("f5-tts is not installed: pip install --no-deps -r benchmarks/zoo/requirements-nodeps.txt")
    base = list(root.submodule_search_locations)[0]
    for name, path in (
        ("f5_tts", base),
        ("f5_tts.model", f"{base}/model"),
        ("f5_tts.model.backbones", f"{base}/model/backbones"),
    ):
        if name not in sys.modules:
            package = types.ModuleType(name)
            package.__path__ = [path]  # a package without its __init__: submodules load from here
            sys.modules[name] = package
    for name, attrs in (
        ("torchaudio", {}),
        ("rjieba", {}),
        ("pypinyin", {"Style": None, "lazy_pinyin": None}),
        ("librosa", {"filters": types.SimpleNamespace(mel=None)}),
    ):
        if name not in sys.modules and importlib.util.find_spec(name) is None:
            sys.modules[name] = stand_in = types.ModuleType(name)
            stand_in.__dict__.update(attrs)
            if name == "librosa":
                sys.modules["librosa.filters"] = stand_in.filters
    return importlib.import_module("f5_tts.model.backbones.dit").DiT


class F5Adapter(nn.Module):
    """x, cond [B, N, 100], text [B, N], t [B] -> v [B, N, 100]; the conditional pass only
    (edgekit's loop runs the unconditional one with the conditions set to their null values)."""

    def __init__(self, inner: nn.Module):
        super().__init__()
        self.inner = inner

    def forward(self, x, t, cond, text):
        return self.inner(x, cond, text, t)


def sample_conditions(rng, batch: int) -> dict:
    """A voice prompt and its text, as F5 infers: the first 30 % of frames hold the reference
    mel (unit scale), the rest are zero (to be generated); character ids fill the text, then
    the filler id 0 after the text ends. numpy only."""
    import numpy as np

    prompt = int(0.3 * FRAMES)
    cond = np.zeros((batch, FRAMES, MELS), dtype=np.float32)
    cond[:, :prompt] = rng.standard_normal((batch, prompt, MELS))
    text = np.zeros((batch, FRAMES), dtype=np.int64)
    n_chars = int(0.6 * FRAMES)  # about 2.4 frames per character
    text[:, :n_chars] = rng.integers(1, TEXT_VOCAB, size=(batch, n_chars))
    return {"cond": cond, "text": text}


def make_model(batch: int = 1, seed: int = 0) -> ModelSpec:
    DiT = _import_dit()  # lazy: the zoo's own dependency
    torch.manual_seed(seed)
    inner = DiT(
        dim=1024,
        depth=22,
        heads=16,
        ff_mult=2,
        mel_dim=MELS,
        text_num_embeds=TEXT_VOCAB,
        text_dim=512,
        text_mask_padding=True,
        conv_layers=4,
        dropout=0.0,
    )
    # F5 zero-initialises its AdaLN and output layers for training: from a seed they would make
    # every block an identity and v = 0. Re-draw them small so every block computes.
    with torch.no_grad():
        for module in [*(b.attn_norm.linear for b in inner.transformer_blocks), inner.norm_out.linear, inner.proj_out]:
            module.weight.normal_(0.0, 0.02)
            module.bias.normal_(0.0, 0.02)
    inner.eval()
    return ModelSpec(
        name="f5-dit",
        kind="flow",
        module=F5Adapter(inner),
        inputs={
            "x": TensorSpec((batch, FRAMES, MELS), "float32", -3.0, 3.0),
            "t": TensorSpec((batch,), "float32", 0.0, 1.0),
            "cond": TensorSpec((batch, FRAMES, MELS), "float32", -3.0, 3.0),
            "text": TensorSpec((batch, FRAMES), "int64", 0, TEXT_VOCAB),
        },
        outputs={"v": TensorSpec((batch, FRAMES, MELS), "float32")},
        meta={"channels": MELS, "frames": FRAMES, "conditioning": {"cond": {"uncond": 0.0}, "text": {"uncond": 0}}},
        # F5-TTS samples 32 Euler steps on a sway grid with CFG 2; 8 steps keep a 2-core CPU in minutes.
        decode_defaults={
            "steps": 8,
            "solver": "euler",
            "grid": "sway",
            "sway": -1.0,
            "guidance": 2.0,
            "temperature": 1.0,
        },
        condition_sampler=f"{__file__}:sample_conditions",
    )
