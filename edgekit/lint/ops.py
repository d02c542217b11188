"""Op families the rules name, and small readers of an ONNX graph (nodes of every subgraph,
constant tensors, nodes grouped by op) the rule modules share."""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np

# Node names listed in one finding; the rest are counted.
MAX_NODES_SHOWN = 5


# Ops that draw random numbers inside the graph: runtimes draw different numbers (TensorRT
# ignores the seed), so the same seed no longer gives the same output everywhere.
RANDOM_OPS = frozenset(
    {"RandomNormal", "RandomNormalLike", "RandomUniform", "RandomUniformLike", "Multinomial", "Bernoulli"}
)


# Ops whose output shape depends on the values flowing through the graph.
SEQUENCE_OPS = frozenset(
    {
        "SequenceAt",
        "SequenceConstruct",
        "SequenceEmpty",
        "SequenceErase",
        "SequenceInsert",
        "SequenceLength",
        "SequenceMap",
        "SplitToSequence",
        "ConcatFromSequence",
    }
)


DATA_DEPENDENT_SHAPE_OPS = (
    frozenset({"NonZero", "Unique", "Compress", "NonMaxSuppression", "StringSplit"}) | SEQUENCE_OPS
)


DEFAULT_DOMAINS = ("", "ai.onnx")


ELEM_NAMES = {
    1: "float32",
    2: "uint8",
    3: "int8",
    4: "uint16",
    5: "int16",
    6: "int32",
    7: "int64",
    10: "float16",
    17: "float8e4m3fn",
    21: "uint4",
    22: "int4",
}


def walk_nodes(graph: Any) -> Iterator[Any]:
    """Every node of ``graph`` and of its subgraphs (If/Loop/Scan bodies)."""
    for node in graph.node:
        yield node
        for attr in node.attribute:
            if attr.HasField("g"):
                yield from walk_nodes(attr.g)
            for sub in attr.graphs:
                yield from walk_nodes(sub)


# External-data tensors above this size are weights no rule reads: never loaded just to lint.
_MAX_EXTERNAL_CONSTANT_BYTES = 1 << 20


def constant_tensors(graph: Any, base_dir: str | Path = "") -> dict[str, np.ndarray]:
    """Initializers and Constant-node outputs by name (main graph and subgraphs). Tensors stored
    in an external-data file are read from ``base_dir`` (the model's folder) when small (scales,
    zero points, TopK's k); large ones (weights) are left out."""
    from onnx import helper, numpy_helper

    out: dict[str, np.ndarray] = {}

    def visit(g: Any) -> None:
        for init in g.initializer:
            if init.data_location == init.EXTERNAL:
                size = (
                    int(np.prod(init.dims, dtype=np.int64)) * helper.tensor_dtype_to_np_dtype(init.data_type).itemsize
                )
                if size > _MAX_EXTERNAL_CONSTANT_BYTES:
                    continue
            out[init.name] = numpy_helper.to_array(init, str(base_dir))
        for node in g.node:
            if node.op_type == "Constant" and node.domain in DEFAULT_DOMAINS:
                for attr in node.attribute:
                    if attr.name == "value":
                        out[node.output[0]] = numpy_helper.to_array(attr.t)
            for attr in node.attribute:
                if attr.HasField("g"):
                    visit(attr.g)
                for sub in attr.graphs:
                    visit(sub)

    visit(graph)
    return out


def node_names(nodes: Sequence[Any]) -> tuple[str, ...]:
    return tuple(n.name or f"<{n.op_type} #{i}>" for i, n in enumerate(nodes))


def shown_names(names: Sequence[str]) -> str:
    head = ", ".join(names[:MAX_NODES_SHOWN])
    return head + (f" and {len(names) - MAX_NODES_SHOWN} more" if len(names) > MAX_NODES_SHOWN else "")


def nodes_by_op(nodes: Iterable[Any]) -> dict[str, list[Any]]:
    groups: dict[str, list[Any]] = {}
    for node in nodes:
        key = node.op_type if node.domain in DEFAULT_DOMAINS else f"{node.domain}:{node.op_type}"
        groups.setdefault(key, []).append(node)
    return groups
