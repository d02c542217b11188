"""A budget-search candidate made from the all-INT8 QDQ graph by editing the graph only, instead of
running ``quantize_static`` again (``ptq.quantize_model``): the graph ``quantize_model`` writes for a
subset of the INT8 nodes, with the same nodes, initializers and scales.

What ``quantize_model(nodes)`` writes differs from the all-INT8 graph (``quantize_model(selected)``)
only at the nodes that left INT8, because every scale ORT computes depends on one tensor or one
node: an activation's on its calibrated range (the cache every build reads), a weight's on the
weight and its node (``pair_bound_overrides``; the int32 bias adjustment reads that node's input
scale), a bias's on that node's input and weight scales. So, for each node leaving INT8:

- its weight (and bias, where the profile quantizes biases) reads the prepared model's float
  initializer again, or, a weight-only fallback, keeps its INT8 weight behind its DequantizeLinear
  under the names ``ptq._weight_only`` gives it (only where ORT's weight scale is the one
  ``_weight_only`` computes: symmetric per-channel ``max|w| / 127``);
- its activation inputs read the float tensors (``ptq._float_inputs_for_float_nodes``), except an
  output the profile quantizes on purpose (cpu: Conv) of a node still INT8;
- a Q/DQ pair no node reads any more goes, with the initializers only it read.

The candidate is a new graph file only: its initializers keep naming the files their data is in
(the all-INT8 graph's side file for INT8 weights, the prepared model's for float ones: ONNX gives
each tensor its own location), so it costs no memory or disk that grows with the model. Small
models without side files get the data inline. ``onnx`` is imported lazily.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Collection, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from edgekit._deps import require
from edgekit.quantize.graph import FLOAT

# The ops whose QDQ form this module knows (ORT's QDQ quantizer: the activation inputs and the
# constant weight quantized, the bias for Gemm/Conv, the output where the profile says so).
DERIVABLE_OPS = ("MatMul", "Gemm", "Conv")
_Q, _DQ = "QuantizeLinear", "DequantizeLinear"
_INT8 = 3  # onnx.TensorProto.INT8


def derivation_blocker(
    prepared: Path, base: Path, selected: Collection[str], quantized_outputs: Sequence[str]
) -> str | None:
    """Why no candidate can be derived from ``base`` (``quantize_model`` of ``selected`` over
    ``prepared``), or None. Each reason is a graph ORT rewrites in ways that depend on which other
    nodes are INT8, so only ``quantize_model`` itself writes those candidates right."""
    onnx = require("onnx")
    p = onnx.load(str(prepared), load_external_data=False).graph
    g = onnx.load(str(base), load_external_data=False).graph
    if "*" in quantized_outputs:
        return "every op's output is quantized (ORT's Q/DQ sharing then depends on the node set)"
    if not prepared.parent == base.parent:
        return "the prepared and all-INT8 graphs are in different folders"
    names = Counter(n.name for n in p.node)
    if "" in names or any(c > 1 for c in names.values()):
        return "the prepared graph has unnamed or duplicate node names"
    by_name = {n.name: n for n in p.node}
    in_base = {n.name for n in g.node}
    for name in selected:
        node = by_name.get(name)
        if node is None or name not in in_base:
            return f"node {name!r} is missing from the prepared or the all-INT8 graph"
        if node.op_type not in DERIVABLE_OPS:
            return f"node {name!r} is a {node.op_type} (derivable: {', '.join(DERIVABLE_OPS)})"
    if any(a.type in (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS) for n in p.node for a in n.attribute):
        return "the graph has subgraphs (If/Loop/Scan)"
    # A weight read by two nodes is quantized once for every reader (float ones too); a bias read by
    # two INT8 nodes is copied under a name that depends on which of them came first.
    inits = {i.name for i in p.initializer}
    uses = Counter(i for n in p.node for i in n.input if i in inits)
    shared = sorted({i for name in selected for i in by_name[name].input if uses.get(i, 0) > 1})
    if shared:
        return f"initializer {shared[0]!r} is read by more than one node"
    producer = {o: n for n in g.node for o in n.output}
    for out in g.output:
        node = producer.get(out.name)
        if node is not None and node.op_type in (_Q, _DQ):
            return f"graph output {out.name!r} is quantized (ORT renames its producer's output)"
    return None


def derive_candidate(
    prepared: Path,
    base: Path,
    out: Path,
    int8: Collection[str],
    selected: Collection[str],
    weight_only: Collection[str] = (),
    quantized_outputs: Sequence[str] = (),
) -> bool:
    """Write at ``out`` the graph ``quantize_model(prepared, out, nodes=int8, weight_only=...)``
    writes, derived from ``base`` (that of ``selected``, whose ``derivation_blocker`` is None):
    the nodes of ``selected`` outside ``int8`` leave INT8, weight-only where ``weight_only`` names
    them. False (nothing written) where this candidate cannot be derived: ``int8`` is not a subset
    of ``selected``, ``out`` is not beside ``base``, or a weight-only fallback's INT8 weight is not
    the one ``_weight_only`` would write (another scale: ``--scheme`` pair bounds, ORT's int32-bias
    adjustment): the caller runs ``quantize_model``."""
    onnx = require("onnx")
    int8, selected, weight_only = set(int8), set(selected), set(weight_only)
    if not int8 <= selected or out.parent != base.parent:
        return False
    p = onnx.load(str(prepared), load_external_data=False).graph  # graph only: weights stay in their files
    model = onnx.load(str(base), load_external_data=False)
    g = model.graph
    p_nodes, p_inits = {n.name: n for n in p.node}, {i.name: i for i in p.initializer}
    inits = {i.name: i for i in g.initializer}
    edits = _rewire(p, g, int8, selected, weight_only, quantized_outputs)
    if edits is None:
        return False
    drop, floats, kept_weights = edits
    for node, dq, name in kept_weights:
        if not _is_weight_only_form(onnx, node, dq, p_inits[name], inits, prepared.parent):
            return False
        _rename_as_weight_only(node, dq, name, inits)

    removed = _drop_unread_qdq(g, drop, set(p_nodes))
    _drop_unread_initializers(g, {i for n in removed for i in n.input})
    have = {i.name for i in g.initializer}
    for name in dict.fromkeys(floats):
        if name not in have:
            g.initializer.add().CopyFrom(p_inits[name])  # its external data entry names the prepared model's file
    try:
        onnx.save_model(model, str(out))
    except ValueError:  # over protobuf's 2 GiB inline (a model kept inline by a raised threshold)
        out.unlink(missing_ok=True)
        return False
    return True


def _rewire(
    p: Any, g: Any, int8: set[str], selected: set[str], weight_only: set[str], quantized_outputs: Sequence[str]
) -> tuple[set[str], list[str], list[tuple[Any, Any, str]]] | None:
    """Point the inputs of every node of the base graph ``g`` outside ``int8`` where
    ``quantize_model(int8)`` points them (``p``: the prepared graph). Returns (Q/DQ nodes that go
    whatever reads them: a bias DQ's output has the float bias's name; initializers of ``p`` the
    candidate reads again; (node, its weight DQ, weight name) of the weight-only fallbacks), or None
    where a weight-only fallback has no INT8 weight to keep."""
    p_nodes = {n.name: n for n in p.node}
    p_inits = {i.name: i for i in p.initializer}
    p_producer = {o: n for n in p.node for o in n.output}
    producer = {o: n for n in g.node for o in n.output}
    act_dq: dict[str, str] = {}  # activation -> the output of the DQ of its Q/DQ pair
    for n in g.node:
        q = producer.get(n.input[0]) if n.op_type == _DQ and n.name not in p_nodes else None
        if q is not None and q.op_type == _Q:
            act_dq[q.input[0]] = n.output[0]
    drop: set[str] = set()
    floats: list[str] = []
    kept_weights: list[tuple[Any, Any, str]] = []
    for node in g.node:
        original = p_nodes.get(node.name)
        if original is None or node.name in int8:  # ORT's own nodes; INT8 nodes as the base has them
            continue
        for slot, name in enumerate(original.input):
            if not name:
                continue
            if name in p_inits:
                if node.name not in selected:  # never INT8: float, or weight-only by rule, as in the base
                    continue
                dq = producer.get(node.input[slot])
                dq = dq if dq is not None and dq.op_type == _DQ else None
                if slot == 1 and node.name in weight_only and p_inits[name].data_type == FLOAT:
                    if dq is None:
                        return None
                    kept_weights.append((node, dq, name))
                    continue
                if dq is not None:
                    drop.add(dq.name)
                node.input[slot] = name
                floats.append(name)
            else:
                # Float consumers read the float tensor, except an output the profile quantizes on
                # purpose of a node still INT8 (ptq._float_inputs_for_float_nodes).
                origin = p_producer.get(name)
                keep = (
                    name in act_dq
                    and origin is not None
                    and origin.name in int8
                    and origin.op_type in quantized_outputs
                )
                node.input[slot] = act_dq[name] if keep else name
    return drop, floats, kept_weights


def _drop_unread_qdq(g: Any, drop: set[str], originals: set[str]) -> list[Any]:
    """Remove the Q/DQ nodes named in ``drop``, then every Q/DQ node the quantizer added whose
    outputs nothing reads any more (a DQ first, then its Q); returns the removed nodes."""
    nodes = list(g.node)
    gone = {i for i, n in enumerate(nodes) if n.name in drop and n.name not in originals}
    while True:
        read = {i for k, n in enumerate(nodes) if k not in gone for i in n.input} | {o.name for o in g.output}
        dead = {
            k
            for k, n in enumerate(nodes)
            if k not in gone
            and n.op_type in (_Q, _DQ)
            and n.name not in originals
            and not any(o in read for o in n.output)
        }
        if not dead:
            break
        gone |= dead
    removed = [nodes[k] for k in sorted(gone)]
    kept = [n for k, n in enumerate(nodes) if k not in gone]
    del g.node[:]
    g.node.extend(kept)
    return removed


def _drop_unread_initializers(g: Any, candidates: set[str]) -> None:
    """Remove the initializers among ``candidates`` (inputs of removed Q/DQ nodes) no node reads:
    the base went through ORT's own cleaning, so nothing else is unread."""
    read = {i for n in g.node for i in n.input} | {o.name for o in g.output}
    gone = [i for i in g.initializer if i.name in candidates and i.name not in read]
    for i in gone:
        g.initializer.remove(i)


