"""How much each INT8 node costs the network, for the budget search (``search.py``) to rank.

On a few recorded feeds spread over the loop: ``node_sensitivity`` compares the float and the QDQ
graph tensor by tensor as onnxruntime's ``qdq_loss_debug`` does (per-tensor SQNR, and the noise
each node *adds*: output noise power minus the noise already in its inputs), in bounded memory;
``isolated_output_sqnr`` measures, one layer at a time, the network output's SQNR when only that
node is INT8 (on a large model raced: two feeds each first, every feed where near the lowest).

A tensor's SQNR over all its values hides rows of small magnitude: the padding states of a
caption (Sana's: 0.05 against 1 for the prompt's tokens) keep a few quantization levels, and the
per-token norm that follows (RMSNorm, LayerNorm) scales each row back to unit size, noise and
all (Sana-600M: 34 dB at the caption projection, 19 dB after its norm; the model's output 18.6 dB
all-INT8). So MatMul and Gemm tensors, whose last axis is a row's features, are also scored per
row: the mean over rows of each row's noise-to-signal power (``row_*`` keys), which the search's
screen reads beside the global figure (``search.screen``).
"""

from __future__ import annotations

import math
import tempfile
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from edgekit._deps import require
from edgekit._sidefiles import remove_model
from edgekit.probes.memory import give_back_freed
from edgekit.quantize.memory import tensor_bytes
from edgekit.quantize.segments import grouped_runs
from edgekit.quantize.taps import (
    calibrated_tensors,
    fetch_cap,
    fetch_groups,
    fetch_names,
    graph_without_weights,
    group_progress,
    in_graph_order,
)


def _power(db: float) -> float:
    return 10.0 ** (-db / 10.0)


# The names ORT's QDQ quantizer and qdq_loss_debug give an activation's copies around its Q/DQ
# (``create_activation_matching``): they are grouped with the activation they copy.
_QDQ_SUFFIXES = ("_DequantizeLinear_Output_1", "_DequantizeLinear_Output", "_QuantizeLinear_Input")
# The ops whose tensors are also scored per row (their last axis is a row's features).
ROW_OPS = ("MatMul", "Gemm")


