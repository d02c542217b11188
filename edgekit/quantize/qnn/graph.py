"""The QNN graph tools of the qnn profile: the HTP's preprocessing (LayerNorm/GELU fusions, Gemm as
MatMul + Add so a Linear's weight can go to 16 bit), onnxruntime's QNN QDQ quantizer with 16-bit
promotions, which tensors each promotion takes to 16 bit with it, and the bits the written graph holds."""

from __future__ import annotations

import shutil
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from edgekit._deps import require
from edgekit.errors import EdgekitError
from edgekit.quantize.config import METHODS
from edgekit.quantize.quiet import quiet_ort_logging
from edgekit.runtimes.onnx_file import needs_side_file, save_onnx


def prepare_qnn(fp32_path: Path, out: Path) -> Path:
    """``qnn_preprocess_model`` (fuses LayerNorm/GELU patterns into the single ops the HTP has)
    into ``out``, or a copy when it changed nothing; then every Gemm with a constant weight as
    MatMul + Add (``gemm_as_matmul``)."""
    qnn = require("onnxruntime.quantization.execution_providers.qnn")
    big = needs_side_file(fp32_path)
    where = (
        dict(save_as_external_data=True, all_tensors_to_one_file=True, external_data_location=out.name + ".data")
        if big
        else {}
    )
    with quiet_ort_logging():
        changed = qnn.qnn_preprocess_model(str(fp32_path), str(out), **where)
    if not changed and big:
        # A copy with its own side file: a hard link to the bundle's weights would make onnx
        # refuse both files ("hardlink attack") while the link lives, and gemm_as_matmul reads it.
        save_onnx(require("onnx").load(str(fp32_path)), out, external=True)
    elif not changed:
        shutil.copyfile(fp32_path, out)
    gemm_as_matmul(out)
    return out


def gemm_as_matmul(path: Path) -> int:
    """Rewrite, in place, each Gemm (alpha = beta = 1, no transA) whose B is a constant as MatMul
    with the (transposed) weight plus Add of its bias: the HTP takes a MatMul weight at 16 bit
    (A16W16) and refuses a 16-bit Gemm weight, so only this way can the budget search promote
    a Linear layer's weight (torch exports Linear on a 2-D input as Gemm). Returns the count."""
    onnx = require("onnx")
    from onnx import helper, numpy_helper

    model = onnx.load(str(path))
    graph = model.graph
    inits = {i.name: i for i in graph.initializer}
    nodes, rewritten, replaced = [], 0, set()
    for node in graph.node:
        attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
        if (
            node.op_type != "Gemm"
            or len(node.input) < 2
            or node.input[1] not in inits
            or attrs.get("transA", 0)
            or attrs.get("alpha", 1.0) != 1.0
            or attrs.get("beta", 1.0) != 1.0
        ):
            nodes.append(node)
            continue
        w = numpy_helper.to_array(inits[node.input[1]])
        weight = f"{node.input[1]}_matmul"
        if node.input[1] not in replaced:  # two Gemms over one weight share one MatMul weight
            graph.initializer.append(
                numpy_helper.from_array(np.ascontiguousarray(w.T if attrs.get("transB", 0) else w), weight)
            )
        replaced.add(node.input[1])
        has_bias = len(node.input) > 2 and node.input[2]
        product = f"{node.output[0]}_matmul" if has_bias else node.output[0]
        nodes.append(helper.make_node("MatMul", [node.input[0], weight], [product], name=f"{node.name}_matmul"))
        if has_bias:
            nodes.append(helper.make_node("Add", [product, node.input[2]], [node.output[0]], name=f"{node.name}_bias"))
        rewritten += 1
    if rewritten:
        del graph.node[:]
        graph.node.extend(nodes)
        # The Gemm weights the MatMuls replaced: left in, every session over this graph and the
        # ones derived from it (calibration, the CPU simulation, the ranking) logged one
        # "Removing initializer" warning per weight per load, 847 lines on the flow demo.
        used = {name for n in graph.node for name in n.input} | {o.name for o in graph.output}
        for init in [i for i in graph.initializer if i.name in replaced and i.name not in used]:
            graph.initializer.remove(init)
        save_onnx(model, path)  # over the threshold (or 2 GiB) its weights go to a side file
    return rewritten


