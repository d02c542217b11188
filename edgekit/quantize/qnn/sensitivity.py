"""Output sensitivity of a QDQ graph's quantized tensors: how much each one, alone at 8 bit,
moves the network's outputs.

A tensor's own SQNR (its value before vs after its Q/DQ round trip) does not see what the rest
of the network does with the error: in a residual network, a tensor that feeds the residual
stream or a normalisation's statistics passes its error on amplified, a tensor inside a saturating
branch passes little of it. On the flow demo on Qualcomm's HTP, promoting by own SQNR needed 138
of 263 activations (plus their tied neighbours) at 16 bit before the decode met its budget.

Here every Q/DQ pair of a candidate tensor becomes a switch, ``y = x + g * (DQ(Q(x)) - x)``, with
one scalar gate ``g`` per tensor as a graph input: one session answers every question. With all
gates at 0 the candidates compute in float (the reference); with one gate at 1, only that tensor
is quantized, and the outputs' error against the reference is that tensor's contribution.
Quantized constants that are not candidates (biases, a norm's scale) stay quantized in every run,
the reference's included, so only the candidate's own error is measured.

The result is each tensor's output noise (and the outputs' SNR in dB with only it at 8 bit).
Errors of different tensors add roughly in power, so the sum of their noise predicts what a set
of promotions leaves (``predicted_snr_db``), and ``promotion_order`` ranks promotions by the
noise they remove per activation they put at 16 bit."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from edgekit._deps import require
from edgekit.evaluate import power_ratio_db
from edgekit.quantize.plan import clock_text
from edgekit.quantize.qnn.graph import float_name
from edgekit.runtimes.onnx_file import save_onnx

GATE_PREFIX = "edgekit_gate_"
# ORT's quantizer names a quantized initializer W as W + this suffix (onnx_quantizer's TENSOR_NAME_QUANT_SUFFIX).
QUANTIZED_SUFFIX = "_quantized"


@dataclass(frozen=True)
class Sensitivity:
    """Per-candidate output noise, summed over the feeds: ``noise[t]`` is the squared error of the
    outputs with only ``t`` quantized; ``signal`` the outputs' squared sum (float reference)."""

    noise: Mapping[str, float]
    signal: float

    def snr_db(self) -> dict[str, float]:
        """{tensor: outputs' SNR (dB) with only that tensor at 8 bit} (inf: no measurable effect;
        a candidate the graphs do not quantize is absent)."""
        return {t: power_ratio_db(self.signal, n) for t, n in self.noise.items()}

    def predicted_snr_db(self, quantized: Sequence[str]) -> float:
        """The outputs' SNR with ``quantized`` at 8 bit and every other candidate in float (16 bit),
        if their errors add in power."""
        return power_ratio_db(self.signal, sum(self.noise.get(t, 0.0) for t in quantized))


def gated_graph(qdq_model: Path, float_model: Path, candidates: Sequence[str]) -> tuple[Any, dict[str, str]]:
    """``qdq_model`` (ORT's QDQ form of ``float_model``) with a gate on every Q/DQ pair of the
    ``candidates``: activations (by their float-graph name) and quantized initializers (by the
    float initializer's name, copied in from ``float_model``). Returns (the onnx ModelProto,
    {candidate: its gate input's name}); a candidate the graph does not quantize gets no gate."""
    onnx = require("onnx")
    from onnx import helper, numpy_helper

    model = onnx.load(str(qdq_model))
    graph = model.graph
    inits = {i.name for i in graph.initializer}
    producers = {o: n for n in graph.node for o in n.output}
    outputs = {o.name for o in graph.output}
    wanted = set(candidates)
    float_inits: dict[str, Any] | None = None
    gates: dict[str, str] = {}
    added: list[Any] = []
    for node in list(graph.node):
        if node.op_type != "DequantizeLinear":
            continue
        source = node.input[0]
        q = producers.get(source)
        if q is not None and q.op_type == "QuantizeLinear" and q.input[0] not in inits:
            upstream = producers.get(q.input[0])
            if upstream is not None and upstream.op_type == "DequantizeLinear":
                continue  # an 8<->16-bit convert ORT added: part of the tensor's own pair
            ref = q.input[0]
            name = float_name(ref, outputs)
        elif source in inits and source.endswith(QUANTIZED_SUFFIX):
            name = source[: -len(QUANTIZED_SUFFIX)]
            if name not in wanted:
                continue
            if float_inits is None:
                float_inits = {i.name: i for i in onnx.load(str(float_model)).graph.initializer}
            if name not in float_inits:
                continue
            ref = f"{name}__float"
            if ref not in inits:
                graph.initializer.append(numpy_helper.from_array(numpy_helper.to_array(float_inits[name]), ref))
                inits.add(ref)
        else:
            continue
        if name not in wanted:
            continue
        gate = gates.setdefault(name, f"{GATE_PREFIX}{len(gates)}")
        out = node.output[0]
        node.output[0] = f"{out}__q"
        added += [
            helper.make_node("Sub", [f"{out}__q", ref], [f"{out}__err"], name=f"{out}__gate_sub"),
            helper.make_node("Mul", [f"{out}__err", gate], [f"{out}__gated"], name=f"{out}__gate_mul"),
            helper.make_node("Add", [ref, f"{out}__gated"], [out], name=f"{out}__gate_add"),
        ]
    # Each gate's three nodes go right after their DequantizeLinear: the graph stays in topological order.
    placed = {n.name: n for n in added}
    order = []
    for node in graph.node:
        order.append(node)
        if node.op_type == "DequantizeLinear" and node.output[0].endswith("__q"):
            out = node.output[0][:-3]
            order += [placed[f"{out}__gate_sub"], placed[f"{out}__gate_mul"], placed[f"{out}__gate_add"]]
    del graph.node[:]
    graph.node.extend(order)
    for gate in gates.values():
        graph.input.append(helper.make_tensor_value_info(gate, onnx.TensorProto.FLOAT, [1]))
    return model, gates


