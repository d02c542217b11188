"""The built-in demo corpus: a seeded class-conditional "speech-unit" process with an exact
ground truth, and spectrum-like frames that are a known function of the tokens.

numpy only: the device side scores decode outputs with these metrics without torch.

Tokens. Class ``c`` owns a subset of the unit codebook. A sequence is a chain of units drawn
from a sparse class-specific Markov chain (a unit never follows itself), each unit held for a
duration drawn from its own small set, truncated to ``seq_len``. Runs of equal tokens are
therefore unambiguous, so validity and the exact likelihood of any sequence are computable:
    NLL = -log π_c(u0) - Σ log P_c(u_i -> u_{i+1}) - Σ log p_u(d_i) - log P_u(D >= d_last)
(the last run may be cut by the sequence end, hence its survival probability).

Frames. Every unit has a template spectrum (a few Gaussian "formants" over ``channels`` bins);
token ``k`` spans ``frames_per_token`` frames; the clean target is the template sequence
smoothed over time by a fixed 3-tap kernel, and the training target adds Gaussian noise. The
ground-truth error of generated frames is measured against the clean target.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

import numpy as np

from edgekit.spec import GROUND_TRUTH_TASKS


@dataclass(frozen=True)
class CorpusConfig:
    num_classes: int = 8  # conditioning classes ("speakers"/"prompts"); class id num_classes = unconditional
    vocab_size: int = 64  # unit codebook size V; the mask / BOS / null id is V
    seq_len: int = 64  # tokens per sequence L (static shape of the demo graphs)
    units_per_class: int = 20  # each class uses a subset: makes the class condition informative
    successors: int = 3  # out-degree of the unit chain: sparse, so invalid sequences are easy to spot
    max_duration: int = 4  # durations lie in {dmin, dmin+1} with dmin in 1..max_duration-1
    frames_per_token: int = 2  # frame rate / token rate (Matcha/CosyVoice use 2–4)
    channels: int = 80  # spectrum bins, like an 80-bin mel spectrogram
    frame_noise: float = 0.02  # std of the noise on training frames (the clean target has none)
    seed: int = 20261130  # the process itself; sampling uses separate seeds

    @property
    def frames(self) -> int:
        return self.seq_len * self.frames_per_token


class Corpus:
    """The process parameters (drawn once from ``config.seed``) and its exact metrics."""

    def __init__(self, config: CorpusConfig = CorpusConfig()):
        self.config = config
        cfg = config
        rng = np.random.default_rng(cfg.seed)
        V, C = cfg.vocab_size, cfg.num_classes
        self.initial = np.zeros((C, V))  # π_c
        self.transition = np.zeros((C, V, V))  # P_c[u, u']
        for c in range(C):
            units = rng.choice(V, size=cfg.units_per_class, replace=False)
            starts = rng.choice(units, size=4, replace=False)
            self.initial[c, starts] = rng.dirichlet(np.ones(4))
            for u in units:
                nxt = rng.choice(units[units != u], size=cfg.successors, replace=False)
                self.transition[c, u, nxt] = rng.dirichlet(np.full(cfg.successors, 2.0))
        # Durations: unit u lasts dmin_u or dmin_u + 1 tokens.
        self.dmin = rng.integers(1, cfg.max_duration, size=V)
        self.p_short = rng.uniform(0.3, 0.7, size=V)
        # Template spectra [V, channels]: 2–3 Gaussian bumps on a small floor.
        bins = np.arange(cfg.channels)
        self.templates = np.full((V, cfg.channels), 0.1)
        for u in range(V):
            for _ in range(rng.integers(2, 4)):
                centre, width, amp = rng.uniform(4, cfg.channels - 4), rng.uniform(2, 7), rng.uniform(0.4, 1.0)
                self.templates[u] += amp * np.exp(-0.5 * ((bins - centre) / width) ** 2)

    # ---- sampling -------------------------------------------------------------------------
    def sample_tokens(self, class_ids: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        """Draw sequences. class_ids int64[N] -> tokens int64[N, L]."""
        L = self.config.seq_len
        out = np.empty((len(class_ids), L), dtype=np.int64)
        for n, c in enumerate(class_ids):
            seq: list[int] = []
            u = rng.choice(self.config.vocab_size, p=self.initial[c])
            while len(seq) < L:
                d = self.dmin[u] + (0 if rng.random() < self.p_short[u] else 1)
                seq.extend([u] * int(d))
                u = rng.choice(self.config.vocab_size, p=self.transition[c, u])
            out[n] = seq[:L]
        return out

    def clean_frames(self, tokens: np.ndarray) -> np.ndarray:
        """tokens int64[N, L] (ids >= V are not allowed) -> clean frames float32[N, T, channels]."""
        frames = self.templates[np.repeat(tokens, self.config.frames_per_token, axis=1)]
        padded = np.concatenate([frames[:, :1], frames, frames[:, -1:]], axis=1)
        smooth = 0.25 * padded[:, :-2] + 0.5 * padded[:, 1:-1] + 0.25 * padded[:, 2:]
        return smooth.astype(np.float32)

    def noisy_frames(self, tokens: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        clean = self.clean_frames(tokens)
        return (clean + self.config.frame_noise * rng.standard_normal(clean.shape)).astype(np.float32)

    # ---- exact metrics --------------------------------------------------------------------
    def _runs(self, seq: np.ndarray) -> list[tuple[int, int]]:
        change = np.flatnonzero(np.diff(seq)) + 1
        starts = np.concatenate([[0], change])
        ends = np.concatenate([change, [len(seq)]])
        return [(int(seq[s]), int(e - s)) for s, e in zip(starts, ends)]

    def _score(self, seq: np.ndarray, c: int) -> tuple[float, int, int]:
        """(log-probability, events, impossible events) of one sequence; events are the first
        unit, every transition and every duration."""
        if seq.min() < 0 or seq.max() >= self.config.vocab_size:
            return -np.inf, 1, 1
        runs = self._runs(seq)
        probs = [self.initial[c, runs[0][0]]]
        for i, (u, d) in enumerate(runs):
            last = i == len(runs) - 1
            probs.append(self._p_duration(u, d, survival=last))
            if not last:
                probs.append(self.transition[c, u, runs[i + 1][0]])
        probs_arr = np.asarray(probs)
        bad = int(np.sum(probs_arr <= 0))
        logp = -np.inf if bad else float(np.sum(np.log(probs_arr)))
        return logp, len(probs), bad

    def sequence_nll(self, tokens: np.ndarray, class_ids: np.ndarray) -> np.ndarray:
        """Exact negative log-likelihood (nats) of each sequence under its class's process.
        tokens int64[N, L], class_ids int64[N] -> float64[N]; +inf for impossible sequences."""
        return np.array([-self._score(s, int(c))[0] for s, c in zip(np.asarray(tokens), np.asarray(class_ids))])

    def _p_duration(self, u: int, d: int, survival: bool) -> float:
        lo, ps = int(self.dmin[u]), float(self.p_short[u])
        if survival:  # P(D >= d)
            return 1.0 if d <= lo else (1.0 - ps if d == lo + 1 else 0.0)
        return ps if d == lo else (1.0 - ps if d == lo + 1 else 0.0)

    def validity(self, tokens: np.ndarray, class_ids: np.ndarray) -> np.ndarray:
        """bool[N]: the sequence has non-zero probability under its class's process."""
        return np.isfinite(self.sequence_nll(tokens, class_ids))

    def token_metrics(self, tokens: np.ndarray, class_ids: np.ndarray) -> dict[str, float]:
        """Ground-truth quality of generated tokens:
        validity — share of sequences possible under their class's process (one slip voids one);
        event_accuracy — share of events (first unit, transitions, durations) that are possible;
        nll_per_token — exact NLL of the valid sequences per token (the corpus itself scores
        ``reference_token_metrics``)."""
        scores = [self._score(s, int(c)) for s, c in zip(np.asarray(tokens), np.asarray(class_ids))]
        logp = np.array([s[0] for s in scores])
        events = sum(s[1] for s in scores)
        bad = sum(s[2] for s in scores)
        valid = np.isfinite(logp)
        per_tok = float(-logp[valid].mean() / self.config.seq_len) if valid.any() else float("nan")
        return {"validity": float(valid.mean()), "event_accuracy": 1.0 - bad / max(events, 1), "nll_per_token": per_tok}

    def frame_metrics(self, frames: np.ndarray, tokens: np.ndarray) -> dict[str, float]:
        """Ground-truth error of generated frames float[N,T,C] vs the clean target of tokens."""
        clean = self.clean_frames(tokens).astype(np.float64)
        err = np.asarray(frames, dtype=np.float64) - clean
        snr = 10 * np.log10(np.sum(clean**2) / max(np.sum(err**2), 1e-30))
        return {"snr_db": float(snr), "l1": float(np.abs(err).mean())}

    @cached_property
    def reference_token_metrics(self) -> dict[str, float]:
        """Metrics of 256 true samples: the ceiling a perfect model reaches."""
        rng = np.random.default_rng(1)
        classes = rng.integers(0, self.config.num_classes, 256)
        return self.token_metrics(self.sample_tokens(classes, rng), classes)