@dataclass(frozen=True)
class GraphFacts:
    """What the qnn profile asks of the prepared float graph, read in one load: the search asks
    for each candidate build and for the ranking (each question loaded the graph again).

    ``matmul_weights``: {constant weight of a MatMul: that node's activation input}, the weights
    the HTP takes at 16 bit (with a 16-bit activation: A16W16; it refused them on Gemm,
    LayerNorm and Conv). ``gather_tables``: {constant table of a Gather (an embedding): that
    Gather's output}; the output carries the table's quantization, so the two are promoted to
    16 bit together. ``two_d``: the 2-D MatMul weights, which take one scale per output column
    (axis 1; batched weights keep one scale per tensor). ``floats``: every float initializer
    (weights, biases, tables, scalars). ``conv_weights``: the constant Conv weights, one scale
    per output channel (axis 0; the HTP takes them at 8 bit only). ``tanh_outputs``: {a Tanh's
    input: its output}, promoted together (``with_tanh_outputs``). ``kinds``: {tensor: (its
    producer's op type, or "initializer" / "input"; its consumers' op types, sorted)}: the
    HTP's kernels are per op, so what it computes unlike QDQ in one block it does in the next."""

    matmul_weights: Mapping[str, str]
    gather_tables: Mapping[str, str]
    two_d: tuple[str, ...]
    floats: frozenset[str]
    conv_weights: tuple[str, ...] = ()
    tanh_outputs: Mapping[str, str] = field(default_factory=dict)
    kinds: Mapping[str, tuple[str, tuple[str, ...]]] = field(default_factory=dict)

    @classmethod
    def read(cls, model_path: Path) -> GraphFacts:
        onnx = require("onnx")
        model = onnx.load(str(model_path), load_external_data=False)
        inits = {i.name: i for i in model.graph.initializer}
        weights = {
            n.input[1]: n.input[0]
            for n in model.graph.node
            if n.op_type == "MatMul" and len(n.input) > 1 and n.input[1] in inits and n.input[0] not in inits
        }
        return cls(
            matmul_weights=weights,
            gather_tables={
                n.input[0]: n.output[0] for n in model.graph.node if n.op_type == "Gather" and n.input[0] in inits
            },
            two_d=tuple(w for w in weights if len(inits[w].dims) == 2),
            floats=frozenset(i.name for i in inits.values() if i.data_type == onnx.TensorProto.FLOAT),
            conv_weights=tuple(
                dict.fromkeys(
                    n.input[1]
                    for n in model.graph.node
                    if n.op_type == "Conv" and len(n.input) > 1 and n.input[1] in inits
                )
            ),
            tanh_outputs={n.input[0]: n.output[0] for n in model.graph.node if n.op_type == "Tanh"},
            kinds=_kinds(model.graph, inits),
        )


def _kinds(graph: Any, inits: Mapping[str, Any]) -> dict[str, tuple[str, tuple[str, ...]]]:
    """``GraphFacts.kinds`` of every tensor of ``graph``."""
    producer = {o: n.op_type for n in graph.node for o in n.output}
    consumers: dict[str, list[str]] = {}
    for n in graph.node:
        for i in n.input:
            consumers.setdefault(i, []).append(n.op_type)
    made = {t: "initializer" if t in inits else producer.get(t, "input") for t in {*producer, *consumers}}
    return {t: (p, tuple(sorted(consumers.get(t, ())))) for t, p in made.items()}


