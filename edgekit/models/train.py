"""Reproducible training of the three demo models on the demo corpus (`edgekit train-demo`).

Small on purpose: a few minutes on a 2-core CPU. Fixed seeds and single-threaded data make the
run repeatable; bitwise equality across machines is not promised (BLAS kernels differ).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from edgekit._deps import require
from edgekit.models.corpus import default_corpus
from edgekit.models.demo import build_module

# Optimizer steps per demo model: the bidirectional masked model needs the most to learn the
# grammar (0.2 s per step on a 2-core AMD EPYC: 20000 steps took 66 min alone at load 2.0;
# ar 1000 and flow 1500 steps are minutes). Masked, 64 held-out conditions, ORT fp32, decode
# defaults (K = 8: event accuracy / validity; K = 16: validity): 6000 steps 0.890 / 0 / 0.047,
# 12000 steps 0.919 / 0.031 / 0.094 (AR at the same temperature: 0.950 / 0.156). PyTorch fp32,
# benchmarks/demo_quality.py's set (K = 4 / 8 event accuracy; K = 8 / 16 validity): 12000 steps
# 0.795 / 0.913; 0.031 / 0.047; 20000 steps 0.815 / 0.931; 0.062 / 0.109 (AR 0.938; 0.125).
DEFAULT_STEPS = {"masked-demo": 20000, "ar-demo": 1000, "flow-demo": 1500}
# The masked model starts from the trained AR baseline's weights (same widths and blocks: the
# token, position and class embeddings, attention and MLPs carry over; its local conv and the
# [MASK] row start fresh) and masks a uniform share of tokens. Measured here (1500 steps each,
# 32 held-out conditions, event accuracy at K = 8 / 16 / 64 steps): from scratch with the cosine
# mask share 0.43 / 0.44 / 0.45; uniform share 0.47 / 0.50 / 0.51; AR init 0.73 / 0.79 / 0.82;
# both 0.76 / 0.82 / 0.84 (the shipped 6000-step model from scratch: 0.67 / 0.71 / 0.73).
MASKED_INIT = "ar-demo"


@dataclass(frozen=True)
class TrainConfig:
    steps: int | None = None  # None = DEFAULT_STEPS for the model being trained
    batch: int = 32  # sequences per step
    lr: float = 1e-3  # AdamW peak, cosine-decayed after a short warm-up
    warmup: int = 60  # steps of linear warm-up: transformers diverge without it at this lr
    weight_decay: float = 0.01
    cond_dropout: float = 0.1  # share of rows trained unconditionally: makes CFG possible
    sigma_min: float = 1e-4  # flow matching path width (Matcha-TTS uses 1e-4)
    dataset: int = 20_000  # sequences drawn once from the corpus (seeds < 1e6: eval is held out)
    seed: int = 0
    # masked: the share of masked tokens per row, "uniform" in (0, 1] or MaskGIT's "cosine" γ(r)
    # (which masks most tokens most of the time: less signal per step on a small corpus).
    mask_ratio: str = "uniform"
    # masked: start from these module weights (the trained AR baseline's state_dict); None = scratch.
    init_state: object | None = None


def _lr(step: int, cfg: TrainConfig) -> float:
    if step < cfg.warmup:
        return cfg.lr * (step + 1) / cfg.warmup
    progress = (step - cfg.warmup) / max(1, cfg.steps - cfg.warmup)
    return cfg.lr * 0.5 * (1 + math.cos(math.pi * progress))


def _masked_loss(model, torch, tokens, classes, gen, cfg):
    B, L = tokens.shape
    mask_id = model.cfg.mask_id
    # MaskGIT training: the share masked is r ~ U(0,1) ("uniform") or gamma(r) = cos(pi/2 r)
    # ("cosine"); at least one masked token.
    r = torch.rand(B, generator=gen)
    share = torch.cos(math.pi / 2 * r) if cfg.mask_ratio == "cosine" else r
    n_mask = torch.clamp(torch.ceil(share * L), 1, L)
    ranks = torch.rand(B, L, generator=gen).argsort(dim=1).argsort(dim=1)
    masked = ranks < n_mask[:, None]
    logits = model(torch.where(masked, mask_id, tokens), classes)
    return torch.nn.functional.cross_entropy(logits[masked], tokens[masked])


def _ar_loss(model, torch, tokens, classes, gen, cfg):
    bos = torch.full_like(tokens[:, :1], model.cfg.bos_id)
    logits = model(torch.cat([bos, tokens[:, :-1]], dim=1), classes)
    return torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), tokens.reshape(-1))


def _flow_loss(model, torch, tokens, frames, gen, cfg):
    B = tokens.shape[0]
    x1 = frames
    x0 = torch.randn(x1.shape, generator=gen)
    t = torch.rand(B, generator=gen)
    tt = t[:, None, None]
    # Conditional flow matching (Lipman et al.; Matcha-TTS): straight path noise -> data.
    xt = (1 - (1 - cfg.sigma_min) * tt) * x0 + tt * x1
    target = x1 - (1 - cfg.sigma_min) * x0
    return torch.mean((model(xt, t, tokens) - target) ** 2)


def train_model(name: str, cfg: TrainConfig = TrainConfig(), progress: Callable[[int, float], None] | None = None):
    """Train one demo model from scratch; returns (module, final mean loss of the last 50 steps)."""
    torch = require("torch")

    torch.manual_seed(cfg.seed)
    corpus = default_corpus()
    rng = np.random.default_rng(cfg.seed)
    classes = rng.integers(0, corpus.config.num_classes, cfg.dataset)
    tokens = corpus.sample_tokens(classes, rng)
    data_tokens = torch.from_numpy(tokens)
    data_classes = torch.from_numpy(classes.astype(np.int64))
    if cfg.steps is None:
        cfg = replace(cfg, steps=DEFAULT_STEPS[name])
    model = build_module(name)
    if cfg.init_state is not None:
        init_from(model, cfg.init_state)
    model = model.train()
    opt = torch.optim.AdamW(model.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay, betas=(0.9, 0.98))
    gen = torch.Generator().manual_seed(cfg.seed)
    null_class = corpus.config.num_classes
    null_token = corpus.config.vocab_size
    losses: list[float] = []
    for step in range(cfg.steps):
        idx = torch.randint(0, cfg.dataset, (cfg.batch,), generator=gen)
        tok, cls = data_tokens[idx], data_classes[idx]
        drop = torch.rand(cfg.batch, generator=gen) < cfg.cond_dropout
        if name == "flow-demo":
            frames = torch.from_numpy(corpus.noisy_frames(tok.numpy(), np.random.default_rng(step)))
            cond_tokens = torch.where(drop[:, None], null_token, tok)
            loss = _flow_loss(model, torch, cond_tokens, frames, gen, cfg)
        else:
            cls = torch.where(drop, null_class, cls)
            loss = (_masked_loss if name == "masked-demo" else _ar_loss)(model, torch, tok, cls, gen, cfg)
        for group in opt.param_groups:
            group["lr"] = _lr(step, cfg)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        losses.append(loss.item())
        if progress is not None:
            progress(step + 1, losses[-1])
    return model.eval(), float(np.mean(losses[-50:]))


def init_from(model, state) -> int:
    """Copy every tensor of ``state`` (another demo module's state_dict, e.g. the AR baseline's)
    whose name and shape ``model`` shares; embedding rows are copied for the rows both have (the
    AR's BOS row is not the masked model's [MASK] row: that one keeps its fresh init). Returns how
    many tensors came over."""
    own = model.state_dict()
    copied = {}
    for name, value in state.items():
        if name not in own:
            continue
        if name == "tok_emb.weight":
            rows = min(len(value), len(own[name])) - 1  # the last row is BOS (AR) / MASK (masked)
            merged = own[name].clone()
            merged[:rows] = value[:rows]
            copied[name] = merged
        elif own[name].shape == value.shape:
            copied[name] = value
    model.load_state_dict(copied, strict=False)
    return len(copied)


def save_weights(module, path: Path) -> None:
    """safetensors, written atomically (temp file + rename), readable by everyone (0644)."""
    save_file = require("safetensors.torch").save_file
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(path.suffix + ".tmp")
    state = {k: v.detach().contiguous() for k, v in module.state_dict().items()}
    save_file(state, str(tmp), metadata={"format": "pt", "producer": "edgekit train-demo"})
    tmp.chmod(0o644)
    tmp.replace(path)