def node_sensitivity(
    float_model: Path,
    qdq_model: Path,
    feeds: Sequence[Mapping[str, np.ndarray]],
    nodes: Mapping[str, Any],
    each: Callable[[int], None] | None = None,
    fetch_bytes: int | None = None,
) -> dict[str, dict[str, float]]:
    """{node name: {"input_sqnr_db", "output_sqnr_db", "added_sqnr_db", "tensor_sqnr_db"}} for the
    INT8 nodes ``nodes`` (name -> graph.NodeInfo) via onnxruntime's ``qdq_loss_debug``.

    input/output: SQNR of the QDQ graph's tensor against the float graph's (the error that has
    reached it); tensor: the SQNR of the activation's own Q/DQ (qdq_loss_debug's ``qdq_err``);
    added: the noise this node adds, output minus input noise power, in dB. ``each(i)``: after the
    i-th pass of a graph over one feed (each feed on each graph: 2 x len(feeds)).

    Memory is one session and a bounded share of one feed's tensors, never the model twice: each
    graph is read without its weights (its session reads them from the model's own side file), the
    tensors are fetched as graph outputs (never a dequantized weight: the whole model again per
    feed) in groups of at most ``fetch_bytes`` (from the graph's static shapes; default
    FETCH_SHARE of the FP32 weights, at least FETCH_FLOOR), one graph and session per group (ORT
    holds every output of a graph each run, fetched or not: ``taps.outputs_only``), and the float
    graph runs over every feed first, its tensors spilled to a scratch folder beside ``qdq_model``,
    before the QDQ graph's session opens; they are read back one at a time, as compared. Each
    feed's tensors are compared and dropped (signal and noise power summed over the feeds:
    qdq_loss_debug's SQNR over the concatenated feeds). ORT's own
    ``modify_model_output_intermediate_tensors`` loads the model with its weights and saves a copy,
    and both sessions were open at once: 8.2 GB, 3.5x the weights, on the 2.25 GiB aMUSEd-256
    (docs/large-models.md)."""
    dbg = require("onnxruntime.quantization.qdq_loss_debug")
    cap = fetch_bytes if fetch_bytes is not None else fetch_cap(float_model)
    op_types = sorted({n.op_type for n in nodes.values()})
    f_graph = graph_without_weights(float_model)
    graph = {n.name: n for n in f_graph.graph.node}
    wanted = {(x, False) for info in nodes.values() for x in info.activations}
    wanted |= {(y, True) for name in nodes if name in graph for y in graph[name].output}
    own_names = {x for info in nodes.values() for x in info.activations}
    f_fetch = _fetchable(f_graph, calibrated_tensors(f_graph, op_types), {name for name, _ in wanted})
    f_groups = fetch_groups(in_graph_order(f_graph, f_fetch), tensor_bytes(f_graph), cap)
    q_graph = graph_without_weights(qdq_model)
    q_fetch = _fetchable(q_graph, calibrated_tensors(q_graph, [*op_types, "QuantizeLinear", "DequantizeLinear"]))
    q_groups = fetch_groups(in_graph_order(q_graph, q_fetch), tensor_bytes(q_graph), cap, key=_activation_of)
    spilled = {name: i for i, name in enumerate(f_fetch)}
    cross_sums: dict[tuple[str, bool], list[float]] = {}
    row_sums: dict[tuple[str, bool], list[float]] = {}
    own_sums: dict[str, list[float]] = {}
    row_own: dict[str, list[float]] = {}
    by_rows = _row_tensors(nodes, graph)

    # Both graphs unoptimized, so a tensor's values do not depend on its group: optimized, a QDQ
    # graph fuses the Q/DQ pairs no group output taps into int8 kernels (other values per grouping).
    with tempfile.TemporaryDirectory(prefix="edgekit-sens-", dir=qdq_model.parent) as tmp:
        spill = Path(tmp)
        for i in range(len(feeds)):
            (spill / str(i)).mkdir()
        for g, i, _, values in grouped_runs(float_model, f_graph, f_groups, lambda: feeds, len(feeds), cap):
            _spill(spill / str(i), spilled, values)
            if each is not None:
                each(group_progress(0, g, len(f_groups), len(feeds), i))
        del f_graph
        for g, i, _, qdq_acts in grouped_runs(qdq_model, q_graph, q_groups, lambda: feeds, len(feeds), cap):
            group = q_groups[g]
            matched = dbg.create_activation_matching({k: [v] for k, v in qdq_acts.items()})
            bases = {_activation_of(t) for t in group}
            for name, post in wanted:
                if name in bases:
                    cand = matched[name]["post_qdq"][0] if post and name in matched else qdq_acts.get(name)
                    ref = _unspill(spill / str(i), spilled, name) if cand is not None else None
                    if ref is not None and cand is not None:
                        _add_both(cross_sums, row_sums, (name, post), ref, cand, name in by_rows)
                    del ref  # a mapped tensor stays resident until unmapped
            _add_own(own_sums, row_own, own_names, matched, by_rows)
            del qdq_acts, matched
            if each is not None:
                each(group_progress(len(feeds), g, len(q_groups), len(feeds), i))
    return _node_sqnrs(nodes, graph, cross_sums, own_sums, row_sums, row_own)


def _add_own(
    own_sums: dict[str, list[float]],
    row_own: dict[str, list[float]],
    own_names: set[str],
    matched: Mapping[str, Any],
    by_rows: set[str],
) -> None:
    """Each activation's own Q/DQ noise (before against after its Q/DQ) from one group's matches."""
    for x in own_names & matched.keys():
        pair = matched[x]
        if pair.get("pre_qdq") is not None and pair.get("post_qdq") is not None:
            _add_both(own_sums, row_own, x, pair["pre_qdq"][0], pair["post_qdq"][0], x in by_rows)


def _node_sqnrs(
    nodes: Mapping[str, Any],
    graph: Mapping[str, Any],
    cross_sums: Mapping[tuple[str, bool], list[float]],
    own_sums: Mapping[str, list[float]],
    row_sums: Mapping[tuple[str, bool], list[float]],
    row_own: Mapping[str, list[float]],
) -> dict[str, dict[str, float]]:
    """Each node's SQNRs from the power sums over the feeds (``node_sensitivity``): ``cross_sums``
    by (tensor, after its Q/DQ) for the QDQ graph against the float one, ``own_sums`` by
    activation for its own Q/DQ, ``row_sums`` and ``row_own`` (MatMul/Gemm tensors) the same per row."""
    out: dict[str, dict[str, float]] = {}
    for name, info in nodes.items():
        node = graph.get(name)
        if node is None:
            continue
        found = _in_out(info, node, cross_sums, _db)
        if found is None:
            continue
        own = [_db(own_sums[x]) for x in info.activations if x in own_sums]
        out[name] = _scores(*found) | {"tensor_sqnr_db": min(own) if own else math.inf}
        if info.op_type not in ROW_OPS:  # a tensor it shares with a MatMul was scored per row too
            continue
        rows = _in_out(info, node, row_sums, _row_db)
        if rows is not None:
            out[name] |= {f"row_{k}": v for k, v in _scores(*rows).items()}
        own_rows = [_row_db(row_own[x]) for x in info.activations if x in row_own]
        if own_rows:
            out[name]["row_tensor_sqnr_db"] = min(own_rows)
    return out