def output_sensitivity(
    float_model: Path,
    graphs: Sequence[tuple[Path, Sequence[Mapping[str, np.ndarray]]]],
    candidates: Sequence[str],
    threads: int = 1,
) -> Sensitivity:
    """Each candidate's effect on the outputs, alone at 8 bit, summed over ``graphs``: pairs of (a
    QDQ graph of ``float_model``, the recorded feeds it decodes; one pair per step bucket). The
    graphs run on the CPU EP with basic optimization only (every Q/DQ as written, the ops in
    between in float: the QDQ semantics the HTP implements). Costs (candidates + 1) forwards per feed."""
    parts = output_sensitivity_per_graph(float_model, graphs, candidates, threads)
    noise: dict[str, float] = {}
    for part in parts:
        for t, n in part.noise.items():
            noise[t] = noise.get(t, 0.0) + n
    return Sensitivity(noise=noise, signal=sum(p.signal for p in parts))


def output_sensitivity_per_graph(
    float_model: Path,
    graphs: Sequence[tuple[Path, Sequence[Mapping[str, np.ndarray]]]],
    candidates: Sequence[str],
    threads: int = 1,
    workers: int = 1,
    each_feed: Callable[[int], None] | None = None,
    first_forward: Callable[[float], None] | None = None,
) -> list[Sensitivity]:
    """``output_sensitivity`` for each pair of ``graphs`` on its own (one per step bucket; a
    pair without feeds gives an empty one). ``workers``: sessions that share the candidates,
    each in its own thread with ``threads`` intra-op threads (``ranking_workers``).
    ``each_feed(n)``: after each feed, n of them done in all (progress). ``first_forward(s)``:
    once, before any candidate runs, the seconds of one warm forward of the gated graph (the
    ranking's price: a 600 M-parameter model's is seconds, times every candidate and call)."""
    ort = require("onnxruntime")
    parts: list[Sensitivity] = []
    done = 0
    for qdq_model, feeds in graphs:
        noise: dict[str, float] = {}
        signal = 0.0
        if not feeds:
            parts.append(Sensitivity(noise=noise, signal=signal))
            continue
        model, gates = gated_graph(qdq_model, float_model, candidates)
        options = ort.SessionOptions()
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_BASIC
        options.intra_op_num_threads = threads
        options.log_severity_level = 3
        # From a file beside the QDQ graph: protobuf cannot serialize a model over 2 GiB in memory.
        gated = save_onnx(model, qdq_model.with_name(f"{qdq_model.stem}-gated.onnx"))
        lanes = max(1, min(workers, len(gates)))
        sessions = [ort.InferenceSession(str(gated), options, providers=["CPUExecutionProvider"]) for _ in range(lanes)]
        names = {i.name for i in sessions[0].get_inputs()}
        off = {g: np.zeros(1, np.float32) for g in gates.values()}
        shares = [list(gates.items())[w::lanes] for w in range(lanes)]
        with ThreadPoolExecutor(max_workers=lanes) as pool:  # onnxruntime runs without the GIL
            for feed in feeds:
                base = {k: v for k, v in feed.items() if k in names} | off
                if first_forward is not None:  # the first run of a session pays its allocations
                    sessions[0].run(None, base)
                    started = time.perf_counter()
                ref = [np.asarray(y, np.float64) for y in sessions[0].run(None, base)]
                if first_forward is not None:
                    first_forward(time.perf_counter() - started)
                    first_forward = None
                signal += sum(float(np.sum(y**2)) for y in ref)
                for part in pool.map(_gated_noise, sessions, shares, [base] * lanes, [ref] * lanes):
                    for t, n in part.items():
                        noise[t] = noise.get(t, 0.0) + n
                done += 1
                if each_feed is not None:
                    each_feed(done)
        parts.append(Sensitivity(noise=noise, signal=signal))
    return parts


