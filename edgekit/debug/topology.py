"""The reference graph as ``edgekit debug`` reads it, and where in it the error enters.

Per decode step, each op of the reference graph (its topological order, module path from the
exporter's metadata) gets the SQNR of the candidate's value of its output against the
reference's (``sqnr``), and of its inputs. What the op itself adds is the noise of its output
less the noise it inherited (relative noise powers; graph inputs and constants are exact, an input
that was not captured inherits from its own producer):

    own_db = -10·log10(10^(-out_db/10) - max over inputs 10^(-in_db/10))

The error *enters* at the first step, and there at the first op in topological order, whose
``own_db`` falls below the threshold: not where the error is largest, which in a decode loop is
usually at the output of the last step, long after it entered.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

from edgekit._deps import require
from edgekit.runtimes.onnx_file import load_onnx

# Ops whose output SQNR is more than this above the threshold cannot have added noise below it.
SUSPECT_MARGIN_DB = 6.0
# Where no op's own noise crosses the threshold, the op named is the one that adds the most. The
# output-minus-input estimate blames an op that passes its inputs' noise on amplified (a float
# QKᵀ of two noisy projections: diffusers' SD3 MMDiT, 33 dB in, 29 dB out, "31.6 dB added" by an
# op that measured alone adds 139 dB; tanh-GELU's Pow likewise), so the quantized ops the
# estimate ranks first are measured alone, this many at most.
RECHECK_MOST = 12
WEIGHTED_OPS = ("MatMul", "Gemm", "Conv", "ConvTranspose")
FLOAT = 1  # onnx.TensorProto.FLOAT


@dataclass(frozen=True)
class Op:
    """One node of the reference graph. ``label``: its module path (``blocks.2.mlp.fc``), else its name."""

    name: str
    op_type: str
    label: str
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]


@dataclass(frozen=True)
class Topology:
    ops: tuple[Op, ...]  # topological order
    exact: frozenset[str]  # graph inputs and constants: the same on both variants
    floats: tuple[str, ...]  # float tensors the ops produce, in order: what can be captured

    def producer(self) -> dict[str, Op]:
        return {o: op for op in self.ops for o in op.outputs}

    def by_name(self) -> dict[str, Op]:
        return {op.name: op for op in self.ops}


def read_topology(model_path: Path, labels: Mapping[str, str]) -> Topology:
    """The float graph at ``model_path`` (the bundle's fp32 ONNX), shape-inferred for the types."""
    onnx = require("onnx")
    model = load_onnx(model_path, "artifact 'fp32'")  # the graph: types and names, no weights
    inferred = onnx.shape_inference.infer_shapes(model).graph
    types = {vi.name: vi.type.tensor_type.elem_type for vi in [*inferred.value_info, *inferred.output, *inferred.input]}
    exact = {i.name for i in model.graph.initializer} | {i.name for i in model.graph.input}
    ops, floats = [], []
    for node in model.graph.node:
        if node.op_type == "Constant":
            exact.update(node.output)
            continue
        ops.append(
            Op(node.name, node.op_type, labels.get(node.name) or node.name, tuple(node.input), tuple(node.output))
        )
        floats += [o for o in node.output if types.get(o) == FLOAT]
    return Topology(tuple(ops), frozenset(exact), tuple(floats))


def noise(db: float) -> float:
    """Relative noise power of an SQNR in dB (0 for +inf)."""
    return 0.0 if db == math.inf else 10 ** (-db / 10)


def to_db(power: float) -> float:
    return math.inf if power <= 0 else -10 * math.log10(power)


def inherited(topo: Topology, measured: Mapping[str, float]) -> dict[str, float]:
    """tensor -> SQNR (dB) of every tensor: measured where captured, else what its producer's
    inputs carried (their worst), +inf for graph inputs and constants."""
    out: dict[str, float] = {t: math.inf for t in topo.exact}
    out[""] = math.inf
    for op in topo.ops:
        worst = min((out.get(i, math.inf) for i in op.inputs), default=math.inf)
        for o in op.outputs:
            out[o] = measured.get(o, worst)
    return out


def own_db(topo: Topology, measured: Mapping[str, float]) -> dict[str, dict[str, float]]:
    """op name -> {"out_db", "in_db", "own_db"} for every op with a captured output."""
    carried = inherited(topo, measured)
    out = {}
    for op in topo.ops:
        tensor = next((o for o in op.outputs if o in measured), None)
        if tensor is None:
            continue
        in_db = min((carried.get(i, math.inf) for i in op.inputs), default=math.inf)
        added = noise(measured[tensor]) - noise(in_db)
        out[op.name] = {"out_db": measured[tensor], "in_db": in_db, "own_db": to_db(added)}
    return out


@dataclass(frozen=True)
class Entry:
    """Where the error enters: ``step`` (0-based) and ``op`` (the captured op), with ``nodes``: the
    op and the uncaptured ops it stands for (a MatMul fused into its bias Add in the candidate)."""

    step: int
    op: Op
    nodes: tuple[Op, ...]
    tensor: str
    out_db: float
    in_db: float
    own_db: float
    crossed: bool  # False: nothing fell below the threshold; this is the op that added the most

    @property
    def shown(self) -> Op:
        """The op a person names: the weighted op of the region where there is one."""
        return next((n for n in self.nodes if n.op_type in WEIGHTED_OPS), self.op)

    def to_json(self, steps: int) -> dict[str, Any]:
        shown = self.shown
        return {
            "step": self.step + 1,
            "steps": steps,
            "node": shown.name,
            "op": shown.op_type,
            "module": shown.label,
            "tensor": self.tensor,
            "nodes": [n.name for n in self.nodes],
            "sqnr_db": self.out_db,
            "input_sqnr_db": self.in_db,
            "added_sqnr_db": self.own_db,
            "crossed_threshold": self.crossed,
        }


def suspect(row: Mapping[str, float], threshold_db: float) -> bool:
    """Whether an op's ``own_db`` row is close enough to the threshold for ``locate`` to measure
    its own noise directly (``local``)."""
    return row["out_db"] < threshold_db + SUSPECT_MARGIN_DB


def suspects(topo: Topology, measured: Mapping[str, float], threshold_db: float) -> list[tuple[Op, str]]:
    """(op, its captured output) of every op ``locate`` asks ``local`` about at a step with
    ``measured`` SQNRs, graph order."""
    by_name = topo.by_name()
    out = []
    for name, row in own_db(topo, measured).items():
        if suspect(row, threshold_db):
            op = by_name[name]
            out.append((op, next(o for o in op.outputs if o in measured)))
    return out


def region(topo: Topology, op: Op, captured: set[str]) -> tuple[Op, ...]:
    """``op`` and the ops upstream of it whose outputs were not captured, in graph order."""
    producer = topo.producer()
    keep, stack = {op.name}, list(op.inputs)
    while stack:
        p = producer.get(stack.pop())
        if p is None or p.name in keep or any(o in captured for o in p.outputs):
            continue
        keep.add(p.name)
        stack.extend(p.inputs)
    return tuple(o for o in topo.ops if o.name in keep)


def locate(
    topo: Topology,
    per_step: Sequence[Mapping[str, float]],
    threshold_db: float,
    local: Callable[[int, Op, str], float | None] | None = None,
    prefetch: Callable[[int, Sequence[tuple[Op, str]]], None] | None = None,
    quantized: Collection[str] | None = None,
) -> Entry | None:
    """The first (step, op) whose own added noise is below ``threshold_db``; where none is, the
    (step, op) that added the most (``crossed`` False). None when nothing was captured.

    ``local(step, op, tensor)``: the op's own noise measured directly (``debug.local``), asked for
    the ops whose output is within ``SUSPECT_MARGIN_DB`` of the threshold and, where none crosses,
    for up to ``RECHECK_MOST`` others (``most_added``: of the ops the candidate ``quantized``
    where it names any); None (or no ``local``) falls back to the output-minus-input estimate.
    ``prefetch(step, [(op, tensor)])``: the ops about to be asked at one step (a judge captures
    that step's values once for all of them)."""
    by_name = topo.by_name()
    best: Entry | None = None
    alone: list[Entry] = []  # entries whose own noise was measured directly
    estimated: list[Entry] = []
    for step, measured in enumerate(per_step):
        for name, row in own_db(topo, measured).items():  # graph order
            op = by_name[name]
            tensor = next(o for o in op.outputs if o in measured)
            got = local(step, op, tensor) if local is not None and suspect(row, threshold_db) else None
            row = row if got is None else {**row, "own_db": got}
            entry = Entry(
                step,
                op,
                region(topo, op, set(measured)),
                tensor,
                row["out_db"],
                row["in_db"],
                row["own_db"],
                row["own_db"] < threshold_db,
            )
            if entry.crossed:
                return entry
            (alone if got is not None else estimated).append(entry)
            if best is None or entry.own_db < best.own_db:
                best = entry
    if local is None or best is None:
        return best
    order = {op.name: i for i, op in enumerate(topo.ops)}
    return most_added(order, alone, estimated, threshold_db, local, prefetch, quantized) or best


def most_added(
    order: Mapping[str, int],
    alone: Sequence[Entry],
    estimated: Sequence[Entry],
    threshold_db: float,
    local: Callable[[int, Op, str], float | None],
    prefetch: Callable[[int, Sequence[tuple[Op, str]]], None] | None,
    quantized: Collection[str] | None = None,
) -> Entry | None:
    """Of entries none of which crossed: the one that adds the most noise (lowest dB), from those
    measured alone (the suspects, and the ``RECHECK_MOST`` others of lowest estimate, asked a
    step's at once) and, by their estimates, those asked that could not be (a region input the
    candidate's graph does not hold). ``quantized``: the reference ops the candidate quantizes;
    where any entry's region holds one, only those are asked: a float op adds rounding only, and
    the estimate blames it for the noise it passes on. One that crosses when measured alone wins:
    the first by step, then by ``order``, the graph's. None where nothing was asked."""
    measured = list(alone)
    pool = [e for e in estimated if quantized and any(n.name in quantized for n in e.nodes)] or list(estimated)
    worst = sorted(pool, key=lambda e: e.own_db)[:RECHECK_MOST]
    rest = []  # asked, not measurable alone: their estimates stand
    for step in sorted({e.step for e in worst}):
        asked = [e for e in worst if e.step == step]
        if prefetch is not None:
            prefetch(step, [(e.op, e.tensor) for e in asked])
        for e in asked:
            got = local(step, e.op, e.tensor)
            if got is None:
                rest.append(e)
            else:
                measured.append(replace(e, own_db=got, crossed=got < threshold_db))
    crossed = [e for e in measured if e.crossed]
    if crossed:
        return min(crossed, key=lambda e: (e.step, order[e.op.name]))
    return min([*measured, *rest], key=lambda e: e.own_db, default=None)


def layer_rows(topo: Topology, per_step: Sequence[Mapping[str, float]]) -> tuple[list[str], np.ndarray]:
    """(layer labels, SQNR dB [layers, steps]) for the heatmap: one row per module (its last
    captured output in graph order: what the module hands on), graph order."""
    last: dict[str, str] = {}
    captured = set().union(*[set(m) for m in per_step]) if per_step else set()
    for op in topo.ops:
        tensor = next((o for o in op.outputs if o in captured), None)
        if tensor is not None:
            last[op.label] = tensor
    labels = list(last)
    grid = np.array([[m.get(last[label], np.nan) for m in per_step] for label in labels], dtype=np.float64)
    return labels, grid.reshape(len(labels), len(per_step))
