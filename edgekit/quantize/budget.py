"""The accuracy budget: FP32 vs INT8 on held-out decodes, sensitivity, and fallback.

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

Sensitivity, on a few recorded feeds spread over the loop: ``qdq_loss_debug`` compares the float
and the QDQ graph tensor by tensor (per-tensor SQNR, and the noise each node *adds*: output noise
power minus the noise already in its inputs); and one layer at a time, the network output's SQNR
when only that node is INT8. The latter ranks (lowest first): local SQNR misses how far an error
travels (on the flow demo the first layer, reading the ODE state, adds 37 dB-SQNR noise locally
yet alone costs the decode 5 dB). The loop ranks again when floating a node whose input was
already ruined upstream (below 20 dB) brought no progress.
"""

from __future__ import annotations

import math
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

import numpy as np

from edgekit._deps import require
from edgekit.bundle import Bundle
from edgekit.decode.dispatch import decode_config
from edgekit.evaluate import evaluate, snr_db
from edgekit.quantize.calibrate import calibration_reader
from edgekit.quantize.config import BUDGET_RULES
from edgekit.quantize.ptq import quiet_ort_logging

TOKEN_KINDS = ("masked", "ar")


# ---- evaluation ---------------------------------------------------------------------------------
class LockstepRuntime:
    """A ``Runtime`` for the decode loop that runs ``reference`` (FP32) and ``candidate`` (INT8)
    on every feed and hands the loop FP32's outputs: the loop follows FP32's trajectory and INT8
    is asked the same question at every step. Counts the token decisions both make alike.

    Decisions: logits (rows, [L,] W) -> argmax over the codebook of logits / temperature + g,
    g Gumbel noise shared by both (none when temperature is 0); masked: only positions whose
    input is the mask id (the ones being decided). Rows are compared as the network runs them
    (with CFG, conditional and unconditional rows each)."""

    def __init__(self, reference: Any, candidate: Any, kind: str, meta: Mapping[str, Any], temperature: float, seed: int):
        self.reference, self.candidate = reference, candidate
        self.kind = kind
        self.vocab = int(meta["vocab_size"])
        self.mask_id = meta.get("mask_id")
        self.temperature = float(temperature)
        self.rng = np.random.default_rng(seed)
        self.name = f"lockstep({getattr(reference, 'name', 'fp32')}, {getattr(candidate, 'name', 'int8')})"
        self.agreeing = 0
        self.total = 0
        self.top1_agreeing = 0  # argmax of the logits alone (no noise): what `check` gates as top-1

    @property
    def inputs(self):
        return self.reference.inputs

    @property
    def outputs(self):
        return self.reference.outputs

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
        if self.temperature > 0:
            self.top1_agreeing += int(np.sum((self._decide(logits, 0.0, noise_free=True) == self._decide(cand, 0.0, noise_free=True)) & where))
        else:
            self.top1_agreeing += int(np.sum((a == b) & where))
        return ref

    def _decide(self, logits: np.ndarray, noise: np.ndarray | float, noise_free: bool = False) -> np.ndarray:
        x = np.array(logits, dtype=np.float64)
        x[..., self.vocab :] = -np.inf  # never the mask / BOS id, as the loops do
        if self.temperature > 0 and not noise_free:
            x = x / self.temperature + noise
        return np.argmax(x, axis=-1)

    def close(self) -> None:
        pass


@dataclass
class EvalRun:
    """One runtime's decodes of the held-out set. sampled: the free-running decode with the
    bundle's options ({"output", "cond", "quality"}); decisions: (agreeing, total) token decisions
    in lockstep with FP32 (INT8 runs only, token kinds)."""

    sampled: dict[str, Any]
    decisions: tuple[int, int] | None = None
    top1: tuple[int, int] | None = None  # (agreeing, total) argmax decisions, same positions


def decode_eval_set(
    bundle: Bundle, runtime: Any, n: int, seed: int, decode_options: Mapping[str, Any], reference: Any = None,
    rows: Mapping[str, np.ndarray] | None = None,
) -> EvalRun:
    """Decode the held-out set on ``runtime`` (identical seeds on every runtime); with a
    ``reference`` (the FP32 runtime) also decode in lockstep with it and count agreeing decisions.
    ``rows``: the held-out conditions [n, ...]; None = the bundle's seeded rule."""

    sampled = evaluate(bundle, runtime, n, seed, dict(decode_options), cond=rows)
    decisions = None
    if reference is not None and bundle.kind in TOKEN_KINDS:
        cfg = decode_config(bundle.kind, bundle.decode_defaults, decode_options, seed=seed)
        lock = LockstepRuntime(reference, runtime, bundle.kind, bundle.meta, cfg.temperature, seed)
        evaluate(bundle, lock, n, seed, dict(decode_options), cond=rows)
        decisions = (lock.agreeing, lock.total)
        return EvalRun(sampled, decisions, (lock.top1_agreeing, lock.total))
    return EvalRun(sampled, decisions)


