"""The part of a one-node INT8 graph that computes anything the float graph does not, as a graph of
its own: ``sensitivity.isolated_output_sqnr`` measures the network output with one node INT8 at a
time, and every node upstream of that one computes what the float graph computes.

Only the quantized node, its Q/DQ nodes and what reads their outputs (transitively) need to run,
from the float graph's tensors where they cross into that part (``Suffix.takes``: in a transformer
the residual stream and the condition embeddings, a few MB), which one float run per feed fetches
for every node measured. Sana-600M: eight of its ten noisiest nodes sit in its last blocks, and the
whole 2.2 GiB graph per node took ~9 s of session and four forwards.

Each node of the suffix is the node of the whole one-node graph, on the same inputs; the session
optimizes both alike, so the output is the whole graph's up to a fusion the cut prevents (a float
node whose output the float run fetches is not fused with its reader): SQNRs equal to well under
0.01 dB (``tests/quantize/cpu/test_suffix.py``). ``onnx`` is read lazily (``taps``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from edgekit.quantize.taps import subgraph

GRAPH_ATTRIBUTES = (5, 10)  # onnx.AttributeProto GRAPH, GRAPHS: a subgraph reads outer names unseen


@dataclass(frozen=True)
class Suffix:
    """``graph``: weightless ``ModelProto`` of the nodes that differ from the float graph's or read
    what those make, in graph order, outputting the network output; every graph input kept and
    ``takes`` (float tensors the part reads) added as inputs. ``nodes``: how many it runs of
    ``of``."""

    graph: Any
    takes: tuple[str, ...]
    nodes: int
    of: int


def downstream(graph: Any, node: str) -> tuple[str, ...] | None:
    """The tensors of the float ``graph`` (weightless, shape-inferred) that a suffix from ``node``
    reads from upstream: the inputs of ``node`` and of every node reading what it makes
    (transitively), other than graph inputs (fed), initializers and what those nodes make. None
    where ``node`` is not in the graph or a node holds a subgraph."""
    g = graph.graph
    if any(a.type in GRAPH_ATTRIBUTES for n in g.node for a in n.attribute):
        return None
    if not any(n.name == node for n in g.node):
        return None
    made: set[str] = set()
    part = []
    for n in g.node:
        if n.name == node or any(i in made for i in n.input):
            part.append(n)
            made.update(n.output)
    return _takes(part, made, {i.name for i in g.initializer} | {v.name for v in g.input})


def suffix_of(float_graph: Any, graph: Any, output: str, available: Sequence[str]) -> Suffix | None:
    """The ``Suffix`` of ``graph`` (a one-node QDQ model of ``float_graph``, weightless, same node
    and tensor names elsewhere) that makes ``output``: every node whose op, inputs, outputs or
    attributes differ from the float node making the same outputs, or that reads what such a node
    makes. None where it reads a tensor not in ``available`` (what the float run fetched, and the
    graph inputs), it does not make ``output``, or a node holds a subgraph."""
    g = graph.graph
    if any(a.type in GRAPH_ATTRIBUTES for n in g.node for a in n.attribute):
        return None
    same = {tuple(n.output): n.SerializeToString() for n in float_graph.graph.node}
    made: set[str] = set()
    part = []
    for n in g.node:
        changed = same.get(tuple(n.output)) != n.SerializeToString()
        if changed or any(i in made for i in n.input):
            part.append(n)
            made.update(n.output)
    if output not in made:
        return None
    inputs = {v.name for v in g.input}
    takes = _takes(part, made, {i.name for i in g.initializer} | inputs)
    if not set(takes) <= set(available):
        return None
    known = {v.name: v for v in [*float_graph.graph.value_info, *float_graph.graph.input, *float_graph.graph.output]}
    outputs = [v for v in g.output if v.name == output]
    if not outputs or any(t not in known for t in takes):
        return None
    return Suffix(subgraph(graph, part, outputs, [known[t] for t in takes]), takes, len(part), len(g.node))


def _takes(part: Sequence[Any], made: set[str], skip: set[str]) -> tuple[str, ...]:
    """The tensors ``part``'s nodes read that none of them makes, in first-read order, but ``skip``."""
    seen: dict[str, None] = {}
    for n in part:
        for i in n.input:
            if i and i not in made and i not in skip:
                seen.setdefault(i, None)
    return tuple(seen)
