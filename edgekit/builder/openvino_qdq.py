"""The QDQ graph rewritten for OpenVINO's CPU fusions, its numerics unchanged: each activation's
QuantizeLinear/DequantizeLinear pair moved ahead of the Reshapes between it and the op that
produces the activation (``hoist_activation_qdq``; the ``ir-hoisted`` route of
``builder.openvino_routes`` is the IR of the rewritten graph).

Why: onnxruntime's QDQ pre-processing turns each 3-D MatMul into Reshape(2-D) -> Gemm ->
Reshape(3-D), so the activation Q/DQ in front of an INT8 Gemm sits after a Reshape. OpenVINO
turns the pair into a FakeQuantize and fuses it into the op before it (the LayerNorm's affine
snippet, an INT8 FullyConnected with its GELU) only when nothing stands between them; behind the
Reshape it runs as a snippet of its own (4 % of the masked demo's INT8 forward on a VNNI Xeon,
OpenVINO 2026.4). A per-tensor Q/DQ is elementwise, so ``Q(Reshape(x)) == Reshape(Q(x))``
exactly: the rewritten graph computes the same values bit for bit.

Two placements measured slower and are left alone:

- a Q whose activation comes out of a Transpose (the attention's output): OpenVINO then fuses the
  Q into the attention snippet and runs the Transpose on its own (+28 us per block against the
  7 us the Q snippet cost);
- a Q whose activation a float GEMM computes (through elementwise ops such as its GELU: a budget
  fallback): OpenVINO fuses the Q into that f32 FullyConnected and reorders its output to u8
  (177 us against the 24 us Q snippet).

``onnx`` is imported lazily (the graph is read through ``runtimes.onnx_file``).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from edgekit._deps import require
from edgekit.runtimes.onnx_file import load_onnx

# Ops the pair moves across: pure data movement, which commutes with an elementwise Q/DQ.
MOVABLE_OPS: frozenset[str] = frozenset({"Reshape"})
# Elementwise ops (and reshapes) through which an activation is still "computed by" the GEMM before them.
# fmt: off
ELEMENTWISE_OPS: frozenset[str] = frozenset(
    {
        "Abs", "Add", "Cast", "Clip", "Div", "Elu", "Erf", "Exp", "Gelu", "HardSigmoid", "HardSwish",
        "LeakyRelu", "Max", "Min", "Mish", "Mul", "Neg", "Pow", "Relu", "Reshape", "Sigmoid", "Softplus",
        "Sqrt", "Sub", "Tanh",
    }
)
# fmt: on
GEMM_OPS: frozenset[str] = frozenset({"Gemm", "MatMul", "Conv", "ConvTranspose"})


def _per_tensor(node: Any, constants: dict[str, Any]) -> bool:
    """Whether the Q/DQ ``node`` has one scale and zero point, both initializers."""
    for name in node.input[1:3]:
        if name and (name not in constants or _size(constants[name]) != 1):
            return False
    return len(node.input) >= 2 and bool(node.input[1])


def _size(tensor: Any) -> int:
    n = 1
    for d in tensor.dims:
        n *= d
    return n


def _from_float_gemm(tensor: str, producers: dict[str, Any], constants: dict[str, Any]) -> bool:
    """Whether ``tensor`` is computed, through elementwise ops only, by a GEMM whose weight is not
    an INT8 weight (no DequantizeLinear before it): a float fallback, or a MatMul of activations."""
    stack, seen = [tensor], set()
    while stack:
        name = stack.pop()
        node = producers.get(name)
        if name in seen or node is None:
            continue
        seen.add(name)
        if node.op_type in GEMM_OPS:
            weight = producers.get(node.input[1]) if len(node.input) > 1 else None
            if weight is None or weight.op_type != "DequantizeLinear":
                return True
        elif node.op_type in ELEMENTWISE_OPS:
            stack.extend(i for i in node.input if i and i not in constants)
    return False


def hoist_activation_qdq(model: Any) -> list[str]:
    """Move every per-tensor activation Q/DQ pair of ``model`` (an ``onnx.ModelProto``, rewritten
    in place) ahead of the Reshapes before it, next to the op that produces the activation, where
    the module says it pays; the names of the QuantizeLinear nodes moved. Initializers are not
    touched (a graph read without its side file is rewritten the same)."""
    graph = model.graph
    constants = {t.name: t for t in graph.initializer}
    outputs = {o.name for o in graph.output}
    producers = {o: n for n in graph.node for o in n.output}
    consumers: dict[str, list[Any]] = defaultdict(list)
    for node in graph.node:
        for name in node.input:
            consumers[name].append(node)

    def single(name: str) -> Any | None:
        users = consumers.get(name, [])
        return users[0] if len(users) == 1 and name not in outputs else None

    moves: list[tuple[Any, Any, list[Any], str]] = []  # (Q, DQ, the Reshapes bottom-up, the tensor Q will read)
    for q in graph.node:
        if q.op_type != "QuantizeLinear" or not _per_tensor(q, constants):
            continue
        dq = single(q.output[0])
        if dq is None or dq.op_type != "DequantizeLinear" or not _per_tensor(dq, constants):
            continue
        chain, tensor = [], q.input[0]
        while (
            (node := producers.get(tensor)) is not None and node.op_type in MOVABLE_OPS and single(tensor) is not None
        ):
            chain.append(node)
            tensor = node.input[0]
        top = producers.get(tensor)
        if not chain or top is None or single(tensor) is None:
            continue  # nothing to cross, a graph input, or an activation other ops read too
        if top.op_type == "Transpose" or _from_float_gemm(tensor, producers, constants):
            continue  # the two placements the module docstring says measured slower
        moves.append((q, dq, chain, tensor))

    for q, dq, chain, tensor in moves:
        top, bottom = chain[-1], chain[0]
        final = dq.output[0]  # what the Gemm (and any other reader) reads: now the Reshapes' output
        moved = f"{final}_before_reshape"
        q.input[0] = tensor
        dq.output[0] = moved
        top.input[0] = moved
        bottom.output[0] = final
    if moves:
        _place_before(graph, [(q, dq, chain[-1]) for q, dq, chain, _ in moves])
    return [q.name for q, _, _, _ in moves]


def _place_before(graph: Any, moved: Iterable[tuple[Any, Any, Any]]) -> None:
    """Reorder ``graph.node`` so each moved (Q, DQ) pair comes right before the Reshape that now
    reads it (the graph stays topologically sorted: the pair reads what that Reshape read)."""
    before = {id(top): (q, dq) for q, dq, top in moved}
    pairs = {id(n) for q, dq in before.values() for n in (q, dq)}
    order: list[Any] = []
    for node in graph.node:
        if id(node) in pairs:
            continue
        if id(node) in before:
            order.extend(before[id(node)])
        order.append(node)
    copies = [type(n)() for n in order]
    for copy, node in zip(copies, order, strict=True):
        copy.CopyFrom(node)
    del graph.node[:]
    graph.node.extend(copies)


def write_hoisted(source: Path, destination: Path) -> list[str]:
    """Write ``source`` (an ONNX file) rewritten by ``hoist_activation_qdq`` to ``destination``
    (its graph only: weights in a side file stay in the source's, so read it with that file
    beside it, ``_sidefiles.side_files_beside``); the QuantizeLinear nodes moved, [] when none
    was (nothing is written then)."""
    onnx = require("onnx")
    model = load_onnx(source, "the model to rewrite")
    moved = hoist_activation_qdq(model)
    if moved:
        onnx.save_model(model, str(destination))
    return moved


__all__ = ["ELEMENTWISE_OPS", "MOVABLE_OPS", "hoist_activation_qdq", "write_hoisted"]
