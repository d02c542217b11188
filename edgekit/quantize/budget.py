"""The accuracy budget: FP32 vs INT8 on held-out decodes, and how far a candidate is from it.

Held-out conditions, identical seeds (so identical noise) on both runtimes, ``pipeline.evaluate``:
- masked / ar: ``lockstep_token_agreement`` — the share of token decisions INT8 makes like FP32 when
  both see the same input: a ``LockstepRuntime`` runs the bundle's decode on FP32 and, at every
  network call, INT8 on the very same feed; each decides its tokens (argmax of logits/T plus
  the same Gumbel noise) where the loop is deciding (masked positions; the next AR token).
  Whole-output agreement of two free-running decodes is reported as ``final_token_agreement``
  but not budgeted by default: one flipped near-tie changes every later AR token (measured on
  the trained ar-demo: 99.7 % of decisions agree, 89 % of final tokens), so it measures chaos
  more than quantization error. ``event_accuracy_drop`` — the ground-truth metric of INT8's own
  free-running final output vs FP32's: INT8 must generate sequences as valid as FP32 does.
- flow: ``snr_db`` of the final INT8 frames vs FP32 frames (identical x0 noise) and
  ``gt_snr_drop_db``, the loss of SNR against the clean ground-truth frames.

Every profile's search measures its candidates here (``QuantizeRun.measure``) and judges them
with ``check`` and ``worst_margin``; the cpu/trt fallback search is ``quantize/cpu/search.py``,
the qnn promotion search ``quantize/qnn/search.py``.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from edgekit.bundle import Bundle
from edgekit.decode.dispatch import decode_config
from edgekit.evaluate import evaluate, snr_db
from edgekit.evaluate.metrics import near_tie_note, near_ties
from edgekit.quantize.config import BUDGET_RULES, TOKEN_KINDS
from edgekit.runtimes.base import Runtime, RuntimeProxy


# ---- evaluation ---------------------------------------------------------------------------------
class LockstepRuntime(RuntimeProxy):
    """A ``Runtime`` for the decode loop that runs ``reference`` (FP32) and ``candidate`` (INT8)
    on every feed and hands the loop FP32's outputs: the loop follows FP32's trajectory and INT8
    is asked the same question at every step (it is ``reference`` to the loop, which it never
    closes). Counts the token decisions both make alike.

    Decisions: logits (rows, [L,] W) -> argmax over the codebook of logits / temperature + g,
    g Gumbel noise shared by both (none when temperature is 0); masked: only positions whose
    input is the mask id (the ones being decided). Rows are compared as the network runs them
    (with CFG, conditional and unconditional rows each)."""

    def __init__(
        self, reference: Runtime, candidate: Runtime, kind: str, meta: Mapping[str, Any], temperature: float, seed: int
    ):
        super().__init__(reference, name=f"lockstep({reference.name}, {candidate.name})", owns_inner=False)
        self.reference, self.candidate = reference, candidate
        self.kind = kind
        self.vocab = int(meta["vocab_size"])
        self.mask_id = meta.get("mask_id")
        self.temperature = float(temperature)
        self.rng = np.random.default_rng(seed)
        self.agreeing = 0
        self.total = 0
        self.top1_agreeing = 0  # argmax of the logits alone (no noise): what `check` gates as top-1
        # FP32's decisions whose top two (logits / temperature + g) are near-ties (NEAR_TIE_NATS), and
        # the disagreeing decisions among them: what a missed agreement budget counted
        self.near_ties = 0
        self.flips_at_near_ties = 0

    @property
    def outputs_stay_valid(self) -> int:  # the loop copies what it feeds back (run returns fresh arrays anyway)
        return 1

    def run(self, feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        ref = {k: np.array(v) for k, v in self.reference.run(feeds).items()}
        cand = self.candidate.run(feeds)["logits"]
        logits = ref["logits"]
        noise = self.rng.gumbel(size=logits.shape) if self.temperature > 0 else 0.0  # shared by both
        a, b = self._decide(logits, noise), self._decide(cand, noise)
        if self.kind == "masked" and self.mask_id is not None:
            where = np.asarray(feeds["tokens"]) == int(self.mask_id)  # (rows, L)
        else:
            where = np.ones(a.shape, dtype=bool)
        self.agreeing += int(np.sum((a == b) & where))
        self.total += int(np.sum(where))
        tie = near_ties(self._scores(logits, noise)[..., : self.vocab]) & where
        self.near_ties += int(np.sum(tie))
        self.flips_at_near_ties += int(np.sum(tie & (a != b)))
        if self.temperature > 0:
            self.top1_agreeing += int(
                np.sum((self._decide(logits, 0.0, noise_free=True) == self._decide(cand, 0.0, noise_free=True)) & where)
            )
        else:
            self.top1_agreeing += int(np.sum((a == b) & where))
        return ref

    def _scores(self, logits: np.ndarray, noise: np.ndarray | float, noise_free: bool = False) -> np.ndarray:
        x = np.array(logits, dtype=np.float64)
        x[..., self.vocab :] = -np.inf  # never the mask / BOS id, as the loops do
        if self.temperature > 0 and not noise_free:
            x = x / self.temperature + noise
        return x

    def _decide(self, logits: np.ndarray, noise: np.ndarray | float, noise_free: bool = False) -> np.ndarray:
        return np.argmax(self._scores(logits, noise, noise_free), axis=-1)


@dataclass
class EvalRun:
    """One runtime's decodes of the held-out set. sampled: the free-running decode with the
    bundle's options ({"output", "cond", "quality"}); decisions: (agreeing, total) token decisions
    in lockstep with FP32 (INT8 runs only, token kinds)."""

    sampled: dict[str, Any]
    decisions: tuple[int, int] | None = None
    top1: tuple[int, int] | None = None  # (agreeing, total) argmax decisions, same positions
    ties: tuple[int, int] | None = None  # (near-ties, disagreeing decisions among them), same positions


def decode_eval_set(
    bundle: Bundle,
    runtime: Any,
    n: int,
    seed: int,
    decode_options: Mapping[str, Any],
    reference: Any = None,
    rows: Mapping[str, np.ndarray] | None = None,
    each_batch: Callable[[int], None] | None = None,
    after_batch: Callable[[int, np.ndarray], None] | None = None,
) -> EvalRun:
    """Decode the held-out set on ``runtime`` (identical seeds on every runtime); with a
    ``reference`` (the FP32 runtime) also decode in lockstep with it and count agreeing decisions.
    ``rows``: the held-out conditions [n, ...]; None = the bundle's seeded rule. ``each_batch(i)``:
    before each decode of a graph batch, counted over both passes. ``after_batch(i, output)``: after
    each batch of the free-running decode (``early_stop.SnrWatch``: it may stop the set there)."""

    sampled = evaluate(
        bundle, runtime, n, seed, dict(decode_options), cond=rows, each_batch=each_batch, after_batch=after_batch
    )
    decisions = None
    if reference is not None and bundle.kind in TOKEN_KINDS:
        cfg = decode_config(bundle.kind, bundle.decode_defaults, decode_options, seed=seed)
        lock = LockstepRuntime(reference, runtime, bundle.kind, bundle.meta, cfg.temperature, seed)
        first = -(-n // bundle.batch)
        evaluate(
            bundle,
            lock,
            n,
            seed,
            dict(decode_options),
            cond=rows,
            each_batch=None if each_batch is None else lambda i: each_batch(first + i),
        )
        decisions = (lock.agreeing, lock.total)
        ties = (lock.near_ties, lock.flips_at_near_ties)
        return EvalRun(sampled, decisions, (lock.top1_agreeing, lock.total), ties)
    return EvalRun(sampled, decisions)


def compare(kind: str, fp32: EvalRun, int8: EvalRun) -> dict[str, Any]:
    """The budget metrics (keys of BUDGET_RULES) plus context figures for the report."""
    out: dict[str, Any] = {}
    qf, qi = fp32.sampled["quality"] or {}, int8.sampled["quality"] or {}
    if kind in TOKEN_KINDS:
        if int8.decisions is not None:
            agreeing, total = int8.decisions
            out["lockstep_token_agreement"] = agreeing / total if total else None
            if int8.ties is not None and total:
                near, flipped = int8.ties
                out["lockstep_near_ties"] = near / total
                out["lockstep_flips_at_near_ties"] = flipped / (total - agreeing) if total > agreeing else None
        if int8.top1 is not None and int8.top1[1]:
            out["top1_agreement"] = int8.top1[0] / int8.top1[1]
        out["final_token_agreement"] = float(np.mean(fp32.sampled["output"] == int8.sampled["output"]))
        if "event_accuracy" in qf:
            out["event_accuracy_drop"] = qf["event_accuracy"] - qi["event_accuracy"]
    else:
        out["snr_db"] = snr_db(fp32.sampled["output"], int8.sampled["output"], floor=1e-30)
        if "snr_db" in qf:
            out["gt_snr_drop_db"] = qf["snr_db"] - qi["snr_db"]
    out["quality_fp32"] = qf or None
    out["quality_int8"] = qi or None
    return out


def budget_notes(checks: Sequence[Mapping[str, Any]], metrics: Mapping[str, Any]) -> list[str]:
    """One line per missed agreement whose flips were mostly at FP32's own near-ties
    (``evaluate.metrics.near_tie_note``): the budget's lockstep agreement (decisions with the
    shared Gumbel noise) and check's top-1 gate (``check_note``). Said, never relaxed."""
    missed = {c["key"] for c in checks if c["passed"] is False}
    gate = metrics.get("check_metrics") or {}
    notes = []
    if "lockstep_token_agreement" in missed:
        notes.append(
            near_tie_note(
                metrics,
                "lockstep_token_agreement",
                "lockstep_near_ties",
                "lockstep_flips_at_near_ties",
                "FP32's top two sampling scores (log-probability + the shared Gumbel noise) are",
                kl=gate.get("logits_kl"),
            )
        )
    # check's gate failed on top-1 at near-ties (gate_metrics); the budget's own noise-free top-1
    # (the qnn profile's key) counts no near-ties
    notes.append(metrics.get("check_note"))
    return [n for n in notes if n]