def _in_out(
    info: Any, node: Any, sums: Mapping[tuple[str, bool], list[float]], db: Callable[[list[float]], float]
) -> tuple[float, float] | None:
    """(the worst input's SQNR, the worst output's) of ``node`` from ``sums``; None without an output."""
    ins = [db(sums[(x, False)]) for x in info.activations if (x, False) in sums]
    outs = [db(sums[(y, True)]) for y in node.output if (y, True) in sums]
    return (min(ins) if ins else math.inf, min(outs)) if outs else None


def _scores(in_db: float, out_db: float) -> dict[str, float]:
    """input, output and added SQNR: the noise the node adds is output minus input noise power."""
    added = max(_power(out_db) - (_power(in_db) if math.isfinite(in_db) else 0.0), 1e-15)
    return {"input_sqnr_db": in_db, "output_sqnr_db": out_db, "added_sqnr_db": -10.0 * math.log10(added)}


def _fetchable(graph: Any, tensors: Sequence[str], keep: set[str] | None = None) -> list[str]:
    """The names of ``tensors`` of ``graph`` (a weightless ``ModelProto``, not changed) to fetch:
    not a DequantizeLinear of an initializer (a dequantized weight: constant, as large as the
    model, no node's activation), and only ``keep`` where given."""
    g = graph.graph
    inits = {i.name for i in g.initializer}
    weights = {n.output[0] for n in g.node if n.op_type == "DequantizeLinear" and n.input and n.input[0] in inits}
    chosen = [t for t in tensors if t not in weights and (keep is None or t in keep)]
    return fetch_names(graph, chosen)


def _spill(folder: Path, index: Mapping[str, int], acts: Mapping[str, np.ndarray]) -> None:
    """One feed's tensors to ``folder``, each as ``index[name]``.npy (tensor names may hold '/')."""
    for name, value in acts.items():
        np.save(folder / f"{index[name]}.npy", value)


def _unspill(folder: Path, index: Mapping[str, int], name: str) -> np.ndarray | None:
    """``_spill``'s tensor ``name``, memory-mapped (None where the feed did not have it)."""
    path = folder / f"{index[name]}.npy" if name in index else None
    return np.load(path, mmap_mode="r") if path is not None and path.is_file() else None


def _activation_of(tensor: str) -> str:
    """The activation a QDQ graph's tensor copies (itself where it is one)."""
    for suffix in _QDQ_SUFFIXES:
        if tensor.endswith(suffix):
            return tensor[: -len(suffix)]
    return tensor


def _add(sums: list[float], ref: np.ndarray, cand: np.ndarray) -> None:
    """Signal and noise power of one feed's tensor, added to ``sums``."""
    ref64 = np.asarray(ref, np.float64).ravel()
    sums[0] += float(np.dot(ref64, ref64))
    diff = ref64 - np.asarray(cand, np.float64).ravel()
    sums[1] += float(np.dot(diff, diff))


def _row_tensors(nodes: Mapping[str, Any], graph: Mapping[str, Any]) -> set[str]:
    """The inputs and outputs of the ``ROW_OPS`` nodes: the tensors also scored per row."""
    return {
        t
        for name, info in nodes.items()
        if info.op_type in ROW_OPS and name in graph
        for t in (*info.activations, *graph[name].output)
    }


def _add_both(
    whole: dict[Any, list[float]], rows: dict[Any, list[float]], key: Any, ref: Any, cand: Any, per_row: bool
) -> None:
    """``_add`` into ``whole[key]``, and where ``per_row`` each row's (last axis: one token's
    features) noise-to-signal power into ``rows[key]`` as [their sum, the rows]; an all-zero
    reference row carries no signal to compare and is left out. Per row, the whole tensor's powers
    are the rows' summed: each tensor is widened to float64 once (Sana-600M's ranking compares
    290 M values a feed)."""
    if not per_row or np.ndim(ref) < 2:
        _add(whole.setdefault(key, [0.0, 0.0]), ref, cand)
        return
    ref64 = np.asarray(ref, np.float64)
    ref64 = ref64.reshape(-1, ref64.shape[-1])
    diff = ref64 - np.asarray(cand, np.float64).reshape(ref64.shape)
    signal = np.einsum("ij,ij->i", ref64, ref64)
    noise = np.einsum("ij,ij->i", diff, diff)
    sums = whole.setdefault(key, [0.0, 0.0])
    sums[0] += float(signal.sum())
    sums[1] += float(noise.sum())
    live = signal > 0
    by_row = rows.setdefault(key, [0.0, 0.0])
    by_row[0] += float(np.sum(noise[live] / signal[live]))
    by_row[1] += float(np.count_nonzero(live))


