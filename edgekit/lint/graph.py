"""Rules checked on one ONNX model: static IO dims, random and data-dependent ops, TopK, opset,
op support per target and model size. ``onnx`` is imported lazily."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from edgekit._sidefiles import model_bytes
from edgekit.lint.findings import Finding, sort_findings
from edgekit.lint.mobile import mobile_ep_findings
from edgekit.lint.openvino import openvino_findings
from edgekit.lint.ops import (
    DATA_DEPENDENT_SHAPE_OPS,
    DEFAULT_DOMAINS,
    RANDOM_OPS,
    constant_tensors,
    node_names,
    nodes_by_op,
    shown_names,
    walk_nodes,
)
from edgekit.lint.qnn import qnn_findings
from edgekit.lint.trt import trt_qdq_findings, trt_support_findings
from edgekit.runtimes.onnx_file import load_onnx
from edgekit.targets import Target, load_target

# onnx.TensorProto element types (numbers, so this module imports onnx lazily).
_INT8, _UINT8 = 3, 2

# (model file, its nodes, target, artifact name) -> findings
OpSupportRule = Callable[[Path, Sequence[Any], Target, str], list[Finding]]
# Op support per source a target's `lint.supported_ops` names (targets.SUPPORTED_OPS_SOURCES).
OP_SUPPORT: dict[str, OpSupportRule] = {
    "ort": lambda path, nodes, target, name: [],  # the CPU EP runs every standard op
    "tensorrt": lambda path, nodes, target, name: trt_support_findings(nodes, name),
    "nnapi": lambda path, nodes, target, name: mobile_ep_findings(path, target, name),
    "coreml": lambda path, nodes, target, name: mobile_ep_findings(path, target, name),
    "openvino": lambda path, nodes, target, name: openvino_findings(path, target, name),
    "qnn": lambda path, nodes, target, name: qnn_findings(path, target, name),
}


@dataclass(frozen=True)
class NoLint:
    why: str  # why a runtime has no graph to lint


# Per runtime name (runtimes.registry): the op-support sources its graphs may be checked against
# (a target's `lint.supported_ops` is one of them for the runtime it builds for).
RUNTIME_LINT: dict[str, tuple[str, ...] | NoLint] = {
    "ort": ("ort", "nnapi", "coreml"),  # the CPU EP, or the mobile EPs an Android/iOS build adds
    "trt": ("tensorrt",),
    "openvino": ("openvino",),
    "qnn": ("qnn",),
    "aihub": ("qnn",),  # the same Hexagon NPU (its build leaves op support to AI Hub's compile job)
    "torch": NoLint("torch runs the PyTorch module in edgekit's process: there is no ONNX graph to deploy"),
}


def lint_onnx(
    model_path: str | Path,
    target: str | Path | Target = "cpu",
    *,
    artifact: str | None = None,
    io_shapes: Mapping[str, Sequence[int]] | None = None,
) -> list[Finding]:
    """Findings for one ONNX file. ``io_shapes``: the static shapes the bundle's manifest gives
    its graph IO (then dynamic dims get the hint that `edgekit build` fixes them)."""

    target = load_target(target)
    model_path = Path(model_path)
    name = artifact or model_path.name
    model = load_onnx(model_path)
    consts = constant_tensors(model.graph, model_path.parent)
    nodes = list(walk_nodes(model.graph))
    rules = target.lint
    findings = [
        *_opset_findings(model, target, name),
        *_static_shape_findings(model, target, name, io_shapes),
        *_op_findings(nodes, target, name),
        *_topk_findings(nodes, consts, target, name),
        *_memory_findings(model, model_path, target, name),
        *_format_findings(model_path, target, name),
    ]
    if target.profile_facts.tensorrt_qdq or rules.supported_ops == "tensorrt":
        findings += trt_qdq_findings(nodes, consts, name)
    findings += OP_SUPPORT[rules.supported_ops](model_path, nodes, target, name)
    return sort_findings(findings)


def _opset_findings(model: Any, target: Target, name: str) -> list[Finding]:
    opset = next((o.version for o in model.opset_import if o.domain in DEFAULT_DOMAINS), None)
    lo, hi = target.lint.opset_min, target.lint.opset_max
    if opset is None or lo <= opset <= hi:
        return []
    fix = min(max(opset, lo), hi)
    # Say whose limit it is: on JetPack 5 / 6.0 it is TensorRT 8.x's ONNX parser (opset <= 17),
    # which the default export (opset 18) exceeds.
    reader = f" (TensorRT {target.trt.tensorrt}'s ONNX parser)" if target.uses_trt and target.trt.tensorrt else ""
    return [
        Finding(
            "error",
            "opset",
            name,
            f"opset {opset} is outside the range target {target.name} reads ({lo}..{hi}){reader}",
            hint=f"re-export with `edgekit export MODEL -o DIR --opset {fix}`",
        )
    ]


def _static_shape_findings(
    model: Any, target: Target, name: str, io_shapes: Mapping[str, Sequence[int]] | None
) -> list[Finding]:
    initializers = {i.name for i in model.graph.initializer}
    dynamic = []
    for role, values in (("input", model.graph.input), ("output", model.graph.output)):
        for value in values:
            if value.name in initializers:
                continue
            tensor = value.type.tensor_type
            if not tensor.HasField("shape"):
                dims: list[Any] = ["?"]  # rank unknown
            else:
                dims = [
                    d.dim_value if d.HasField("dim_value") and d.dim_value > 0 else (d.dim_param or "?")
                    for d in tensor.shape.dim
                ]
            if any(not isinstance(d, int) for d in dims):
                dynamic.append((role, value.name, dims))
    if not dynamic:
        return []
    listed = "; ".join(f"{role} {n!r} {dims}" for role, n, dims in dynamic)
    fixable = io_shapes is not None and all(n in io_shapes and len(io_shapes[n]) == len(d) for _, n, d in dynamic)
    if fixable:
        hint = "`edgekit build BUNDLE --target T` fixes them to the manifest's shapes ({})".format(
            ", ".join(f"{n}: {list(io_shapes[n])}" for _, n, _ in dynamic)
        )
    else:
        params = sorted({d for _, _, dims in dynamic for d in dims if isinstance(d, str) and d != "?"})
        args = " ".join(f"--dim_param {p} --dim_value N" for p in params) or "--input_name NAME --input_shape D0,D1,..."
        hint = (
            "export with static shapes, or fix them: python -m "
            f"onnxruntime.tools.make_dynamic_shape_fixed {args} in.onnx out.onnx"
        )
    severity = "error" if target.lint.static_shapes else "warning"
    return [Finding(severity, "static-shapes", name, f"graph IO has dynamic dims: {listed}", hint=hint)]


def _op_findings(nodes: Sequence[Any], target: Target, name: str) -> list[Finding]:
    findings = []
    for op, group in nodes_by_op(n for n in nodes if n.op_type in RANDOM_OPS and n.domain in DEFAULT_DOMAINS).items():
        names = node_names(group)
        findings.append(
            Finding(
                "error",
                "random-op",
                name,
                f"{op} draws random numbers inside the graph ({len(group)} "
                f"node(s): {shown_names(names)}): runtimes draw "
                "different numbers (TensorRT ignores the seed), so one seed no longer gives one output",
                hint="take the noise as a graph input (edgekit's exported graphs do; the decode loop draws it)",
                nodes=names,
            )
        )
    severity = "error" if target.lint.static_shapes else "warning"
    for op, group in nodes_by_op(
        n for n in nodes if n.op_type in DATA_DEPENDENT_SHAPE_OPS and n.domain in DEFAULT_DOMAINS
    ).items():
        names = node_names(group)
        findings.append(
            Finding(
                severity,
                "data-dependent-shape",
                name,
                f"{op} has an output shape that depends on the data ({len(group)} node(s): {shown_names(names)})",
                hint="replace it with a fixed-size equivalent (e.g. a mask and Where instead of NonZero)",
                nodes=names,
            )
        )
    return findings


def _topk_findings(nodes: Sequence[Any], consts: Mapping[str, np.ndarray], target: Target, name: str) -> list[Finding]:
    dynamic, too_big, unsorted = [], [], []
    limit = target.lint.max_topk_k
    for node in nodes:
        if node.op_type != "TopK" or node.domain not in DEFAULT_DOMAINS:
            continue
        attrs = {a.name: a for a in node.attribute}
        if len(node.input) > 1:  # opset >= 10: K is an input tensor
            k_value = consts.get(node.input[1])
            if k_value is None:
                dynamic.append(node)
                continue
            k = int(np.asarray(k_value).reshape(-1)[0])
        else:
            k = int(attrs["k"].i) if "k" in attrs else 0
        if limit and k > limit:
            too_big.append((node, k))
        if target.lint.supported_ops == "tensorrt" and "sorted" in attrs and attrs["sorted"].i == 0:
            unsorted.append(node)
    findings = []
    if dynamic:
        names = node_names(dynamic)
        findings.append(
            Finding(
                "error",
                "topk",
                name,
                f"TopK takes K from the graph at run time ({len(dynamic)} "
                f"node(s): {shown_names(names)}): its output shape "
                "depends on the data, and TensorRT needs K as an initializer",
                hint="make K a constant (an initializer) at export",
                nodes=names,
            )
        )
    if too_big:
        names = node_names([n for n, _ in too_big])
        findings.append(
            Finding(
                "error",
                "topk",
                name,
                f"TopK K = {max(k for _, k in too_big)} exceeds {limit}, the largest K target {target.name} supports "
                f"({len(too_big)} node(s): {shown_names(names)})",
                hint=f"use K <= {limit} (e.g. top-k sampling over fewer candidates)",
                nodes=names,
            )
        )
    if unsorted:
        names = node_names(unsorted)
        findings.append(
            Finding(
                "error",
                "topk",
                name,
                f"TopK with sorted=0 is not supported by TensorRT ({shown_names(names)})",
                hint="export TopK with sorted=1",
                nodes=names,
            )
        )
    return findings


# ORT's .ort format is a flatbuffer: 32-bit offsets, so a file under 2 GiB (weights and graph).
ORT_FORMAT_LIMIT = 1 << 31


def _memory_findings(model: Any, model_path: Path, target: Target, name: str) -> list[Finding]:
    budget = target.lint.memory_budget_mb
    if not budget:
        return []
    mb = model_bytes(model_path) / 1e6
    if mb > budget:
        return [
            Finding(
                "error",
                "memory",
                name,
                f"model weights are {mb:.0f} MB; target {target.name}'s memory budget is {budget} MB",
                hint=(
                    "quantize it (`edgekit quantize BUNDLE --profile "
                    f"{target.quantization_profile}`) or use a smaller model"
                ),
            )
        ]
    if mb > budget / 2:
        return [
            Finding(
                "warning",
                "memory",
                name,
                f"model weights are {mb:.0f} MB, over half of target {target.name}'s {budget} MB budget "
                "(activations and the runtime need the rest)",
                hint=f"consider int8 (`edgekit quantize BUNDLE --profile {target.quantization_profile}`)",
            )
        ]
    return []


def _format_findings(model_path: Path, target: Target, name: str) -> list[Finding]:
    """ORT's mobile ``.ort`` format is one flatbuffer: 32-bit offsets, no external data. A model
    whose weights reach 2 GiB cannot be one (the converter fails after minutes)."""
    if target.ort.format != "ort" or "ort" not in target.runtimes:
        return []
    size = model_bytes(model_path)
    if size < ORT_FORMAT_LIMIT:
        return []
    return [
        Finding(
            "error",
            "format",
            name,
            f"model weights are {size / (1 << 30):.2f} GiB; ONNX Runtime's "
            f".ort format (target {target.name}) holds at most 2 GiB "
            "in its one flatbuffer and has no external data",
            hint="quantize it (`edgekit quantize BUNDLE --profile "
            f"{target.quantization_profile}`, about a quarter of the size) "
            'or deploy the .onnx with external data (a target whose [ort] format is "onnx")',
        )
    ]


__all__ = ["lint_onnx"]
