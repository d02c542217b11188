"""The cpu and trt profiles' budget search: rank the INT8 nodes by sensitivity and move the most
sensitive back to float until the budget holds.

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
from edgekit.quantize.budget import check, worst_margin
from edgekit.quantize.calibrate import calibration_reader
from edgekit.quantize.quiet import quiet_ort_logging
from edgekit.runtimes.onnx_file import needs_side_file


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
    INT8 nodes ``nodes`` (name -> graph.NodeInfo) via onnxruntime's ``qdq_loss_debug``.

    input/output: SQNR of the QDQ graph's tensor against the float graph's (the error that has
    reached it); tensor: the SQNR of the activation's own Q/DQ (qdq_loss_debug's ``qdq_err``);
    added: the noise this node adds, output minus input noise power, in dB."""
    onnx = require("onnx")
    dbg = require("onnxruntime.quantization.qdq_loss_debug")

    op_types = sorted({n.op_type for n in nodes.values()})
    with tempfile.TemporaryDirectory(prefix="edgekit-sens-") as tmp, quiet_ort_logging():
        aug_f, aug_q = Path(tmp) / "float.onnx", Path(tmp) / "qdq.onnx"
        dbg.modify_model_output_intermediate_tensors(str(float_model), str(aug_f), op_types_for_saving=op_types,
                                                     save_as_external_data=needs_side_file(float_model))
        dbg.modify_model_output_intermediate_tensors(
            str(qdq_model), str(aug_q), op_types_for_saving=[*op_types, "QuantizeLinear", "DequantizeLinear"],
            save_as_external_data=needs_side_file(qdq_model),
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


# The one-layer-at-a-time measurement is one quantize_static and one session per node: seconds on
# the demos (every node measured: at most 33 weighted nodes), minutes per node on a 2.25 GiB model
# of ~200. Over SCREEN_NODES nodes, the single qdq_loss_debug pass (the noise each node adds)
# screens them and only the noisiest are measured alone: SCREEN_NODES, or SCREEN_LARGE once the
# FP32 weights pass LARGE_BYTES.
SCREEN_NODES = 40
SCREEN_LARGE = 8
LARGE_BYTES = 256 * 1024**2


def screen(scores: Mapping[str, Mapping[str, float]], nodes: Sequence[str], weight_bytes: int) -> list[str]:
    """The nodes worth measuring alone: all of them up to the screen's size, else the ones that
    add the most noise (lowest added SQNR; a node the pass did not score counts as noisiest)."""
    size = SCREEN_LARGE if weight_bytes > LARGE_BYTES else SCREEN_NODES
    if len(nodes) <= size:
        return list(nodes)
    noisiest = sorted(nodes, key=lambda n: scores.get(n, {}).get("added_sqnr_db", float("-inf")))
    return noisiest[:size]


def rank_by_sensitivity(scores: Mapping[str, Mapping[str, float]]) -> list[str]:
    """Node names, most sensitive first: the ones measured alone by their one-layer-at-a-time
    output SQNR (lowest first), then the rest (screened out, or none measured) by the added SQNR
    of qdq_loss_debug."""
    alone = sorted((n for n in scores if "isolated_output_sqnr_db" in scores[n]), key=lambda n: scores[n]["isolated_output_sqnr_db"])
    rest = sorted((n for n in scores if "isolated_output_sqnr_db" not in scores[n]),
                  key=lambda n: scores[n].get("added_sqnr_db", float("-inf")))
    return alone + rest


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


def _headline(metrics: Mapping[str, Any], budget: Mapping[str, float]) -> dict[str, Any]:
    return {k: metrics.get(k) for k in budget}


def _describe(rows: Sequence[Mapping[str, Any]]) -> str:
    return ", ".join(
        f"{r['key']} {r['value']:.4g} {'<' if r['op'] == '>=' else '>'} {r['limit']:g}"
        for r in rows
        if r["passed"] is False
    )