def _gated_noise(
    session: Any, gates: Sequence[tuple[str, str]], base: Mapping[str, np.ndarray], ref: Sequence[np.ndarray]
) -> dict[str, float]:
    """{candidate: the outputs' squared error against ``ref`` with its gate alone on}."""
    on = np.ones(1, np.float32)
    out = {}
    for t, gate in gates:
        ys = session.run(None, dict(base) | {gate: on})
        out[t] = sum(float(np.sum((np.asarray(y, np.float64) - r) ** 2)) for y, r in zip(ys, ref))
    return out


# A model up to this size is ranked by one single-threaded session per core, each on its share of
# the candidates: a small graph's forward is too short for intra-op threads to pay (flow demo, 2
# cores: 10 ms per gated forward on one thread, 23 ms on two), and a session per core costs one more
# copy of weights this small. A larger model keeps one session with the run's threads.
RANK_WORKERS_MAX_BYTES = 256 << 20


# The ranking's recorded calls: this many times ``sensitivity_feeds``, and at most RANK_FORWARDS
# gated forwards (a reference and one per candidate on each call), never under RANK_MIN_CALLS.
# The flow demo's 281 tensors on 16 calls are 4,512: unchanged. A user's 10 M-parameter masked
# transformer at L = 256 (436 tensors; 2-core AMD EPYC, partly beside another quantize) took
# 18.5 min on 16 calls, 69 s a call: 10 calls now.
RANK_FEEDS_PER_FEED = 4
RANK_FORWARDS = 4608
RANK_MIN_CALLS = 2