def compare(kind: str, fp32: EvalRun, int8: EvalRun) -> dict[str, Any]:
    """The budget metrics (keys of BUDGET_RULES) plus context figures for the report."""
    out: dict[str, Any] = {}
    qf, qi = fp32.sampled["quality"] or {}, int8.sampled["quality"] or {}
    if kind in TOKEN_KINDS:
        if int8.decisions is not None:
            agreeing, total = int8.decisions
            out["lockstep_token_agreement"] = agreeing / total if total else None
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


# ---- sensitivity -------------------------------------------------------------------------------
def _power(db: float) -> float:
    return 10.0 ** (-db / 10.0)


def node_sensitivity(
    float_model: Path,
    qdq_model: Path,
    feeds: Sequence[Mapping[str, np.ndarray]],
    nodes: Mapping[str, Any],
) -> dict[str, dict[str, float]]:
    """{node name: {"input_sqnr_db", "output_sqnr_db", "added_sqnr_db", "tensor_sqnr_db"}} for the
    INT8 nodes ``nodes`` (name -> ptq.NodeInfo) via onnxruntime's ``qdq_loss_debug``.

    input/output: SQNR of the QDQ graph's tensor against the float graph's (the error that has
    reached it); tensor: the SQNR of the activation's own Q/DQ (qdq_loss_debug's ``qdq_err``);
    added: the noise this node adds, output minus input noise power, in dB."""
    onnx = require("onnx")
    dbg = require("onnxruntime.quantization.qdq_loss_debug")

    op_types = sorted({n.op_type for n in nodes.values()})
    with tempfile.TemporaryDirectory(prefix="edgekit-sens-") as tmp, quiet_ort_logging():
        aug_f, aug_q = Path(tmp) / "float.onnx", Path(tmp) / "qdq.onnx"
        dbg.modify_model_output_intermediate_tensors(str(float_model), str(aug_f), op_types_for_saving=op_types)
        dbg.modify_model_output_intermediate_tensors(
            str(qdq_model), str(aug_q), op_types_for_saving=[*op_types, "QuantizeLinear", "DequantizeLinear"]
        )
        float_acts = dbg.collect_activations(str(aug_f), calibration_reader(feeds))
        qdq_acts = dbg.collect_activations(str(aug_q), calibration_reader(feeds))
    matched = dbg.create_activation_matching(qdq_acts, float_acts)
    graph = {n.name: n for n in onnx.load(str(float_model), load_external_data=False).graph.node}
    sqnr = dbg.compute_signal_to_quantization_noice_ratio

    def cross(name: str, post: bool) -> float | None:
        ref = float_acts.get(name)
        if ref is None:
            return None
        cand = matched[name]["post_qdq"] if post and name in matched else qdq_acts.get(name)
        return None if cand is None else float(sqnr(ref, cand))

    out: dict[str, dict[str, float]] = {}
    for name, info in nodes.items():
        node = graph.get(name)
        if node is None:
            continue
        ins = [v for v in (cross(x, post=False) for x in info.activations) if v is not None]
        outs = [v for v in (cross(y, post=True) for y in node.output) if v is not None]
        if not outs:
            continue
        in_db = min(ins) if ins else math.inf
        out_db = min(outs)
        added = max(_power(out_db) - (_power(in_db) if math.isfinite(in_db) else 0.0), 1e-15)
        own = [float(sqnr(matched[x]["pre_qdq"], matched[x]["post_qdq"])) for x in info.activations if x in matched]
        out[name] = {
            "input_sqnr_db": in_db,
            "output_sqnr_db": out_db,
            "added_sqnr_db": -10.0 * math.log10(added),
            "tensor_sqnr_db": min(own) if own else math.inf,
        }
    return out


def isolated_output_sqnr(
    float_model: Path,
    build: Callable[[list[str]], Path],
    nodes: Sequence[str],
    feeds: Sequence[Mapping[str, np.ndarray]],
    output: str,
) -> dict[str, float]:
    """{node: SQNR (dB) of the network output ``output`` when only that node is INT8} over
    ``feeds``: one layer at a time, so the score includes how the node's error propagates to
    the output (the first layer reading a flow's ODE state adds modest local noise that every
    later layer carries). ``build([node])`` writes the one-node QDQ model (cached calibration)."""
    ort = require("onnxruntime")
    dbg = require("onnxruntime.quantization.qdq_loss_debug")

    def outputs(path: Path) -> list[np.ndarray]:
        session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
        return [session.run([output], dict(f))[0] for f in feeds]

    reference = outputs(float_model)
    return {n: float(dbg.compute_signal_to_quantization_noice_ratio(reference, outputs(build([n])))) for n in nodes}