def check(metrics: Mapping[str, Any], budget: Mapping[str, float]) -> tuple[bool, list[dict[str, Any]]]:
    """(all budget keys hold, one row per key). A key the model cannot measure (no ground
    truth) is reported as not measured and does not fail the budget."""
    rows, passed = [], True
    for key, limit in budget.items():
        op, meaning = BUDGET_RULES[key]
        value = metrics.get(key)
        ok = None if value is None else (value >= limit if op == ">=" else value <= limit)
        passed = passed and ok is not False
        rows.append({"key": key, "op": op, "limit": limit, "value": value, "passed": ok, "meaning": meaning})
    return passed, rows


def gate_cannot_save(metrics: Mapping[str, Any], budget: Mapping[str, float]) -> str | None:
    """Why ``check``'s gate (the budget key ``check_margin``) need not be run on a candidate whose
    budget ``metrics`` are in: its own keys missed already, so the candidate fails whatever the gate
    says (on Sana-600M the gate's calls were 43 % of a candidate's). None where it must run: the
    own keys hold, or the miss is the lockstep agreement (the gate's top-1 near-tie note then helps
    say why, ``budget_notes``). A skipped gate leaves ``check_margin`` unmeasured: every candidate
    that misses alike is compared on the same keys."""
    own = {k: v for k, v in budget.items() if k != "check_margin"}
    missed = [row["key"] for row in check(metrics, own)[1] if row["passed"] is False]
    if not missed or "lockstep_token_agreement" in missed:
        return None
    return f"not run: {', '.join(missed)} missed the budget already, which check's gate cannot change"


def worst_margin(metrics: Mapping[str, Any], budget: Mapping[str, float]) -> float:
    """The smallest budget margin, relative to its limit (< 0: that key fails)."""
    margins = []
    for key, limit in budget.items():
        value = metrics.get(key)
        if value is None:
            continue
        op = BUDGET_RULES[key][0]
        margins.append(((value - limit) if op == ">=" else (limit - value)) / max(abs(limit), 1e-3))
    return min(margins, default=math.inf)