def _weight_only_axis(node: Any, ndim: int) -> int:
    """The channel axis ``ptq._weight_only`` quantizes a weight along."""
    if node.op_type == "Conv":
        return 0
    if node.op_type == "Gemm" and any(a.name == "transB" and a.i for a in node.attribute):
        return 0
    return ndim - 1


def _is_weight_only_form(onnx: Any, node: Any, dq: Any, weight: Any, inits: dict[str, Any], folder: Path) -> bool:
    """Whether the base's INT8 weight of ``node`` (read through ``dq``) is what ``ptq._weight_only``
    writes for the float ``weight``: int8, zero points 0, per channel along its axis, scale
    ``max|w| / 127`` (0 -> 1). ORT computes the same scale for symmetric per-channel int8
    (``(2 max|w|) / 254``, both rounded once to float32) and the same rounding, unless the profile
    bounds pairs (``--scheme``), reduces the range or ORT enlarged the scale for an int32 bias."""
    numpy_helper = onnx.numpy_helper
    if len(dq.input) < 3 or not all(i in inits for i in dq.input[:3]):
        return False
    q, scale_init, zp_init = (inits[i] for i in dq.input[:3])
    axis = next((a.i for a in dq.attribute if a.name == "axis"), None)
    if q.data_type != _INT8 or zp_init.data_type != _INT8 or {a.name for a in dq.attribute} - {"axis"}:
        return False
    if dq.domain not in ("", "ai.onnx"):
        return False
    w = numpy_helper.to_array(weight, base_dir=str(folder))
    if axis is None or axis % max(w.ndim, 1) != _weight_only_axis(node, w.ndim):
        return False
    zp = numpy_helper.to_array(zp_init, base_dir=str(folder))
    scale = numpy_helper.to_array(scale_init, base_dir=str(folder))
    reduce = tuple(a for a in range(w.ndim) if a != axis % w.ndim)
    expected = (np.abs(w).max(axis=reduce) / 127.0).astype(np.float32)
    expected[expected == 0] = 1.0
    return (
        zp.shape == expected.shape
        and not zp.any()
        and scale.dtype == np.float32
        and scale.shape == expected.shape
        and bool(np.array_equal(scale, expected))
    )


def _rename_as_weight_only(node: Any, dq: Any, weight: str, inits: dict[str, Any]) -> None:
    """Give the base's weight DQ of ``node`` the names ``ptq._weight_only`` writes: the DQ outputs
    the float weight's name, its initializers are ``<weight>_weight_only_{quantized,scale,zero_point}``
    (renamed in the graph only: an external tensor keeps its file, offset and length)."""
    base = f"{weight}_weight_only"
    new = [f"{base}_quantized", f"{base}_scale", f"{base}_zero_point"]
    for old, name in zip(list(dq.input[:3]), new):
        inits[old].name = name
    del dq.input[:]
    dq.input.extend(new)
    dq.output[0] = weight
    dq.name = f"{base}_DequantizeLinear"
    node.input[1] = weight