def rank_by_sensitivity(scores: Mapping[str, Mapping[str, float]]) -> list[str]:
    """Node names, most sensitive first: lowest one-layer-at-a-time output SQNR where measured,
    else lowest added SQNR (qdq_loss_debug)."""
    key = "isolated_output_sqnr_db" if all("isolated_output_sqnr_db" in v for v in scores.values()) else "added_sqnr_db"
    return sorted(scores, key=lambda n: scores[n][key])


# ---- the fallback loop -------------------------------------------------------------------------
@dataclass
class BudgetOutcome:
    passed: bool
    metrics: dict[str, Any]
    checks: list[dict[str, Any]]
    quantized: list[str]  # INT8 nodes of the final model
    fallback: list[dict[str, Any]] = field(default_factory=list)  # moved out of INT8, in order, with why
    history: list[dict[str, Any]] = field(default_factory=list)  # metrics after each iteration
    ranking: dict[str, dict[str, float]] = field(default_factory=dict)


def fallback_until_within_budget(
    selected: Sequence[str],
    budget: Mapping[str, float],
    build: Callable[[list[str]], Path],
    measure: Callable[[Path], dict[str, Any]],
    sensitivity: Callable[[Path, list[str]], dict[str, dict[str, float]]],
    *,
    enabled: bool = True,
    max_fallback: int | None = None,
    labels: Mapping[str, str] | None = None,
    progress: Callable[[str], None] | None = None,
    fallback_to: str = "float",
) -> tuple[Path, BudgetOutcome]:
    """Quantize ``selected``; while the budget fails, move the most sensitive INT8 node back to
    float and re-measure, until it holds or nothing is left (or ``max_fallback`` nodes moved).
    Ranked on the first failing model; ranked again only when floating a node whose input was
    already ruined brought no progress.

    build(nodes) -> QDQ model path; measure(path) -> metrics; sensitivity(path, nodes) -> scores.
    fallback_to: what ``build`` makes of a node left out ("float", or "weight-only" where it keeps
    INT8 weights): only the progress messages say it."""
    say = progress or (lambda message: None)
    labels = labels or {}
    nodes = list(selected)
    model = build(nodes)
    metrics = measure(model)
    passed, rows = check(metrics, budget)
    history = [{"fallback": 0, "int8_nodes": len(nodes), **_headline(metrics, budget), "passed": passed}]
    outcome = BudgetOutcome(passed, metrics, rows, nodes, history=history)
    if passed or not enabled or not nodes:
        return model, outcome
    say(f"budget not met ({_describe(rows)}): ranking {len(nodes)} INT8 nodes by sensitivity")
    scores = sensitivity(model, nodes)
    outcome.ranking = dict(scores)
    order = rank_by_sensitivity(scores) + [n for n in nodes if n not in scores]
    best = worst_margin(metrics, budget)
    limit = len(nodes) if max_fallback is None else min(max_fallback, len(nodes))
    for rank in range(1, limit + 1):
        name = order.pop(0)
        nodes.remove(name)
        s = scores.get(name, {})
        why = f"budget fallback #{rank}: " + _why(s)
        outcome.fallback.append({"node": name, "label": labels.get(name, name), "reason": why, **dict(s)})
        say(f"fallback {rank}: {labels.get(name, name)} -> {fallback_to} ({why})")
        model = build(nodes)
        metrics = measure(model)
        passed, rows = check(metrics, budget)
        history.append({"fallback": rank, "node": name, "int8_nodes": len(nodes), **_headline(metrics, budget), "passed": passed})
        if passed or not nodes:
            break
        margin = worst_margin(metrics, budget)
        if margin <= best and s.get("input_sqnr_db", math.inf) < _BROKEN_INPUT_DB:
            # No progress, and that node's input was already ruined upstream: its score said
            # little. Rank again on the current model, where the earlier culprit is gone.
            say("no progress: ranking the remaining INT8 nodes again")
            scores = sensitivity(model, nodes)
            outcome.ranking.update(scores)
            order = rank_by_sensitivity(scores) + [n for n in nodes if n not in scores]
        best = max(best, margin)
    outcome.passed, outcome.metrics, outcome.checks, outcome.quantized = passed, metrics, rows, nodes
    return model, outcome


def _why(score: Mapping[str, float]) -> str:
    if "isolated_output_sqnr_db" in score:
        return f"alone in INT8 it leaves {score['isolated_output_sqnr_db']:.1f} dB output SQNR"
    if "added_sqnr_db" in score:
        return f"adds noise at {score['added_sqnr_db']:.1f} dB SQNR"
    return "unranked"


# Below this input SQNR a node's "added noise" estimate is dominated by upstream error.
_BROKEN_INPUT_DB = 20.0


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


def _headline(metrics: Mapping[str, Any], budget: Mapping[str, float]) -> dict[str, Any]:
    return {k: metrics.get(k) for k in budget}


def _describe(rows: Sequence[Mapping[str, Any]]) -> str:
    return ", ".join(
        f"{r['key']} {r['value']:.4g} {'<' if r['op'] == '>=' else '>'} {r['limit']:g}"
        for r in rows
        if r["passed"] is False
    )