def with_tanh_outputs(names: Sequence[str], facts: GraphFacts) -> list[str]:
    """``names`` and the output of every Tanh whose input is among them. A Tanh's input at 16 bit
    with its output left to the quantizer gets a 16-bit Tanh whose output ORT converts back to
    8 bit before its consumer (the GELU's ``1 + tanh``), and the HTP backend computes that graph
    unlike its QDQ semantics: on the flow demo, one forward with the first GELU's tanh input at
    16 bit came out at 15.1 dB on the HTP backend against 24.1 in the CPU EP's simulation (9.1
    against 12.3 at the last step; the GELU's ``0.5 * (1 + tanh)`` read 0.5 below its value).
    With the Tanh's output at 16 bit too (its consumers follow, the convert comes after them)
    the two agreed within 0.1 dB. The same ops cut out of the graph, or rebuilt on their own,
    computed right on the HTP backend: the fault needs the graph around it, so the rule is on
    the tensors, not a numeric model of it."""
    out = list(names)
    out += [facts.tanh_outputs[t] for t in names if t in facts.tanh_outputs]
    return list(dict.fromkeys(out))


def promotion_ties(model_path: Path, activations: Sequence[str], facts: GraphFacts) -> dict[str, frozenset[str]]:
    """{candidate: the tensors that go to 16 bit when it alone is promoted (itself included)}, for
    every activation in ``activations`` and every MatMul weight and Gather table of ``facts``.

    onnxruntime's QNN quantizer (``MixedPrecisionTensorQuantOverridesFixer``) gives a node one
    type on its inputs and outputs: a tensor at 16 bit puts the other outputs of its producer and
    the outputs of every consumer at 16 bit as well (inputs of those nodes get a convert instead);
    a Tanh's input takes the Tanh's output along (``with_tanh_outputs``).
    A MatMul weight takes its activation input with it (A16W16), and a Gather table its output
    (``quantize_qnn_model``). On the flow demo, 85 tensors asked gave 126 at 16 bit: a Split's
    outputs are one (the adaLN chunks), and a residual sum takes its LayerNorm and next sum along."""
    onnx = require("onnx")
    model = onnx.load(str(model_path), load_external_data=False)
    acts = set(activations)
    producer = {o: n for n in model.graph.node for o in n.output}
    consumers: dict[str, list[Any]] = {}
    for node in model.graph.node:
        for i in node.input:
            consumers.setdefault(i, []).append(node)

    def one(tensor: str) -> set[str]:
        out = {tensor}
        if tensor in producer:
            out.update(producer[tensor].output)
        for node in consumers.get(tensor, []):
            out.update(node.output)
        return out & acts

    def hop(tensor: str) -> set[str]:  # a Tanh's input takes its output along (``with_tanh_outputs``)
        return set().union(*(one(t) for t in with_tanh_outputs([tensor], facts)))

    gathered = {out: table for table, out in facts.gather_tables.items()}
    ties = {a: frozenset(hop(a) | ({gathered[a]} if a in gathered else set())) for a in activations}
    ties |= {w: frozenset(hop(a) | {w}) for w, a in facts.matmul_weights.items() if a in acts}
    ties |= {t: frozenset(hop(out) | {t}) for t, out in facts.gather_tables.items() if out in acts}
    return ties


def matmul_weights(model_path: Path) -> dict[str, str]:
    """``GraphFacts.matmul_weights`` of the graph at ``model_path``."""
    return dict(GraphFacts.read(model_path).matmul_weights)


def gather_tables(model_path: Path) -> dict[str, str]:
    """``GraphFacts.gather_tables`` of the graph at ``model_path``."""
    return dict(GraphFacts.read(model_path).gather_tables)


