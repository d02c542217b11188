"""Accuracy metrics between two variants' decodes of the same conditions under the same noise.

How a comparison is recorded, with the decode loops untouched (they only ever see a ``Runtime``):

- ``ShadowRecorder`` wraps the *reference* runtime. At every call it keeps a copy of the loop
  state it was fed (tokens / x / token) and runs the *candidate* network on the identical feeds
  ("shadow", i.e. teacher forcing). Per-step logits KL / top-1 agreement (masked, ar) and velocity
  SNR (flow) therefore measure the candidate network alone, at every mask ratio or ODE time the
  reference trajectory visits, free of the chaos that one flipped sample causes downstream.
- A second ``ShadowRecorder`` wraps the candidate in its own free-running decode with the same
  seed, hence the same Gumbel noise / the same x0. Trajectory metrics (token agreement, first
  divergence, SNR of the final frames, the per-step divergence curve) measure what a user gets,
  error accumulation included.

numpy only. The accumulators sum over the batches of one check; ``result()`` gives the scalar
metrics and the per-step curves.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from edgekit.errors import unknown
from edgekit.evaluate.scores import HIGHER_IS_BETTER, MetricHook, load_metric_hook, power_ratio_db, run_metric_hook  # noqa: F401 (lives in scores: profile scores with it too)
from edgekit.runtimes.base import RuntimeProxy
from edgekit.spec import KIND_IO

# Metrics averaged over the valid sequences only: nan means "no valid sequence", which the
# validity metric already judges; a one-sided nan is no drop of its own.
OVER_VALID_ONLY: frozenset[str] = frozenset({"nll_per_token"})

# Pair statistics one shadow call returns: a vector of sums, added up per decode step.
PairFn = Callable[[Mapping[str, np.ndarray], Mapping[str, np.ndarray], Mapping[str, np.ndarray]], np.ndarray]


class ShadowRecorder(RuntimeProxy):
    """A ``Runtime`` that forwards every call to ``inner``, keeps the loop state it was fed and
    runs a shadow runtime on the same feeds.

    record: name of the feed to keep a copy of per call (the loop state; None = keep none).
    shadow: a second runtime run on the very same feeds after ``inner``; ``on_pair(feeds,
    inner_outputs, shadow_outputs)`` reduces each pair to a float64 vector of sums (nothing big
    is kept, whatever the vocabulary). Returns ``inner``'s outputs unchanged.
    ``close`` closes neither runtime: whoever opened them closes them.
    """

    def __init__(self, inner: Any, record: str | None = None, shadow: Any = None, on_pair: PairFn | None = None):
        if (shadow is None) != (on_pair is None):
            raise ValueError("shadow and on_pair go together")
        super().__init__(inner, name=f"recording({inner.name})", owns_inner=False)
        self.record = record
        self.shadow = shadow
        self.on_pair = on_pair
        self.recorded: list[np.ndarray] = []  # per call: a copy of feeds[record]
        self.paired: list[np.ndarray] = []  # per call: on_pair(...)
        self.calls = 0

    def run(self, feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        if self.record is not None:
            self.recorded.append(np.array(feeds[self.record]))
        out = self.inner.run(feeds)
        if self.shadow is not None:
            self.paired.append(np.asarray(self.on_pair(feeds, out, self.shadow.run(feeds)), dtype=np.float64))
        self.calls += 1
        return out

    def reset(self) -> None:
        """Forget what was recorded (between batches)."""
        self.recorded.clear()
        self.paired.clear()
        self.calls = 0


# ---- per-call pair statistics -------------------------------------------------------------------
def _codebook(width: int, vocab: int, mask_id: int) -> np.ndarray:
    """Indices of the logits a decode may sample: the codebook, never the mask id."""
    return np.array([i for i in range(min(width, vocab)) if i != mask_id], dtype=np.int64)


def _log_softmax(x: np.ndarray) -> np.ndarray:
    x = x - x.max(axis=-1, keepdims=True)
    return x - np.log(np.exp(x).sum(axis=-1, keepdims=True))


# FP32's own top two within this many nats (a probability ratio under 1.105) at a position: a
# near-tie, where any perturbation flips the argmax. A random-weight model's logits are near-ties
# almost everywhere (aMUSEd-256 and a 112 M ModernBERT seeded: top-1 agreement 0.77-0.99 at a
# logits KL of 6e-5), so a failed top-1 gate says how many of its flips were at near-ties.
NEAR_TIE_NATS = 0.1
# Where at least this share of a failed top-1 gate's flips were at near-ties, check says so.
NEAR_TIE_NOTE_SHARE = 0.8


def near_ties(scores: np.ndarray) -> np.ndarray:
    """bool [...]: where the top two of ``scores`` [..., V] (log-probabilities, or a sampler's
    scores) are within ``NEAR_TIE_NATS``; none where there is one candidate."""
    if scores.shape[-1] < 2:
        return np.zeros(scores.shape[:-1], bool)
    two = np.partition(scores, -2, axis=-1)[..., -2:]  # second, first
    return np.asarray((two[..., 1] - two[..., 0]) < NEAR_TIE_NATS)


def logits_pair_sums(ref: np.ndarray, cand: np.ndarray, where: np.ndarray, vocab: int, mask_id: int) -> np.ndarray:
    """[Σ KL(ref ‖ cand), Σ top-1 agreement, count, Σ near-ties, Σ flips at near-ties] over the
    positions ``where`` is True.

    ref, cand: float logits [..., W] of the same feeds; where: bool [...] (masked: the positions
    still masked, the ones the step samples; ar: every row). Softmax over the codebook only, in
    float64. KL(ref ‖ cand) is the expected extra nats per token of sampling from the candidate.
    A near-tie: the reference's top two log-probabilities within ``NEAR_TIE_NATS``.
    """
    keep = _codebook(ref.shape[-1], vocab, mask_id)
    r = _log_softmax(np.asarray(ref, dtype=np.float64)[where][:, keep])  # (P, V')
    c = _log_softmax(np.asarray(cand, dtype=np.float64)[where][:, keep])
    kl = np.sum(np.exp(r) * (r - c), axis=-1)  # (P,)
    top1 = np.argmax(r, axis=-1) == np.argmax(c, axis=-1)
    tie = near_ties(r)
    return np.array([kl.sum(), top1.sum(), len(kl), tie.sum(), (tie & ~top1).sum()], dtype=np.float64)


def near_tie_note(
    metrics: Mapping[str, Any],
    metric: str = "top1_agreement",
    ties: str = "reference_near_ties",
    flips: str = "flips_at_near_ties",
    what: str = "FP32's own top two tokens are",
    kl: float | None = None,
) -> str | None:
    """One line where most of ``metric``'s flips were at the reference's own near-ties (the gate
    then counts coin flips of a model that barely decides, not quantization error); None where the
    figures are missing or the flips were decided ones. ``ties``, ``flips``: the keys of the
    near-tie share and of the flips' share at near-ties; ``kl``: the logits KL, else
    ``metrics["logits_kl"]``."""
    share, tied, value = (metrics.get(k) for k in (flips, ties, metric))
    if share is None or tied is None or value is None or not share >= NEAR_TIE_NOTE_SHARE:
        return None
    kl = metrics.get("logits_kl") if kl is None else kl
    return (
        f"{metric} {value:.4g}: {share:.0%} of its flips are where {what} within {NEAR_TIE_NATS:g} nats "
        f"({tied:.0%} of the decisions compared): the FP32 model barely decides there "
        "(an untrained or random-weight model?)"
        + ("" if kl is None else f"; logits_kl {kl:.3g} measures the network's error at those positions")
    )


def velocity_pair_sums(ref: np.ndarray, cand: np.ndarray) -> np.ndarray:
    """[Σ (cand − ref)², Σ ref²] of two velocity fields [S, T, C] (for an SNR in dB)."""
    r = np.asarray(ref, dtype=np.float64)
    return np.array([np.sum((np.asarray(cand, dtype=np.float64) - r) ** 2), np.sum(r**2)])


def _per_step(paired: list[np.ndarray], calls_per_step: int, steps: int) -> np.ndarray:
    """Per-call sum vectors -> per-step sums [steps, k] (CFG may take two calls per step)."""
    out = np.zeros((steps, len(paired[0]) if paired else 1))
    for call, sums in enumerate(paired):
        out[min(call // calls_per_step, steps - 1)] += sums
    return out


def _calls_per_step(runtime_calls: int, steps: int) -> int:
    return max(1, runtime_calls // max(1, steps))


def _states(rec: ShadowRecorder, output: np.ndarray, runtime_calls: int, steps: int) -> list[np.ndarray]:
    """Loop state after each step 1..steps: the state fed to the first call of the next step
    (its first B rows: the conditional ones), and the final output."""
    cps = _calls_per_step(runtime_calls, steps)
    b = len(output)
    return [rec.recorded[k * cps][:b] for k in range(1, steps)] + [output]


# ---- accumulators per kind ------------------------------------------------------------------------
def _add(total: np.ndarray | None, part: np.ndarray) -> np.ndarray:
    return part if total is None else total + part


class _Accumulator:
    """Sums over the batches of one check. Subclasses define ``on_pair``, ``add`` and ``result``."""

    def __init__(self, kind: str, meta: Mapping[str, Any]):
        self.kind = kind
        self.meta = meta
        self.state_input = KIND_IO[kind][0][0]  # tokens | x | token: the feed to record
        self.step_sums: np.ndarray | None = None  # teacher-forced sums per step

    def _add_steps(self, rec: ShadowRecorder, runtime_calls: int, steps: int) -> None:
        # Every batch decodes with the same config, so the per-step arrays line up.
        self.add_pairs(rec.paired, runtime_calls, steps)

    def add_pairs(self, paired: list[np.ndarray], runtime_calls: int, steps: int) -> None:
        """One decode's ``on_pair`` sums (a vector per network call) into the per-step sums, whose
        metrics alone (``teacher_forced``) are all ``check --runtime aihub`` has."""
        self.step_sums = _add(self.step_sums, _per_step(paired, _calls_per_step(runtime_calls, steps), steps))


class _TokenAccumulator(_Accumulator):
    """Shared by masked and ar: final token agreement and teacher-forced logits statistics."""

    def __init__(self, kind: str, meta: Mapping[str, Any]):
        super().__init__(kind, meta)
        self.vocab = int(meta["vocab_size"])
        self.mask_id = int(meta.get("mask_id", -1))
        self.agree = 0.0
        self.tokens = 0
        self.exact = 0
        self.rows = 0
        self.first_div: list[float] = []

    def _add_final(self, ref: np.ndarray, cand: np.ndarray) -> None:
        equal = ref == cand  # (rows, L)
        self.agree += float(equal.sum())
        self.tokens += equal.size
        self.exact += int(equal.all(axis=1).sum())
        self.rows += len(equal)

    def teacher_forced(self) -> tuple[dict[str, float], dict[str, list[float]]]:
        s = self.step_sums if self.step_sums is not None else np.zeros((0, 5))
        count = np.maximum(s[:, 2], 1)
        total = max(float(s[:, 2].sum()), 1.0)
        flips = float(s[:, 2].sum() - s[:, 1].sum())
        ties = {}
        if s.shape[1] >= 5:  # logits_pair_sums' near-tie columns
            ties = {
                "reference_near_ties": float(s[:, 3].sum() / total),
                "flips_at_near_ties": float(s[:, 4].sum() / flips) if flips > 0 else float("nan"),
            }
        return (
            {"logits_kl": float(s[:, 0].sum() / total), "top1_agreement": float(s[:, 1].sum() / total), **ties},
            {"logits_kl_per_step": (s[:, 0] / count).tolist(), "top1_agreement_per_step": (s[:, 1] / count).tolist()},
        )


class MaskedAccumulator(_TokenAccumulator):
    def __init__(self, meta: Mapping[str, Any]):
        super().__init__("masked", meta)
        self.step_agree: np.ndarray | None = None  # per step: [Σ equal tokens, Σ tokens]

    def on_pair(self, feeds, ref_out, cand_out) -> np.ndarray:
        # Only the positions still masked matter: those are what this step samples from.
        where = np.asarray(feeds["tokens"]) == self.mask_id  # (S, L)
        return logits_pair_sums(ref_out["logits"], cand_out["logits"], where, self.vocab, self.mask_id)

    def add(self, ref: ShadowRecorder, cand: ShadowRecorder, ref_dec, cand_dec, rows: int) -> None:
        """One batch: both recorders after their decodes; the first ``rows`` rows count."""
        self._add_final(ref_dec.output[:rows], cand_dec.output[:rows])
        self._add_steps(ref, ref_dec.runtime_calls, ref_dec.steps)
        a = [s[:rows] for s in _states(ref, ref_dec.output, ref_dec.runtime_calls, ref_dec.steps)]
        b = [s[:rows] for s in _states(cand, cand_dec.output, cand_dec.runtime_calls, cand_dec.steps)]
        k = min(len(a), len(b))
        a, b = a[: k - 1] + [a[-1]], b[: k - 1] + [b[-1]]  # different step counts: compare the finals last
        equal = np.stack([(x == y) for x, y in zip(a, b)])  # (K, rows, L)
        agree = np.stack([equal.sum(axis=(1, 2)), np.full(k, equal[0].size)], axis=1).astype(np.float64)
        self.step_agree = _add(self.step_agree, agree)
        row_same = equal.all(axis=2)  # (K, rows)
        # First step after which the row's tokens differ (1-based); K + 1 = never diverged.
        self.first_div += [float(np.argmin(col) + 1) if not col.all() else float(k + 1) for col in row_same.T]

    def result(self) -> tuple[dict[str, float], dict[str, list[float]]]:
        scalars, curves = self.teacher_forced()
        sa = self.step_agree if self.step_agree is not None else np.zeros((0, 2))
        return (
            {
                "token_agreement": self.agree / max(self.tokens, 1),
                "sequence_exact_match": self.exact / max(self.rows, 1),
                "first_divergence_step": float(np.mean(self.first_div)) if self.first_div else float("nan"),
                **scalars,
            },
            {"token_agreement_per_step": (sa[:, 0] / np.maximum(sa[:, 1], 1)).tolist(), **curves},
        )


class ARAccumulator(_TokenAccumulator):
    def __init__(self, meta: Mapping[str, Any]):
        super().__init__("ar", meta)

    def on_pair(self, feeds, ref_out, cand_out) -> np.ndarray:
        logits = ref_out["logits"]  # (S, W): every row's next token
        return logits_pair_sums(logits, cand_out["logits"], np.ones(len(logits), bool), self.vocab, self.mask_id)

    def add(self, ref: ShadowRecorder, cand: ShadowRecorder, ref_dec, cand_dec, rows: int) -> None:
        r, c = ref_dec.output[:rows], cand_dec.output[:rows]
        length = min(r.shape[1], c.shape[1])
        r, c = r[:, :length], c[:, :length]
        self._add_final(r, c)
        self._add_steps(ref, ref_dec.runtime_calls, ref_dec.steps)
        # First position (0-based) where the tokens differ; length = never diverged.
        differ = r != c
        self.first_div += [float(np.argmax(row)) if row.any() else float(length) for row in differ]

    def result(self) -> tuple[dict[str, float], dict[str, list[float]]]:
        scalars, curves = self.teacher_forced()
        return (
            {
                "token_agreement": self.agree / max(self.tokens, 1),
                "sequence_exact_match": self.exact / max(self.rows, 1),
                "first_divergence_position": float(np.mean(self.first_div)) if self.first_div else float("nan"),
                **scalars,
            },
            curves,
        )


class FlowAccumulator(_Accumulator):
    def __init__(self, meta: Mapping[str, Any]):
        super().__init__("flow", meta)
        self.signal = 0.0
        self.noise = 0.0
        self.max_abs = 0.0
        self.cosines: list[float] = []
        self.step_err: np.ndarray | None = None  # per step: [Σ ‖x_c − x_r‖², Σ ‖x_r‖²]

    def on_pair(self, feeds, ref_out, cand_out) -> np.ndarray:
        return velocity_pair_sums(ref_out["v"], cand_out["v"])

    def add(self, ref: ShadowRecorder, cand: ShadowRecorder, ref_dec, cand_dec, rows: int) -> None:
        r = np.asarray(ref_dec.output[:rows], dtype=np.float64)  # (rows, T, C)
        c = np.asarray(cand_dec.output[:rows], dtype=np.float64)
        err = c - r
        self.signal += float(np.sum(r**2))
        self.noise += float(np.sum(err**2))
        self.max_abs = max(self.max_abs, float(np.abs(err).max()))
        rf, cf = r.reshape(rows, -1), c.reshape(rows, -1)
        norms = np.linalg.norm(rf, axis=1) * np.linalg.norm(cf, axis=1)
        self.cosines += (np.sum(rf * cf, axis=1) / np.maximum(norms, 1e-30)).tolist()
        self._add_steps(ref, ref_dec.runtime_calls, ref_dec.steps)
        a = _states(ref, ref_dec.output, ref_dec.runtime_calls, ref_dec.steps)
        b = _states(cand, cand_dec.output, cand_dec.runtime_calls, cand_dec.steps)
        k = min(len(a), len(b))
        a, b = a[: k - 1] + [a[-1]], b[: k - 1] + [b[-1]]
        sums = np.array(
            [
                [np.sum((y[:rows].astype(np.float64) - x[:rows]) ** 2), np.sum(x[:rows].astype(np.float64) ** 2)]
                for x, y in zip(a, b)
            ]
        )
        self.step_err = _add(self.step_err, sums)

    def teacher_forced(self) -> tuple[dict[str, float], dict[str, list[float]]]:
        s = self.step_sums if self.step_sums is not None else np.zeros((0, 2))
        return (
            {"velocity_snr_db": power_ratio_db(float(s[:, 1].sum()), float(s[:, 0].sum()))},
            {"velocity_snr_db_per_step": [power_ratio_db(sig, noise) for noise, sig in s]},
        )

    def result(self) -> tuple[dict[str, float], dict[str, list[float]]]:
        e = self.step_err if self.step_err is not None else np.zeros((0, 2))
        scalars, curves = self.teacher_forced()
        return (
            {
                "snr_db": power_ratio_db(self.signal, self.noise),
                "cosine_similarity": float(np.mean(self.cosines)) if self.cosines else float("nan"),
                "max_abs_error": self.max_abs,
                **scalars,
            },
            {
                # Relative RMS error of the state after each solver step: where the trajectories drift apart.
                "divergence_per_step": np.sqrt(e[:, 0] / np.maximum(e[:, 1], 1e-30)).tolist(),
                **curves,
            },
        )


def accumulator_for(kind: str, meta: Mapping[str, Any]):
    """The metric accumulator of a model kind (``on_pair`` for the shadow, ``add``, ``result``)."""
    if kind == "masked":
        return MaskedAccumulator(meta)
    if kind == "flow":
        return FlowAccumulator(meta)
    if kind == "ar":
        return ARAccumulator(meta)
    raise unknown("model kind", kind, ("masked", "flow", "ar"))


# ---- quality against the ground truth (or a user metric) ---------------------------------------
def quality_drops(reference: Mapping[str, float], candidate: Mapping[str, float]) -> dict[str, float | None]:
    """How much worse the candidate scores than the reference, per quality metric (positive =
    worse; the sign follows ``HIGHER_IS_BETTER``; unknown names count as higher-is-better).

    Undefined on both sides, or on either side for ``OVER_VALID_ONLY`` metrics (NLL over no
    valid sequence): None. Otherwise defined only for the reference: +inf (the candidate lost
    it); only for the candidate: -inf."""
    drops: dict[str, float | None] = {}
    for name, ref in reference.items():
        if name not in candidate:
            continue
        r, c = float(ref), float(candidate[name])
        if (not np.isfinite(r) and not np.isfinite(c)) or (
            name in OVER_VALID_ONLY and not (np.isfinite(r) and np.isfinite(c))
        ):
            drops[name] = None
        elif not np.isfinite(c):
            drops[name] = float("inf")
        elif not np.isfinite(r):
            drops[name] = float("-inf")
        else:
            drops[name] = (r - c) if HIGHER_IS_BETTER.get(name, True) else (c - r)
    return drops
