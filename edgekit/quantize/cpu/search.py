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
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from edgekit._deps import require
from edgekit._sidefiles import remove_model
from edgekit.quantize.budget import check, worst_margin
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
    added: the noise this node adds, output minus input noise power, in dB.

    Memory is one feed's activations, not all of them: each feed's tensors are compared and
    dropped (signal and noise power summed over the feeds: qdq_loss_debug's SQNR over the
    concatenated feeds), and the QDQ graph does not output its dequantized weights (the whole
    model again per feed: 2.4 GB a feed on a 600 M-parameter model)."""
    onnx = require("onnx")
    ort = require("onnxruntime")
    dbg = require("onnxruntime.quantization.qdq_loss_debug")

    op_types = sorted({n.op_type for n in nodes.values()})
    graph = {n.name: n for n in onnx.load(str(float_model), load_external_data=False).graph.node}
    wanted = {(x, False) for info in nodes.values() for x in info.activations}
    wanted |= {(y, True) for name in nodes if name in graph for y in graph[name].output}
    own_names = {x for info in nodes.values() for x in info.activations}
    cross_sums: dict[tuple[str, bool], list[float]] = {}
    own_sums: dict[str, list[float]] = {}
    with tempfile.TemporaryDirectory(prefix="edgekit-sens-") as tmp, quiet_ort_logging():
        aug_f, aug_q = Path(tmp) / "float.onnx", Path(tmp) / "qdq.onnx"
        dbg.modify_model_output_intermediate_tensors(
            str(float_model),
            str(aug_f),
            op_types_for_saving=op_types,
            save_as_external_data=needs_side_file(float_model),
        )
        dbg.modify_model_output_intermediate_tensors(
            str(qdq_model),
            str(aug_q),
            op_types_for_saving=[*op_types, "QuantizeLinear", "DequantizeLinear"],
            save_as_external_data=needs_side_file(qdq_model),
        )
        _drop_saved_weights(aug_q)
        opts = ort.SessionOptions()
        f_session = ort.InferenceSession(str(aug_f), opts, providers=["CPUExecutionProvider"])
        q_session = ort.InferenceSession(str(aug_q), opts, providers=["CPUExecutionProvider"])
        for feed in feeds:
            float_acts, qdq_acts = _saved(f_session, feed), _saved(q_session, feed)
            matched = dbg.create_activation_matching({k: [v] for k, v in qdq_acts.items()})
            for name, post in wanted:
                ref = float_acts.get(name)
                cand = matched[name]["post_qdq"][0] if post and name in matched else qdq_acts.get(name)
                if ref is not None and cand is not None:
                    _add(cross_sums.setdefault((name, post), [0.0, 0.0]), ref, cand)
            for x in own_names & matched.keys():
                pair = matched[x]
                if pair.get("pre_qdq") is not None and pair.get("post_qdq") is not None:
                    _add(own_sums.setdefault(x, [0.0, 0.0]), pair["pre_qdq"][0], pair["post_qdq"][0])
            del float_acts, qdq_acts, matched
        del f_session, q_session
    return _node_sqnrs(nodes, graph, cross_sums, own_sums)


def _node_sqnrs(
    nodes: Mapping[str, Any],
    graph: Mapping[str, Any],
    cross_sums: Mapping[tuple[str, bool], list[float]],
    own_sums: Mapping[str, list[float]],
) -> dict[str, dict[str, float]]:
    """Each node's SQNRs from the power sums over the feeds (``node_sensitivity``): ``cross_sums``
    by (tensor, after its Q/DQ) for the QDQ graph against the float one, ``own_sums`` by
    activation for its own Q/DQ."""
    out: dict[str, dict[str, float]] = {}
    for name, info in nodes.items():
        node = graph.get(name)
        if node is None:
            continue
        ins = [_db(cross_sums[(x, False)]) for x in info.activations if (x, False) in cross_sums]
        outs = [_db(cross_sums[(y, True)]) for y in node.output if (y, True) in cross_sums]
        if not outs:
            continue
        in_db = min(ins) if ins else math.inf
        out_db = min(outs)
        added = max(_power(out_db) - (_power(in_db) if math.isfinite(in_db) else 0.0), 1e-15)
        own = [_db(own_sums[x]) for x in info.activations if x in own_sums]
        out[name] = {
            "input_sqnr_db": in_db,
            "output_sqnr_db": out_db,
            "added_sqnr_db": -10.0 * math.log10(added),
            "tensor_sqnr_db": min(own) if own else math.inf,
        }
    return out


# qdq_loss_debug names each saved tensor <name>_ReshapedSavedOutput (a flattening Reshape).
_SAVED = "_ReshapedSavedOutput"


def _saved(session: Any, feed: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    """One feed's saved tensors of an augmented session, by their graph names (flattened)."""
    names = [o.name for o in session.get_outputs() if o.name.endswith(_SAVED)]
    inputs = {i.name for i in session.get_inputs()}
    values = session.run(names, {k: v for k, v in feed.items() if k in inputs})
    return {n[: -len(_SAVED)]: v for n, v in zip(names, values)}