def activation_bits(qdq_model: Path, tensors: Sequence[str]) -> dict[str, int]:
    """{activation tensor: 8 or 16}, read from the zero-point type of the QuantizeLinear that
    quantizes it in ``qdq_model``: what the graph holds, whatever was asked (ORT ties some
    tensors' types to a neighbour's, and adds 8<->16 converts)."""
    onnx = require("onnx")
    model = onnx.load(str(qdq_model), load_external_data=False)
    inits = {i.name: i for i in model.graph.initializer}
    wanted, bits = set(tensors), {}
    wide = (onnx.TensorProto.UINT16, onnx.TensorProto.INT16)
    outputs = {o.name for o in model.graph.output}
    for node in model.graph.node:
        name = float_name(node.input[0], outputs) if node.op_type == "QuantizeLinear" else None
        if name in wanted and name not in bits and len(node.input) > 2 and node.input[2] in inits:
            bits[name] = 16 if inits[node.input[2]].data_type in wide else 8
    return bits


def time_angle_tensors(model_path: Path, time_input: str) -> list[str]:
    """The sinusoidal time embedding's angle: the tensors computed from ``time_input`` (and
    constants) alone before any Sin/Cos, and the float constants they read (the frequency table).
    At 8 bits per tensor the table's step is 1/255 of its largest frequency, so the geometric
    tail of small frequencies rounds to 0; the angle t·ω spans [0, ω_max]. On the flow demo, every
    activation and MatMul weight at 16 bit still left 23.9 dB per forward with this table at 8
    bit, 48.2 dB with it at 16. Their own 8-bit SQNR is high (energy sits in the large entries),
    so no SQNR ranking picks them: the qnn profile puts them at 16 bit by rule, as the cpu
    profile keeps the time embedding float."""
    onnx = require("onnx")
    model = onnx.load(str(model_path), load_external_data=False)
    floats = {i.name for i in model.graph.initializer if i.data_type == onnx.TensorProto.FLOAT}
    constant = {i.name for i in model.graph.initializer}
    angle, out = {time_input}, [time_input]
    for node in model.graph.node:  # topological order
        live = [i for i in node.input if i and i not in constant]
        if node.op_type == "Constant" or not live:
            constant.update(node.output)
        elif node.op_type not in ("Sin", "Cos") and all(i in angle for i in live):
            angle.update(node.output)
            out.extend([*node.output, *(i for i in node.input if i in floats)])
    return list(dict.fromkeys(out))