_DEFAULT: Corpus | None = None


def default_corpus() -> Corpus:
    """The corpus the built-in demo models were trained on (built once per process)."""
    global _DEFAULT
    if _DEFAULT is None:
        _DEFAULT = Corpus()
    return _DEFAULT


# ---- the demo models' evaluation hooks (named in a bundle's manifest as "ground_truth") --------
# A manifest names one of these tasks (edgekit.spec.GROUND_TRUTH_TASKS), never a code path:
# loading a bundle runs no code it names.


def demo_conditions(task: str, n: int, seed: int) -> dict[str, np.ndarray]:
    """Held-out conditions for ``n`` decodes: class ids (tokens) or true token sequences (frames).
    Seeds are offset from training's (which uses seeds < 1_000_000) so evaluation is held out."""
    corpus = default_corpus()
    rng = np.random.default_rng(1_000_000 + seed)
    classes = rng.integers(0, corpus.config.num_classes, n).astype(np.int64)
    if task == "corpus-tokens":
        return {"class_id": classes}
    if task == "corpus-frames":
        return {"tokens": corpus.sample_tokens(classes, rng)}
    raise ValueError(f"unknown ground-truth task {task!r}; valid: {GROUND_TRUTH_TASKS}")


def score(task: str, output: np.ndarray, cond: dict[str, np.ndarray]) -> dict[str, float]:
    """Ground-truth quality of a decode output (tokens int64[N, L] or frames float32[N, T, C])."""
    corpus = default_corpus()
    if task == "corpus-tokens":
        return corpus.token_metrics(output, cond["class_id"])
    if task == "corpus-frames":
        return corpus.frame_metrics(output, cond["tokens"])
    raise ValueError(f"unknown ground-truth task {task!r}; valid: {GROUND_TRUTH_TASKS}")