def _row_db(sums: list[float]) -> float:
    """The mean row's SQNR in dB (``_add_both``'s row sums); inf where no row had noise."""
    if sums[1] == 0 or sums[0] <= 0:
        return math.inf
    return -10.0 * math.log10(sums[0] / sums[1])


def _db(sums: list[float]) -> float:
    """qdq_loss_debug's SQNR (20 log10 of the norms' ratio, each floored at float eps) from the
    summed powers."""
    eps = float(np.finfo(float).eps)
    return 20.0 * math.log10(max(math.sqrt(sums[0]), eps) / max(math.sqrt(sums[1]), eps))


# Racing the one-node models (a model over search.LARGE_BYTES, whose every one-node model is a
# session of the whole network: Sana-600M ~9 s a node over 4 feeds): each suspect runs RACE_FEEDS
# of the feeds first, spread over the loop, and the rest in the same session only where its figure
# on those is within RACE_MARGIN_DB of the lowest so far. The lowest only falls, so a node left on
# two feeds is 10 dB (10x in noise power) clear of the worst on them, and the worst, which the
# search floats first, runs every feed; measured noisiest first (``search.noisiest_first``), few
# run more than two. On Sana-600M 8 of its 10 suspects read 62.3 dB alone against the 26.9 dB of
# the one that fell back.
RACE_FEEDS = 2
RACE_MARGIN_DB = 10.0


def isolated_output_sqnr(
    float_model: Path,
    build: Callable[[list[str]], Path],
    nodes: Sequence[str],
    feeds: Sequence[Mapping[str, np.ndarray]],
    output: str,
    each: Callable[[int], None] | None = None,
    race: bool = False,
) -> dict[str, dict[str, float]]:
    """{node: {"isolated_output_sqnr_db": SQNR (dB) of the network output ``output`` when only that
    node is INT8, "isolated_feeds": over how many of ``feeds``, "isolated_of": how many there were}}:
    one layer at a time, so the score includes how the node's error propagates to the output (the
    first layer reading a flow's ODE state adds modest local noise that every later layer carries).
    ``build([node])`` writes the one-node QDQ model (cached calibration). ``race``: ``nodes`` in
    turn, each on RACE_FEEDS feeds first and on the rest where it is near the lowest so far
    (above). ``each(i)``: after the i-th node."""
    ort = require("onnxruntime")
    dbg = require("onnxruntime.quantization.qdq_loss_debug")
    every = list(range(len(feeds)))
    first = every
    if race and len(feeds) > RACE_FEEDS and len(nodes) > 1:
        first = sorted(set(np.linspace(0, len(feeds) - 1, RACE_FEEDS).round().astype(int).tolist()))
    rest = [j for j in every if j not in first]

    def sqnr(got: Mapping[int, np.ndarray]) -> float:  # over the feeds in their order, as one pass would pool them
        order = sorted(got)
        return float(
            dbg.compute_signal_to_quantization_noice_ratio([reference[i] for i in order], [got[i] for i in order])
        )

    def outputs(path: Path, go_on: Callable[[dict[int, np.ndarray]], bool]) -> dict[int, np.ndarray]:
        # Each one-node model holds the whole network's weights (all but one node float): the last
        # one's freed heap goes back to the system before this one's weights are mapped on top.
        give_back_freed()
        session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
        try:
            got = {i: session.run([output], dict(feeds[i]))[0] for i in first}
            if rest and go_on(got):
                got |= {i: session.run([output], dict(feeds[i]))[0] for i in rest}
            return got
        finally:
            del session

    lowest = [math.inf]

    def near(got: dict[int, np.ndarray]) -> bool:
        db = sqnr(got)
        lowest[0] = min(lowest[0], db)
        return db < lowest[0] + RACE_MARGIN_DB

    reference = outputs(float_model, lambda got: True)
    out: dict[str, dict[str, float]] = {}
    for i, node in enumerate(nodes, 1):
        path = build([node])
        try:
            got = outputs(path, near)
        finally:  # its own files only: a derived one reads the all-INT8 graph's and the prepared model's side files
            remove_model(path)
        out[node] = {"isolated_output_sqnr_db": sqnr(got), "isolated_feeds": len(got), "isolated_of": len(feeds)}
        if each is not None:
            each(i)
    return out
