"""Reading a per-step graph once for quantization: every node's op, module path, role and FLOPs
(``analyse_graph``; which of them the cpu and trt profiles quantize: ``cpu/select.py``).

Roles: ``weighted`` (MatMul/Gemm/Conv with a constant weight), ``attention-core`` (a MatMul
whose both inputs are activations: QK^T and AV; ``NodeInfo.attention_scores`` tells QK^T, whose
output reaches a Softmax), ``time-embedding`` (flow: the nodes computed
from ``t`` alone up to the embedding the blocks share: sinusoid + time MLP), ``other``."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from edgekit._deps import require
from edgekit.quantize.names import Lineage
from edgekit.runtimes.onnx_file import load_onnx

FLOAT = 1  # onnx.TensorProto.FLOAT
# What may stand between QKᵀ and its Softmax: the 1/sqrt(d) scale, a mask, a reshape.
SCORE_OPS: frozenset[str] = frozenset({"Mul", "Div", "Add", "Sub", "Where", "Reshape", "Cast"})


@dataclass(frozen=True)
class NodeInfo:
    """One node of the prepared float graph. ``rows``: rows of the activation operand of a
    MatMul/Gemm (1 = GEMV-shaped), 0 when unknown or not a matrix product. ``flops``: 2·MACs of
    MatMul/Gemm/Conv from the inferred static shapes (0 for other ops)."""

    name: str
    op_type: str
    label: str  # the torch module path (``blocks.0.mlp.fc``), else the node name
    role: str  # weighted | attention-core | time-embedding | other
    flops: int
    rows: int
    activations: tuple[str, ...]  # float inputs that are not constants
    origin: tuple[str, ...] = ()  # the FP32 graph's nodes it came from (``names.Lineage``)
    module: str | None = None  # the torch module it came from, where the export says
    # An attention-core MatMul whose output reaches a Softmax through SCORE_OPS only (QKᵀ, not AV).
    attention_scores: bool = False
    # An embedding lookup (Gather on axis 0 of a float initializer of rank >= 2 that only such
    # Gathers read): the table's shape ([rows, ...]); () for every other node.
    table: tuple[int, ...] = ()

    @property
    def names(self) -> tuple[str, ...]:
        """Every name a user may call it by: prepared node, FP32 node(s), torch module."""
        return (self.name, *self.origin, *([self.module] if self.module else []))


@dataclass(frozen=True)
class GraphPlan:
    nodes: tuple[NodeInfo, ...]

    def by_name(self) -> dict[str, NodeInfo]:
        return {n.name: n for n in self.nodes}

    def candidates(self, op_types: Sequence[str]) -> list[NodeInfo]:
        """Nodes of ``op_types`` that have a float activation input (quantizable at all)."""
        return [n for n in self.nodes if n.op_type in op_types and n.activations]

    def matmul_flops(self, names: Sequence[str] | None = None, ops: Sequence[str] = ("MatMul", "Gemm")) -> int:
        chosen = None if names is None else set(names)
        return sum(n.flops for n in self.nodes if n.op_type in ops and (chosen is None or n.name in chosen))


def analyse_graph(
    model_path: Path,
    time_input: str | None = None,
    labels: Mapping[str, str] | None = None,
    lineage: Lineage | None = None,
) -> GraphPlan:
    """Every node of the (prepared, shape-inferred) float graph with its role and FLOPs.

    time_input: the flow time input (``t``); its embedding subgraph gets role ``time-embedding``.
    labels: node name -> module path (``module_labels`` of the original graph), where no
    ``lineage`` (``names.Lineage.read(fp32, prepared)``) says which FP32 nodes and module each came from."""
    onnx = require("onnx")
    model = onnx.shape_inference.infer_shapes(
        load_onnx(model_path, "the prepared float graph")
    )  # shapes need no weights
    graph = model.graph
    labels = dict(labels or {})
    shapes, types = _value_shapes(onnx, model)
    constant = {i.name for i in graph.initializer}
    for node in graph.node:  # topological order: a node of constants is a constant
        if node.op_type == "Constant" or (node.input and all(i in constant or i == "" for i in node.input)):
            constant.update(node.output)
    consumers: dict[str, list[Any]] = defaultdict(list)  # tensor -> the nodes reading it
    for node in graph.node:
        for i in node.input:
            consumers[i].append(node)
    time_nodes = _time_embedding_nodes(graph, time_input, constant, consumers) if time_input else set()
    tables = _embedding_tables(graph, consumers)

    nodes = []
    for node in graph.node:
        acts = tuple(i for i in node.input if i and i not in constant and types.get(i, FLOAT) == FLOAT)
        if node.name in time_nodes:
            role = "time-embedding"
        elif node.op_type in ("MatMul", "Gemm", "Conv", "ConvTranspose") and acts:
            role = "attention-core" if node.op_type == "MatMul" and len(acts) == 2 else "weighted"
        else:
            role = "other"
        flops, rows = _flops(node, shapes)
        if lineage is not None:
            origin, module = lineage.origin(node.name), lineage.module(node.name)
        else:
            origin, module = (), labels.get(node.name) or labels.get(node.name.split("/")[0])
        label = module or node.name
        scores = role == "attention-core" and _reaches_softmax(node.output[0], consumers)
        table = shapes.get(node.input[0], ()) if node.name in tables else ()
        nodes.append(NodeInfo(node.name, node.op_type, label, role, flops, rows, acts, origin, module, scores, table))
    return GraphPlan(tuple(nodes))


def _reaches_softmax(tensor: str, consumers: Mapping[str, Sequence[Any]]) -> bool:
    """Whether every path from ``tensor`` runs through ``SCORE_OPS`` into a Softmax (QKᵀ's scores)."""
    readers = consumers.get(tensor, ())
    if not readers:
        return False
    for node in readers:
        if node.op_type == "Softmax":
            continue
        if node.op_type not in SCORE_OPS or not _reaches_softmax(node.output[0], consumers):
            return False
    return True


def _embedding_tables(graph: Any, readers: Mapping[str, Sequence[Any]]) -> set[str]:
    """Names of the Gather nodes that look up rows of a constant table: axis 0 of a float
    initializer of rank >= 2 whose every reader (``readers``: tensor -> the nodes reading it) is
    such a Gather (a table a MatMul also reads, as tied input/output embeddings are, is a weight of
    that MatMul)."""
    out: set[str] = set()
    for init in graph.initializer:
        nodes = readers.get(init.name, ())
        if init.data_type != FLOAT or len(init.dims) < 2 or not nodes:
            continue
        if all(is_row_gather(n, init.name) for n in nodes):
            out.update(n.name for n in nodes)
    return out


def is_row_gather(node: Any, table: str) -> bool:
    """Whether ``node`` is a Gather of rows (axis 0) of ``table``, read as its data and only so."""
    axis = next((a.i for a in node.attribute if a.name == "axis"), 0)
    return node.op_type == "Gather" and node.input[0] == table and table not in node.input[1:] and axis == 0


def _value_shapes(onnx: Any, model: Any) -> tuple[dict[str, tuple[int, ...]], dict[str, int]]:
    shapes: dict[str, tuple[int, ...]] = {}
    types: dict[str, int] = {}
    graph = model.graph
    for vi in [*graph.input, *graph.output, *graph.value_info]:
        t = vi.type.tensor_type
        types[vi.name] = t.elem_type
        if t.HasField("shape") and all(d.HasField("dim_value") for d in t.shape.dim):
            shapes[vi.name] = tuple(d.dim_value for d in t.shape.dim)
    for init in graph.initializer:
        shapes[init.name] = tuple(init.dims)
        types[init.name] = init.data_type
    return shapes, types


def _flops(node: Any, shapes: Mapping[str, tuple[int, ...]]) -> tuple[int, int]:
    """(2·MACs, activation rows) of a MatMul/Gemm/Conv from static shapes; (0, 0) otherwise."""
    ins = [shapes.get(i) for i in node.input[:2]]
    out = shapes.get(node.output[0]) if node.output else None
    if node.op_type in ("MatMul", "Gemm") and ins[0] is not None and out is not None and len(ins[0]) >= 1:
        k = ins[0][-1]
        if node.op_type == "Gemm" and any(a.name == "transA" and a.i for a in node.attribute):
            k = ins[0][0]
        rows = int(np.prod(out[:-1])) if len(out) > 1 else 1
        return int(2 * np.prod(out) * k), rows
    if node.op_type in ("Conv", "ConvTranspose") and ins[1] is not None and out is not None:
        w = ins[1]  # (Cout, Cin/group, *kernel)
        return int(2 * np.prod(out) * int(np.prod(w[1:]))), 0
    return 0, 0


def _time_embedding_nodes(
    graph: Any, time_input: str, constant: set[str], consumers: Mapping[str, Sequence[Any]]
) -> set[str]:
    """Nodes computed from ``time_input`` (and constants) alone, up to and including the tensor
    most consumers share (the embedding every block reads); all of them when none is shared.
    ``consumers``: tensor -> the nodes reading it."""
    t_only = {time_input}
    producer: dict[str, Any] = {}
    cone = []
    for node in graph.node:
        live = [i for i in node.input if i and i not in constant]
        if live and all(i in t_only for i in live):
            t_only.update(node.output)
            cone.append(node)
            for o in node.output:
                producer[o] = node
    if not cone:
        return set()
    outputs = [o for n in cone for o in n.output]
    # Most consumers wins; on a tie the later tensor (the sinusoid's angle also feeds two ops).
    hub = max(enumerate(outputs), key=lambda io: (len(consumers.get(io[1], ())), io[0]))[1]
    if len(consumers.get(hub, ())) < 2:
        return {n.name for n in cone}
    keep, stack = set(), [hub]
    while stack:
        node = producer.get(stack.pop())
        if node is not None and node.name not in keep:
            keep.add(node.name)
            stack.extend(i for i in node.input if i in producer)
    return keep