def _add(sums: list[float], ref: np.ndarray, cand: np.ndarray) -> None:
    """Signal and noise power of one feed's tensor, added to ``sums``."""
    ref64 = np.asarray(ref, np.float64).ravel()
    sums[0] += float(np.dot(ref64, ref64))
    diff = ref64 - np.asarray(cand, np.float64).ravel()
    sums[1] += float(np.dot(diff, diff))


def _db(sums: list[float]) -> float:
    """qdq_loss_debug's SQNR (20 log10 of the norms' ratio, each floored at float eps) from the
    summed powers."""
    eps = float(np.finfo(float).eps)
    return 20.0 * math.log10(max(math.sqrt(sums[0]), eps) / max(math.sqrt(sums[1]), eps))


def _drop_saved_weights(path: Path) -> None:
    """Remove from the augmented QDQ graph at ``path`` the saved outputs of DequantizeLinear nodes
    that read an initializer (the dequantized weights: constant, as large as the model, and no
    activation of any node). The graph is rewritten in place; its weights stay where they are."""
    onnx = require("onnx")
    model = onnx.load(str(path), load_external_data=False)
    g = model.graph
    inits = {i.name for i in g.initializer}
    weights = {n.output[0] for n in g.node if n.op_type == "DequantizeLinear" and n.input and n.input[0] in inits}
    drop = {w + _SAVED for w in weights}
    if not drop:
        return
    kept_nodes = [n for n in g.node if not (n.op_type == "Reshape" and n.output and n.output[0] in drop)]
    kept_outputs = [o for o in g.output if o.name not in drop]
    del g.node[:]
    g.node.extend(kept_nodes)
    del g.output[:]
    g.output.extend(kept_outputs)
    onnx.save(model, str(path))


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

    def alone(node: str) -> float:
        path = build([node])
        try:
            return float(dbg.compute_signal_to_quantization_noice_ratio(reference, outputs(path)))
        finally:  # its own files only: a derived one reads the all-INT8 graph's and the prepared model's side files
            remove_model(path)

    reference = outputs(float_model)
    return {n: alone(n) for n in nodes}


# The one-layer-at-a-time measurement is one candidate (derived from the all-INT8 graph:
# cpu/derive.py) and one session per node: ~60 ms a node on the demos (every node measured: at most
# 33 weighted nodes), a session that loads the whole model per node on a 2.25 GiB model of ~200.
# Over SCREEN_NODES nodes, the single qdq_loss_debug pass (the noise each node adds) screens them
# and only the noisiest are measured alone: SCREEN_NODES, or SCREEN_LARGE once the FP32 weights
# pass LARGE_BYTES.
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
    alone = sorted(
        (n for n in scores if "isolated_output_sqnr_db" in scores[n]),
        key=lambda n: scores[n]["isolated_output_sqnr_db"],
    )
    rest = sorted(
        (n for n in scores if "isolated_output_sqnr_db" not in scores[n]),
        key=lambda n: scores[n].get("added_sqnr_db", float("-inf")),
    )
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
    if passed or not enabled or not nodes or max_fallback == 0:  # --max-fallback 0: no ranking to pay for
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
        history.append(
            {"fallback": rank, "node": name, "int8_nodes": len(nodes), **_headline(metrics, budget), "passed": passed}
        )
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