def quantize_qnn_model(
    prepared: Path,
    out: Path,
    reader: Any,
    promoted: Sequence[str] = (),
    method: str = "minmax",
    all_activations_16bit: bool = False,
    per_channel: bool = True,
    facts: GraphFacts | None = None,
) -> Path:
    """Every op of ``prepared`` QDQ-quantized by the QNN rules (uint8 activations), the tensors in
    ``promoted`` at uint16: activations, and MatMul weights (whose activation input then goes to
    uint16 too: the HTP has A16W16, not A8W16).
    ``per_channel``: every 8-bit MatMul weight as int8, symmetric, one scale per output column,
    and every Conv weight per output channel (what the HTP's per-channel weights take); else uint8
    per tensor, where one scale costs the small columns their bits (masked demo, all 8-bit on the
    HTP backend: top-1 0.869 per tensor, 0.903 per channel). The flow demo's Conv weights, which
    cannot go to 16 bit, were the largest error left once the activations were: the float
    constants' floor per forward rose from 43.3 to 45.2 dB with them per channel. The HTP backend
    runs both forms without CPU fallback (onnxruntime-qnn 2.7; an earlier build left per-channel
    nodes to the CPU EP).
    ``all_activations_16bit``: uint16 as the default activation type rather than one override per
    tensor. The default type also widens constants no override names (on the demo flow, every
    activation overridden left 17.4 dB, the default type 36.5 dB: the sinusoid's frequency table,
    now 16-bit by rule through ``time_angle_tensors``).
    ``facts``: ``prepared``'s ``GraphFacts`` when the caller has them (else read here)."""
    quant = require("onnxruntime.quantization")
    qnn = require("onnxruntime.quantization.execution_providers.qnn")

    facts = facts or GraphFacts.read(prepared)
    weights, tables = facts.matmul_weights, facts.gather_tables
    if all_activations_16bit:
        promoted = [w for w in promoted if w in weights or w in tables]
    # A Gather's output takes its table's type (ORT ties them): promoting the output alone was
    # silently dropped, and the flow demo's token embedding stayed 8-bit with every other tensor
    # at 16 (17.5 dB against 49.9 with it), so promoting either promotes both.
    gathered = {out: table for table, out in tables.items()}
    names = list(promoted) + [weights[w] for w in promoted if w in weights]
    names += [gathered[t] for t in promoted if t in gathered] + [tables[t] for t in promoted if t in tables]
    names = with_tanh_outputs(names, facts)
    overrides: dict[str, list[dict[str, Any]]] = {
        name: [{"quant_type": quant.QuantType.QUInt16}] for name in dict.fromkeys(names)
    }
    if per_channel:
        for weight in facts.two_d:
            if weight not in overrides:
                overrides[weight] = [{"quant_type": quant.QuantType.QInt8, "symmetric": True, "axis": 1}]
        for weight in facts.conv_weights:  # [out, in/groups, k...]: one scale per output channel
            if weight not in overrides:
                overrides[weight] = [{"quant_type": quant.QuantType.QInt8, "symmetric": True, "axis": 0}]
    reader.rewind()
    try:
        with quiet_ort_logging():
            config = qnn.get_qnn_qdq_config(
                str(prepared),
                reader,
                calibrate_method=getattr(quant.CalibrationMethod, METHODS[method]),
                activation_type=quant.QuantType.QUInt16 if all_activations_16bit else quant.QuantType.QUInt8,
                weight_type=quant.QuantType.QUInt8,
                init_overrides=overrides or None,
            )
            reader.rewind()
            quant.quantize(str(prepared), str(out), config)
    except (ValueError, RuntimeError, KeyError) as exc:
        raise EdgekitError(
            f"onnxruntime's QNN quantizer failed on {prepared.name}: {str(exc).splitlines()[0][:300]}",
            hint="try --method minmax; `edgekit lint BUNDLE --target snapdragon-8-gen-3` shows what the HTP refuses",
        ) from None
    return out


def activation_tensors(qdq_model: Path) -> list[str]:
    """The activation tensors a QDQ model quantizes (inputs of its QuantizeLinear nodes that are
    not constants), in graph order: the candidates for 16-bit promotion."""
    onnx = require("onnx")
    model = onnx.load(str(qdq_model), load_external_data=False)
    inits = {i.name for i in model.graph.initializer}
    producers = {o: n for n in model.graph.node for o in n.output}
    outputs = {o.name for o in model.graph.output}
    seen, out = set(), []
    for node in model.graph.node:
        if node.op_type != "QuantizeLinear":
            continue
        src = producers.get(node.input[0])
        name = float_name(node.input[0], outputs)
        # A Q reading a DQ output is a 8<->16-bit convert ORT added, not a tensor of the model.
        if name in inits or name in seen or (src is not None and src.op_type in ("DequantizeLinear", "Constant")):
            continue
        seen.add(name)
        out.append(name)
    return out


def float_name(name: str, outputs: set[str]) -> str:
    """The float graph's name of a tensor the QDQ graph quantizes. ORT renames a graph output X
    to X_QuantizeLinear_Input so that its DequantizeLinear can write X: under the new name an
    override (which names float-graph tensors) never reached it, and the masked model's logits
    could not be promoted."""
    suffix = "_QuantizeLinear_Input"
    return name[: -len(suffix)] if name.endswith(suffix) and name[: -len(suffix)] in outputs else name


def producer_labels(prepared: Path, labels: Mapping[str, str]) -> dict[str, str]:
    """tensor -> 'module (op)' of the node producing it (graph inputs: 'input')."""
    onnx = require("onnx")
    model = onnx.load(str(prepared), load_external_data=False)
    out = {i.name: f"graph input {i.name}" for i in model.graph.input}
    for node in model.graph.node:
        for o in node.output:
            out[o] = f"{labels.get(node.name, node.name)} ({node.op_type})"
    return out