def ranking_calls(candidates: int, wanted: int, available: int) -> int:
    """How many of ``available`` recorded calls the ranking runs: ``wanted``, fewer where
    ``candidates`` + 1 forwards a call would pass ``RANK_FORWARDS``, at least ``RANK_MIN_CALLS``."""
    fit = max(RANK_MIN_CALLS, RANK_FORWARDS // (candidates + 1))
    return max(0, min(available, wanted, fit))


def spread(indices: Sequence[int], k: int) -> list[int]:
    """``k`` of ``indices`` spread evenly from the first to the last (the loop's recorded calls)."""
    if k <= 0 or not indices:
        return []
    return sorted({indices[j] for j in np.linspace(0, len(indices) - 1, k).round().astype(int).tolist()})


def price_line(candidates: int, calls: int, sessions: int, seconds: float) -> str:
    """What the ranking will cost, from one warm forward of the gated graph (``seconds``): a
    reference and one forward per candidate on each call, the candidates shared by ``sessions``."""
    forwards = (candidates + 1) * calls
    left = seconds * (calls + candidates * calls / sessions)  # the references run on one session
    return (
        f"rank: {forwards} forwards of the QDQ graph on {sessions} session(s), one {seconds:.2f} s: "
        f"about {clock_text(left)} (--no-fallback skips the ranking and the search)"
    )


def ranking_workers(model_bytes: int, threads: int, cores: int | None) -> tuple[int, int]:
    """(sessions, intra-op threads each) for ``output_sensitivity_per_graph``: one single-threaded
    session per core (at most 4) for a model up to ``RANK_WORKERS_MAX_BYTES`` when ``threads`` is 0
    (ORT's default); else one session with ``threads``."""
    if threads != 0 or model_bytes > RANK_WORKERS_MAX_BYTES or not cores or cores < 2:
        return 1, threads
    return min(cores, 4), 1


def promotion_order(
    noise: Mapping[str, float],
    ties: Mapping[str, frozenset[str]],
    activations: Iterable[str],
    start: Iterable[str] = (),
) -> list[str]:
    """The candidates of ``ties`` (not in ``start``, which is at 16 bit already) in the order the
    search promotes them: each next one removes the most output noise (``noise``: a tensor's, alone
    at 8 bit) per activation it newly puts at 16 bit, its ties included; one that puts no new
    activation at 16 bit (a weight whose input is already there) costs nothing and comes next.
    Greedy by that ratio, the set cover's usual approximation: the 8-bit share is counted in activations, and a
    Split's outputs or a residual sum's consumers go to 16 bit together."""
    acts = set(activations)
    wide: set[str] = set()  # every tensor at 16 bit so far (activations and constants)
    for t in start:
        wide |= ties.get(t, frozenset({t}))
    left = sorted(c for c in ties if c not in set(start))
    order: list[str] = []

    def score(c: str) -> float:  # reads ``wide`` as the loop below grows it (in place)
        new = ties[c] - wide
        gain = sum(noise.get(t, 0.0) for t in new)
        cost = len(new & acts)
        return np.inf if cost == 0 else gain / cost

    while left:
        best = max(left, key=score)
        order.append(best)
        wide |= ties[best]
        left.remove(best)
    return order


def bucket_promotion_order(
    noise: Sequence[Mapping[str, float]],
    weight: Sequence[float],
    calls: Sequence[float],
    ties: Mapping[str, frozenset[str]],
    activations: Iterable[str],
    start: Iterable[str] = (),
) -> list[tuple[int, str]]:
    """``promotion_order`` over (step bucket, tensor): a tensor can be at 16 bit in one bucket's
    graph and at 8 bit in another's. ``noise[b]``: each tensor's output noise alone at 8 bit in
    bucket b, per call; ``weight[b]``: what an output error in bucket b's calls weighs in the
    decode's result (a flow step's error enters the result times its step size: ``step_weights``);
    ``calls[b]``: bucket b's share of the decode's calls, which is what an activation at 16 bit
    there costs. Each next (bucket, tensor) removes the most weighted noise per activation-call it
    newly puts at 16 bit. ``start`` is at 16 bit in every bucket."""
    acts = set(activations)
    n = len(noise)
    wide: list[set[str]] = [set() for _ in range(n)]
    for b in range(n):
        for t in start:
            wide[b] |= ties.get(t, frozenset({t}))
    skip = set(start)
    left = [{c for c in ties if c not in skip} for _ in range(n)]

    def score(b: int, c: str) -> float:
        new = ties[c] - wide[b]
        cost = len(new & acts) * calls[b]
        if cost == 0:
            return np.inf
        return weight[b] * sum(noise[b].get(t, 0.0) for t in new) / cost

    scores = [{c: score(b, c) for c in left[b]} for b in range(n)]
    order: list[tuple[int, str]] = []
    while any(left):
        b, c = max(((b, c) for b in range(n) for c in left[b]), key=lambda bc: (scores[bc[0]][bc[1]], -bc[0], bc[1]))
        order.append((b, c))
        wide[b] |= ties[c]
        left[b].discard(c)
        del scores[b][c]
        scores[b] = {x: score(b, x) for x in left[b]}  # only bucket b's graph changed
    return order


def step_weights(kind: str, positions: Sequence[float]) -> list[float]:
    """Each call position's weight in the decode's result: for a flow model, the square of the step
    its velocity is integrated over (the next position, or 1 for the last: an explicit solver's
    update is x + dt * v, so an output error of the velocity net at t reaches the result times
    that step, and its power times its square); 1 for masked and AR steps, whose errors act on
    decisions rather than through a step size."""
    pos = [float(p) for p in positions]
    if kind != "flow":
        return [1.0] * len(pos)
    grid = sorted(set(pos)) + [1.0]
    step = {t: max(grid[i + 1] - t, 0.0) for i, t in enumerate(grid[:-1])}
    return [step[p] ** 2 for p in pos]


def predicted_gains_db(
    noise: Sequence[Mapping[str, float]],
    weight: Sequence[float],
    ties: Mapping[str, frozenset[str]],
    order: Sequence[str | tuple[int, str]],
    start: Iterable[str] = (),
) -> list[float]:
    """[how many dB the first k promotions of ``order`` take off the outputs' predicted noise,
    for k = 0 .. len(order)], if the tensors' errors add in power: ``noise[b]`` each tensor's
    output noise alone at 8 bit in step bucket b (one bucket: one graph), ``weight[b]`` what an
    output error there weighs in the decode's result (``bucket_promotion_order``'s weight); a
    promotion is a tensor (in every bucket) or (bucket, tensor); ``start`` is at 16 bit already.
    The search's first guess (``predicted_count``)."""
    n = len(noise)
    wide: list[set[str]] = [set() for _ in range(n)]
    for b in range(n):
        for t in start:
            wide[b] |= ties.get(t, frozenset({t}))
    left = [weight[b] * sum(v for t, v in noise[b].items() if t not in wide[b]) for b in range(n)]
    total0 = sum(left)
    gains = [0.0]
    for p in order:
        buckets, t = (range(n), p) if isinstance(p, str) else ([p[0]], p[1])
        for b in buckets:
            new = ties.get(t, frozenset({t})) - wide[b]
            left[b] -= weight[b] * sum(noise[b].get(x, 0.0) for x in new)
            wide[b] |= new
        rest = max(sum(left), 0.0)
        gains.append(float("inf") if rest <= total0 * 1e-12 else 10.0 * np.log10(total0 / rest) if total0 > 0 else 0.0)
    return gains


def predicted_count(gains: Sequence[float], needed_db: float) -> int:
    """The smallest count whose predicted gain (``predicted_gains_db``) reaches ``needed_db``
    (at least 1); the whole order where none does."""
    for k, gain in enumerate(gains):
        if k and gain >= needed_db:
            return k
    return max(len(gains) - 1, 1)
