"""Graph fusions ONNX Runtime's own optimizer misses on our exported graphs (CPU/CUDA only).

ORT's session-level GeluFusion matches the erf GELU only. Our transformer MLPs use the tanh
approximation (``F.gelu(approximate="tanh")``), which the exporter writes as eight elementwise
ops — Pow, Mul, Add, Mul, Tanh, Add, Mul, Mul — each a full pass over a [B, L, 4·D] tensor.
``fuse_fast_gelu`` replaces each such chain with one ``com.microsoft.FastGelu`` (the same
formula, one vectorised pass). Measured on the demo masked generator (batch 8, 1 thread, ORT
1.32, AVX512-VNNI): the four GELUs fall from 1.5 ms to 0.54 ms per forward, FP32 11.7 -> 10.7 ms,
INT8 7.4 -> 6.4 ms; outputs move by < 1e-5.

``rewrite_mish`` writes Mish (x·tanh(softplus(x)): matcha-tts's ResNet blocks) over the logistic
function in standard ops, because ORT's CPU ``Softplus`` is a scalar loop; it is applied under the
same rule as the contrib fusions.

Contrib ops run only on ORT's CPU and CUDA providers: a graph meant for TensorRT, NNAPI, CoreML
or QNN must stay standard ONNX (those would fall back to the CPU for every fused node), so the
callers apply this for CPU/CUDA sessions and the ``cpu`` quantize profile only.

``graph_changes(providers)`` is the one rule for what edgekit changes in a graph for a provider
list: ``OrtRuntime`` applies it in memory to the bundle's models, ``edgekit build`` bakes it into
the engine file it ships for an ORT target (so an app's plain session gets the same graph), and
says in the engine entry which session options the file cannot carry.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from edgekit._deps import require

CONTRIB_DOMAIN = "com.microsoft"
# Execution providers that implement com.microsoft.FastGelu.
FUSION_PROVIDERS: frozenset[str] = frozenset({"CPUExecutionProvider", "CUDAExecutionProvider"})
# ORT fusions that make the graph slower on its CPU provider. SkipLayerNormFusion: ORT 1.32's CPU
# SkipLayerNormalization took 0.34 ms per call on the demo masked generator (batch 8) where the
# LayerNormalization + Add it replaces took 0.07 ms: FP32 forwards 2-3 % faster without it
# (masked batch 2 and 8, flow; AR unchanged).
# GatherSliceToSplitFusion (an "extended" optimizer): an AR step's stacked KV-cache input
# [n_layer, B, H, L, hd], read layer by layer (``k_cache[layer]``), becomes one Split that makes every
# layer's slice at the start of the forward, all of them alive at once, where each Gather makes its
# slice just before its layer reads it. ar-gpt-medium (24 layers, 256 slots; ORT 1.32, AMD EPYC,
# 2 threads): a decode's peak RSS 542 -> 446 MB in INT8, 1,404 -> 1,353 MB in FP32, the same tokens,
# per decode no slower (5.85 -> 5.57 s INT8, 13.4 -> 12.7 s FP32, interleaved). No other demo graph
# has the pattern, and the AR step edgekit exports now (the "layers" form of spec.AR_CACHE_IO: each
# layer's cache its own input, read in place) has no stacked cache to gather from: the rule stays
# for bundles exported in the stacked "loop" form.
CPU_DISABLED_OPTIMIZERS: tuple[str, ...] = ("SkipLayerNormFusion", "GatherSliceToSplitFusion")
# The session config entry that switches ORT optimizers off by name (comma-separated), from every
# language binding (C/C++ AddConfigEntry, Java addConfigEntry, C# AddSessionConfigEntry); the
# Python ``disabled_optimizers`` argument does the same. A file cannot carry it.
DISABLE_OPTIMIZERS_ENTRY = "optimization.disable_specified_optimizers"


@dataclass(frozen=True)
class GraphChanges:
    """What edgekit changes in a graph for ONNX Runtime on one provider list."""

    # fuse_fast_gelu (and any later contrib fusion): only when every provider implements contrib ops.
    contrib_fusions: bool
    # ORT graph transformers switched off by name (slower on the providers that would run them).
    disabled_optimizers: tuple[str, ...]


def graph_changes(providers: Sequence[str]) -> GraphChanges:
    """The changes for a session over ``providers`` (a CPU-only session: the contrib fusions and
    CPU_DISABLED_OPTIMIZERS; CPU + CUDA: the fusions; any other provider listed: none, the graph
    stays standard ONNX for it)."""
    providers = list(providers)
    return GraphChanges(
        contrib_fusions=bool(providers) and set(providers) <= FUSION_PROVIDERS,
        disabled_optimizers=CPU_DISABLED_OPTIMIZERS if providers == ["CPUExecutionProvider"] else (),
    )


def apply_contrib_fusions(model: Any) -> dict[str, int]:
    """Every contrib fusion on ``model`` (an ``onnx.ModelProto``, edited in place), and the Mish
    rewrite (standard ops, applied under the same rule: a CPU/CUDA session): {fusion: count} of
    those that matched (empty: the graph is unchanged)."""
    ops = {n.op_type for n in model.graph.node}
    found: dict[str, int] = {}
    if "Tanh" in ops:
        found["FastGelu"] = fuse_fast_gelu(model)
    if ops & {"Softplus", "Mish"}:
        found["Mish"] = rewrite_mish(model)
    return {k: v for k, v in found.items() if v}


def engine_session_options(recorded: Mapping[str, Any]) -> dict[str, Any]:
    """``OrtOptions`` fields from a built engine's ``session_options`` entry (``builder.ort``
    records it; the manifest schema checks the level): the level and config entries the file is
    loaded with, and nothing changed in memory (the file carries the changes)."""
    entries = recorded.get("config_entries") or {}
    return {
        "graph_optimization": str(recorded.get("graph_optimization_level") or "all"),
        "contrib_fusions": False,
        "disabled_optimizers": (),
        "session_config": tuple((str(k), str(v)) for k, v in entries.items()),
    }


_SQRT_2_OVER_PI = math.sqrt(2.0 / math.pi)
_TOL = 1e-4


def fuse_fast_gelu(model: Any) -> int:
    """Rewrite every tanh-GELU chain of ``model`` (an ``onnx.ModelProto``, edited in place) into
    ``com.microsoft.FastGelu``; returns how many were fused.

    Matches x·(0.5·(1 + tanh(√(2/π)·(x + 0.044715·x³)))) in any operand order of the commutative
    Mul/Add nodes, with the constants as initializers or Constant nodes. The FastGelu node keeps
    the chain's output name, so value_info (shapes) and consumers stay valid; the chain's
    intermediate tensors must have no other consumer (else it is left alone)."""
    onnx = require("onnx")
    graph = model.graph
    scalars = _scalar_constants(onnx, graph)
    producer = {out: node for node in graph.node for out in node.output}
    only_consumer = _sole_consumer(graph)

    def const_operand(node: Any, value: float) -> str | None:
        """The other input of binary ``node`` when one input is the scalar ``value``."""
        if node is None or len(node.input) != 2:
            return None
        a, b = node.input
        if _close(scalars.get(b), value):
            return a
        if _close(scalars.get(a), value):
            return b
        return None

    fused: list[tuple[list[Any], Any]] = []
    for tanh in [n for n in graph.node if n.op_type == "Tanh"]:
        scaled = producer.get(tanh.input[0])
        inner = const_operand(scaled if scaled is not None and scaled.op_type == "Mul" else None, _SQRT_2_OVER_PI)
        add_in = producer.get(inner) if inner else None
        if add_in is None or add_in.op_type != "Add":
            continue
        match = None
        for x, cubic in (tuple(add_in.input), tuple(reversed(add_in.input))):
            mul_c = producer.get(cubic)
            pow_name = const_operand(mul_c if mul_c is not None and mul_c.op_type == "Mul" else None, 0.044715)
            pow_node = producer.get(pow_name) if pow_name else None
            if (
                pow_node is not None
                and pow_node.op_type == "Pow"
                and pow_node.input[0] == x
                and _close(scalars.get(pow_node.input[1]), 3.0)
            ):
                match = (x, pow_node, mul_c)
                break
        if match is None:
            continue
        x, pow_node, mul_c = match
        add_one = only_consumer(tanh.output[0])
        if add_one is None or add_one.op_type != "Add" or const_operand(add_one, 1.0) != tanh.output[0]:
            continue
        half = only_consumer(add_one.output[0])
        if half is None or half.op_type != "Mul" or const_operand(half, 0.5) != add_one.output[0]:
            continue
        final = only_consumer(half.output[0])
        if final is None or final.op_type != "Mul" or set(final.input) != {x, half.output[0]}:
            continue
        chain = [pow_node, mul_c, add_in, scaled, tanh, add_one, half, final]
        # Every intermediate must feed only the chain (x itself is read by Pow, Add and the last Mul).
        if any(only_consumer(n.output[0]) is None for n in chain[:-1]):
            continue
        node = onnx.helper.make_node(
            "FastGelu", [x], [final.output[0]], name=f"{final.name}/FastGelu", domain=CONTRIB_DOMAIN
        )
        fused.append((chain, node))

    if not fused:
        return 0
    replace = {id(chain[-1]): node for chain, node in fused}
    drop = {id(n) for chain, _ in fused for n in chain[:-1]}
    nodes = [replace.get(id(n), n) for n in graph.node if id(n) not in drop]
    del graph.node[:]
    graph.node.extend(nodes)
    if not any(op.domain == CONTRIB_DOMAIN for op in model.opset_import):
        model.opset_import.append(onnx.helper.make_opsetid(CONTRIB_DOMAIN, 1))
    _drop_unused_initializers(graph)
    return len(fused)


# Mish's constant 2 (one initializer shared by every rewritten Mish).
_MISH_TWO = "edgekit_mish_two"


def rewrite_mish(model: Any) -> int:
    """Rewrite every Mish of ``model`` (an ``onnx.ModelProto``, edited in place), x·tanh(softplus(x))
    as ``Softplus -> Tanh -> Mul(x, ·)`` (torch's export of ``nn.Mish``, matcha-tts's ResNet
    blocks) or the opset-18 ``Mish`` op, into the same function over the logistic s = σ(x):
    tanh(softplus(x)) = ((1+eˣ)² - 1) / ((1+eˣ)² + 1) = s(2-s) / (2 - s(2-s)). ORT's CPU ``Sigmoid``,
    ``Sub``, ``Mul`` and ``Div`` are vectorised where its ``Softplus`` is one ``log1p(exp)`` per
    value: on a float32[2, 400, 1024] tensor, 2 threads, AMD EPYC (AVX-512), ORT 1.32, 1.57 ms
    against 7.91 ms (``benchmarks/elementwise_rewrites.py``), within 2.4e-6 of float64 Mish (the
    chain it replaces: 2.6e-6). Returns how many were rewritten; the last node keeps the Mish's
    output name, and a chain whose Softplus or Tanh output is read elsewhere, or whose input is
    known not to be float32, is left alone."""
    onnx = require("onnx")
    graph = model.graph
    sole = _sole_consumer(graph)
    # Tensors known to be other than float32 (an fp16 graph): the constant 2 is float32.
    other = {
        v.name
        for v in (*graph.input, *graph.value_info, *graph.output)
        if v.type.tensor_type.elem_type not in (0, onnx.TensorProto.FLOAT)
    }

    def only_consumer(name: str, op_type: str) -> Any:
        user = sole(name)
        return user if user is not None and user.op_type == op_type else None

    found: list[tuple[list[Any], str, str]] = []  # (nodes replaced, x, y)
    for node in graph.node:
        if node.input and node.input[0] in other:
            continue
        if node.op_type == "Mish" and node.domain in ("", "ai.onnx"):
            found.append(([node], node.input[0], node.output[0]))
        elif node.op_type == "Softplus":
            x = node.input[0]
            tanh = only_consumer(node.output[0], "Tanh")
            mul = only_consumer(tanh.output[0], "Mul") if tanh is not None else None
            if mul is not None and sorted(mul.input) == sorted([x, tanh.output[0]]):
                found.append(([node, tanh, mul], x, mul.output[0]))
    if not found:
        return 0
    make = onnx.helper.make_node
    replace: dict[int, list[Any]] = {}
    drop: set[int] = set()
    for i, (chain, x, y) in enumerate(found):
        p = f"{chain[-1].name or y}/MishSigmoid"
        t = [f"{p}/{n}_{i}" for n in ("s", "a", "n", "d", "t")]
        replace[id(chain[-1])] = [
            make("Sigmoid", [x], [t[0]], name=f"{p}/Sigmoid"),
            make("Sub", [_MISH_TWO, t[0]], [t[1]], name=f"{p}/Sub"),  # 2 - s
            make("Mul", [t[0], t[1]], [t[2]], name=f"{p}/Mul"),  # s(2 - s)
            make("Sub", [_MISH_TWO, t[2]], [t[3]], name=f"{p}/Sub_1"),  # 2 - s(2 - s)
            make("Div", [t[2], t[3]], [t[4]], name=f"{p}/Div"),  # tanh(softplus(x))
            make("Mul", [x, t[4]], [y], name=f"{p}/Mul_1"),
        ]
        drop |= {id(n) for n in chain[:-1]}
    nodes = [m for n in graph.node if id(n) not in drop for m in replace.get(id(n), [n])]
    del graph.node[:]
    graph.node.extend(nodes)
    if not any(i.name == _MISH_TWO for i in graph.initializer):
        graph.initializer.append(onnx.helper.make_tensor(_MISH_TWO, onnx.TensorProto.FLOAT, [], [2.0]))
    return len(found)


def _sole_consumer(graph: Any) -> Callable[[str], Any]:
    """For ``graph`` (an ``onnx.GraphProto``): tensor name -> the one node that reads it, or None
    where more than one (or none) does or it is a graph output (a fusion must not remove it)."""
    consumers: dict[str, list[Any]] = {}
    for node in graph.node:
        for name in node.input:
            consumers.setdefault(name, []).append(node)
    outputs = {o.name for o in graph.output}

    def sole(name: str) -> Any:
        users = consumers.get(name, [])
        return users[0] if len(users) == 1 and name not in outputs else None

    return sole


def _close(value: float | None, want: float) -> bool:
    return value is not None and abs(value - want) <= _TOL * max(1.0, abs(want))


def _scalar_constants(onnx: Any, graph: Any) -> dict[str, float]:
    """Tensor name -> value of every single-element float constant (initializer or Constant node)."""
    numpy_helper = onnx.numpy_helper
    out: dict[str, float] = {}
    for init in graph.initializer:
        if _numel(init.dims) == 1 and not init.external_data:
            out[init.name] = float(numpy_helper.to_array(init).reshape(()))
    for node in graph.node:
        if node.op_type == "Constant":
            attr = next((a for a in node.attribute if a.name in ("value", "value_float")), None)
            if attr is None:
                continue
            if attr.name == "value_float":
                out[node.output[0]] = float(attr.f)
            elif _numel(attr.t.dims) == 1:
                out[node.output[0]] = float(numpy_helper.to_array(attr.t).reshape(()))
    return out


def _numel(dims: Any) -> int:
    n = 1
    for d in dims:
        n *= d
    return n


def _drop_unused_initializers(graph: Any) -> None:
    used = {i for node in graph.node for i in node.input} | {o.name for o in graph.output}
    keep = [i for i in graph.initializer if i.name in used]
    if len(keep) != len(graph.initializer):
        del graph.initializer[:]
        graph.initializer.extend(keep)
