"""Will this graph deploy to that target? Static checks of a bundle's ONNX models against a
target's lint rules, before anyone copies anything to a device.

Rules: static graph IO dims; no random ops (edgekit graphs take all noise as inputs); no ops
whose output shape depends on the data; TopK with a constant K within the runtime's limit; the
opset range the target's runtime reads; TensorRT's QDQ rules (int8, zero point 0); ops the
target's execution providers support, where that can be told offline (ONNX Runtime's mobile
usability checker for NNAPI/CoreML, the ONNX-TensorRT support matrix for TensorRT); model size
against the target's memory budget. Each finding has a severity: ``error`` (will not deploy as
is: ``edgekit lint`` exits 4), ``warning`` (deploys, but slower or with a caveat), ``info``.
``onnx`` (and onnxruntime for the NNAPI/CoreML checks) are imported lazily.
"""

from __future__ import annotations

import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Iterator, Mapping, Sequence

import numpy as np

from edgekit.bundle import Bundle
from edgekit.targets import Target, load_target

SEVERITIES: tuple[str, ...] = ("error", "warning", "info")
LINT_SCHEMA = "edgekit.lint/1"
# Node names listed in one finding; the rest are counted.
MAX_NODES_SHOWN = 5

# Ops that draw random numbers inside the graph: runtimes draw different numbers (TensorRT
# ignores the seed), so the same seed no longer gives the same output everywhere.
RANDOM_OPS = frozenset({"RandomNormal", "RandomNormalLike", "RandomUniform", "RandomUniformLike", "Multinomial", "Bernoulli"})
# Ops whose output shape depends on the values flowing through the graph.
SEQUENCE_OPS = frozenset({
    "SequenceAt", "SequenceConstruct", "SequenceEmpty", "SequenceErase", "SequenceInsert",
    "SequenceLength", "SequenceMap", "SplitToSequence", "ConcatFromSequence",
})
DATA_DEPENDENT_SHAPE_OPS = frozenset({"NonZero", "Unique", "Compress", "NonMaxSuppression", "StringSplit"}) | SEQUENCE_OPS

# The ONNX-TensorRT support matrix (onnx/onnx-tensorrt docs/operators.md, TensorRT 10.1 GA),
# default domain. Keep in step with that file when TensorRT moves.
TRT_UNSUPPORTED_OPS = frozenset({
    "AffineGrid", "Bernoulli", "BitShift", "BitwiseAnd", "BitwiseNot", "BitwiseOr", "BitwiseXor",
    "BlackmanWindow", "CenterCropPad", "Col2Im", "Compress", "ConcatFromSequence", "ConvInteger", "DFT",
    "Det", "DynamicQuantizeLinear", "HammingWindow", "HannWindow", "ImageDecoder", "MatMulInteger",
    "MaxRoiPool", "MaxUnpool", "MelWeightMatrix", "Multinomial", "NegativeLogLikelihoodLoss", "Optional",
    "OptionalGetElement", "OptionalHasElement", "QLinearConv", "QLinearMatMul", "RegexFullMatch", "STFT",
    "SequenceAt", "SequenceConstruct", "SequenceEmpty", "SequenceErase", "SequenceInsert", "SequenceLength",
    "SequenceMap", "SoftmaxCrossEntropyLoss", "SplitToSequence", "StringConcat", "StringNormalizer",
    "StringSplit", "TfIdfVectorizer", "Unique",
})
TRT_SUPPORTED_OPS = frozenset({
    "Abs", "Acos", "Acosh", "Add", "And", "ArgMax", "ArgMin", "Asin", "Asinh", "Atan", "Atanh",
    "AveragePool", "BatchNormalization", "Cast", "CastLike", "Ceil", "Celu", "Clip", "Concat", "Constant",
    "ConstantOfShape", "Conv", "ConvTranspose", "Cos", "Cosh", "CumSum", "DeformConv", "DepthToSpace",
    "DequantizeLinear", "Div", "Dropout", "Einsum", "Elu", "Equal", "Erf", "Exp", "Expand", "EyeLike",
    "Flatten", "Floor", "Gather", "GatherElements", "GatherND", "Gelu", "Gemm", "GlobalAveragePool",
    "GlobalLpPool", "GlobalMaxPool", "Greater", "GreaterOrEqual", "GridSample", "GroupNormalization", "GRU",
    "HardSigmoid", "HardSwish", "Hardmax", "Identity", "If", "ImageScaler", "InstanceNormalization", "IsInf",
    "IsNaN", "LayerNormalization", "LeakyRelu", "Less", "LessOrEqual", "Log", "LogSoftmax", "Loop", "LRN",
    "LSTM", "LpNormalization", "LpPool", "MatMul", "Max", "MaxPool", "Mean", "MeanVarianceNormalization",
    "Min", "Mish", "Mod", "Mul", "Neg", "NonMaxSuppression", "NonZero", "Not", "OneHot", "Or", "Pad",
    "ParametricSoftplus", "Pow", "PRelu", "QuantizeLinear", "RandomNormal", "RandomNormalLike",
    "RandomUniform", "RandomUniformLike", "Range", "Reciprocal", "ReduceL1", "ReduceL2", "ReduceLogSum",
    "ReduceLogSumExp", "ReduceMax", "ReduceMean", "ReduceMin", "ReduceProd", "ReduceSum", "ReduceSumSquare",
    "Relu", "Reshape", "Resize", "ReverseSequence", "RNN", "RoiAlign", "Round", "ScaledTanh", "Scan",
    "Scatter", "ScatterElements", "ScatterND", "Selu", "Shape", "Shrink", "Sigmoid", "Sign", "Sin", "Sinh",
    "Size", "Slice", "Softmax", "Softplus", "Softsign", "SpaceToDepth", "Split", "Sqrt", "Squeeze", "Sub",
    "Sum", "Tan", "Tanh", "ThresholdedRelu", "Tile", "TopK", "Transpose", "Trilu", "Unsqueeze", "Upsample",
    "Where", "Xor",
})
DEFAULT_DOMAINS = ("", "ai.onnx")
# onnx.TensorProto element types (numbers, so this module imports onnx lazily).
_INT8, _UINT8 = 3, 2
_ELEM_NAMES = {1: "float32", 2: "uint8", 3: "int8", 4: "uint16", 5: "int16", 6: "int32", 7: "int64", 10: "float16",
               17: "float8e4m3fn", 21: "uint4", 22: "int4"}
# Zero-point types TensorRT accepts for Q/DQ (its "quantized types": INT8, FP8, INT4).
_TRT_QUANT_TYPES = {3, 17, 22}


@dataclass(frozen=True)
class Finding:
    severity: str  # error | warning | info
    rule: str  # static-shapes, random-op, data-dependent-shape, topk, opset, qdq, unsupported-op, ep-coverage, memory, precision
    artifact: str  # which bundle artifact ("fp32", "int8") or model file it is about
    message: str
    hint: str | None = None
    nodes: tuple[str, ...] = ()  # offending node names (all of them; the message shows a few)

    def to_json(self) -> dict[str, Any]:
        return {"severity": self.severity, "rule": self.rule, "artifact": self.artifact, "message": self.message,
                "hint": self.hint, "nodes": list(self.nodes)}


def has_errors(findings: Iterable[Finding]) -> bool:
    return any(f.severity == "error" for f in findings)


# ---------------------------------------------------------------------------------------------
# Bundles


def lint_bundle(path: str | Path | Bundle, target: str | Path | Target = "cpu") -> list[Finding]:
    """Every finding for the ONNX artifacts ``target`` would run (``fp32`` always, ``int8``
    when the target runs int8 and the bundle has it), errors first."""
    bundle = path if isinstance(path, Bundle) else Bundle.load(path)
    target = load_target(target)
    io_shapes = {n: s.shape for n, s in (*bundle.inputs.items(), *bundle.outputs.items())}
    findings: list[Finding] = []
    for name in ("fp32", "int8", "fp16"):
        if name not in bundle.manifest["artifacts"]:
            if name == "int8" and "int8" in target.precisions:
                findings.append(Finding(
                    "info", "precision", name, f"bundle has no int8 model; target {target.name} runs int8",
                    hint=f"make one with `edgekit quantize {bundle.root} --profile {target.quantization_profile}`",
                ))
            continue
        if name != "fp32" and name not in target.precisions:
            continue
        findings += lint_onnx(bundle.path_of(name), target, artifact=name, io_shapes=io_shapes)
        if name == "int8":
            findings += _quantization_profile_findings(bundle, target)
    return sort_findings(findings)


def lint_report(path: str | Path, target: str | Path | Target = "cpu") -> dict[str, Any]:
    """``lint_bundle`` as the ``edgekit lint --json`` document (``edgekit.lint/1``)."""
    bundle = Bundle.load(path)
    target = load_target(target)
    findings = lint_bundle(bundle, target)
    counts = {s: sum(f.severity == s for f in findings) for s in SEVERITIES}
    return {
        "schema": LINT_SCHEMA,
        "bundle": str(bundle.root),
        "target": target.name,
        "passed": counts["error"] == 0,
        "counts": counts,
        "findings": [f.to_json() for f in findings],
    }


def sort_findings(findings: Iterable[Finding]) -> list[Finding]:
    return sorted(findings, key=lambda f: SEVERITIES.index(f.severity))


def _quantization_profile_findings(bundle: Bundle, target: Target) -> list[Finding]:
    profile = quantization_profile_of(bundle)
    if profile is None or profile == target.quantization_profile:
        return []
    return [Finding(
        "error", "qdq", "int8",
        f"the int8 model was quantized with profile {profile!r}; target {target.name} needs {target.quantization_profile!r}",
        hint=f"re-quantize with `edgekit quantize {bundle.root} --profile {target.quantization_profile}`",
    )]


def quantization_profile_of(bundle: Bundle) -> str | None:
    """The ``edgekit quantize --profile`` the bundle's int8 model came from, if recorded."""
    quant = bundle.manifest.get("quantization") or {}
    art = bundle.manifest["artifacts"].get("int8") or {}
    profile = quant.get("profile") if isinstance(quant, dict) else None
    return profile or (art.get("config") or {}).get("profile")


# ---------------------------------------------------------------------------------------------
# One model


def lint_onnx(
    model_path: str | Path,
    target: str | Path | Target = "cpu",
    *,
    artifact: str | None = None,
    io_shapes: Mapping[str, Sequence[int]] | None = None,
) -> list[Finding]:
    """Findings for one ONNX file. ``io_shapes``: the static shapes the bundle's manifest gives
    its graph IO (then dynamic dims get the hint that `edgekit build` fixes them)."""
    from edgekit.runtimes._specs import load_onnx

    target = load_target(target)
    model_path = Path(model_path)
    name = artifact or model_path.name
    model = load_onnx(model_path)
    consts = _constants(model.graph)
    nodes = list(_walk(model.graph))
    rules = target.lint
    findings = [
        *_opset_findings(model, target, name),
        *_static_shape_findings(model, target, name, io_shapes),
        *_op_findings(nodes, target, name),
        *_topk_findings(nodes, consts, target, name),
        *_memory_findings(model, model_path, target, name),
    ]
    if target.quantization_profile == "trt" or rules.supported_ops == "tensorrt":
        findings += _trt_qdq_findings(nodes, consts, name)
    if rules.supported_ops == "tensorrt":
        findings += _trt_support_findings(nodes, name)
    elif rules.supported_ops in ("nnapi", "coreml"):
        findings += _mobile_ep_findings(model_path, target, name)
    return sort_findings(findings)


def _walk(graph: Any) -> Iterator[Any]:
    """Every node of ``graph`` and of its subgraphs (If/Loop/Scan bodies)."""
    for node in graph.node:
        yield node
        for attr in node.attribute:
            if attr.HasField("g"):
                yield from _walk(attr.g)
            for sub in attr.graphs:
                yield from _walk(sub)


def _constants(graph: Any) -> dict[str, np.ndarray]:
    """Initializers and Constant-node outputs by name (main graph and subgraphs)."""
    from onnx import numpy_helper

    out: dict[str, np.ndarray] = {}

    def visit(g: Any) -> None:
        for init in g.initializer:
            out[init.name] = numpy_helper.to_array(init)
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


def _named(nodes: Sequence[Any]) -> tuple[str, ...]:
    return tuple(n.name or f"<{n.op_type} #{i}>" for i, n in enumerate(nodes))


def _shown(names: Sequence[str]) -> str:
    head = ", ".join(names[:MAX_NODES_SHOWN])
    return head + (f" and {len(names) - MAX_NODES_SHOWN} more" if len(names) > MAX_NODES_SHOWN else "")


def _by_op(nodes: Iterable[Any]) -> dict[str, list[Any]]:
    groups: dict[str, list[Any]] = {}
    for node in nodes:
        key = node.op_type if node.domain in DEFAULT_DOMAINS else f"{node.domain}:{node.op_type}"
        groups.setdefault(key, []).append(node)
    return groups


def _opset_findings(model: Any, target: Target, name: str) -> list[Finding]:
    opset = next((o.version for o in model.opset_import if o.domain in DEFAULT_DOMAINS), None)
    lo, hi = target.lint.opset_min, target.lint.opset_max
    if opset is None or lo <= opset <= hi:
        return []
    fix = min(max(opset, lo), hi)
    return [Finding(
        "error", "opset", name, f"opset {opset} is outside the range target {target.name} reads ({lo}..{hi})",
        hint=f"re-export with `edgekit export MODEL -o DIR --opset {fix}`",
    )]


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
                dims = [d.dim_value if d.HasField("dim_value") and d.dim_value > 0 else (d.dim_param or "?") for d in tensor.shape.dim]
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
        hint = f"export with static shapes, or fix them: python -m onnxruntime.tools.make_dynamic_shape_fixed {args} in.onnx out.onnx"
    severity = "error" if target.lint.static_shapes else "warning"
    return [Finding(severity, "static-shapes", name, f"graph IO has dynamic dims: {listed}", hint=hint)]


def _op_findings(nodes: Sequence[Any], target: Target, name: str) -> list[Finding]:
    findings = []
    for op, group in _by_op(n for n in nodes if n.op_type in RANDOM_OPS and n.domain in DEFAULT_DOMAINS).items():
        names = _named(group)
        findings.append(Finding(
            "error", "random-op", name,
            f"{op} draws random numbers inside the graph ({len(group)} node(s): {_shown(names)}): runtimes draw "
            "different numbers (TensorRT ignores the seed), so one seed no longer gives one output",
            hint="take the noise as a graph input (edgekit's exported graphs do; the decode loop draws it)",
            nodes=names,
        ))
    severity = "error" if target.lint.static_shapes else "warning"
    for op, group in _by_op(n for n in nodes if n.op_type in DATA_DEPENDENT_SHAPE_OPS and n.domain in DEFAULT_DOMAINS).items():
        names = _named(group)
        findings.append(Finding(
            severity, "data-dependent-shape", name,
            f"{op} has an output shape that depends on the data ({len(group)} node(s): {_shown(names)})",
            hint="replace it with a fixed-size equivalent (e.g. a mask and Where instead of NonZero)",
            nodes=names,
        ))
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
        names = _named(dynamic)
        findings.append(Finding(
            "error", "topk", name,
            f"TopK takes K from the graph at run time ({len(dynamic)} node(s): {_shown(names)}): its output shape "
            "depends on the data, and TensorRT needs K as an initializer",
            hint="make K a constant (an initializer) at export", nodes=names,
        ))
    if too_big:
        names = _named([n for n, _ in too_big])
        findings.append(Finding(
            "error", "topk", name,
            f"TopK K = {max(k for _, k in too_big)} exceeds {limit}, the largest K target {target.name} supports "
            f"({len(too_big)} node(s): {_shown(names)})",
            hint=f"use K <= {limit} (e.g. top-k sampling over fewer candidates)", nodes=names,
        ))
    if unsorted:
        names = _named(unsorted)
        findings.append(Finding(
            "error", "topk", name, f"TopK with sorted=0 is not supported by TensorRT ({_shown(names)})",
            hint="export TopK with sorted=1", nodes=names,
        ))
    return findings


def _trt_qdq_findings(nodes: Sequence[Any], consts: Mapping[str, np.ndarray], name: str) -> list[Finding]:
    """TensorRT's explicit-quantization rules: zero points constant, int8 (or fp8/int4), all 0."""
    qdq = [n for n in nodes if n.op_type in ("QuantizeLinear", "DequantizeLinear") and n.domain in DEFAULT_DOMAINS]
    if not qdq:
        return []
    elem = _tensor_types(consts)
    wrong_type: dict[str, list[Any]] = {}
    nonzero, dynamic, missing = [], [], []
    for node in qdq:
        if len(node.input) < 3 or not node.input[2]:
            out_dtype = next((a.i for a in node.attribute if a.name == "output_dtype"), 0)
            if node.op_type == "QuantizeLinear" and out_dtype not in _TRT_QUANT_TYPES:
                missing.append(node)
            continue
        zp = node.input[2]
        if zp not in consts:
            dynamic.append(node)
            continue
        dtype = elem.get(zp)
        if dtype not in _TRT_QUANT_TYPES:
            wrong_type.setdefault(_ELEM_NAMES.get(dtype, f"type {dtype}"), []).append(node)
        if np.any(np.asarray(consts[zp]).astype(np.float64) != 0):
            nonzero.append(node)
    findings = []
    for dtype, group in wrong_type.items():
        names = _named(group)
        findings.append(Finding(
            "error", "qdq", name,
            f"{len(group)} Q/DQ node(s) have {dtype} zero points ({_shown(names)}); TensorRT quantizes to int8 only",
            hint="quantize with the trt profile: `edgekit quantize BUNDLE --profile trt` (int8, symmetric)", nodes=names,
        ))
    if nonzero:
        names = _named(nonzero)
        findings.append(Finding(
            "error", "qdq", name,
            f"{len(nonzero)} Q/DQ node(s) have non-zero zero points ({_shown(names)}); TensorRT is symmetric only",
            hint="quantize with the trt profile: `edgekit quantize BUNDLE --profile trt` (zero points 0)", nodes=names,
        ))
    if dynamic:
        names = _named(dynamic)
        findings.append(Finding(
            "error", "qdq", name, f"{len(dynamic)} Q/DQ node(s) take their zero point from the graph ({_shown(names)})",
            hint="zero points must be initializers (0)", nodes=names,
        ))
    if missing:
        names = _named(missing)
        findings.append(Finding(
            "warning", "qdq", name,
            f"{len(missing)} QuantizeLinear node(s) have no zero point ({_shown(names)}): ONNX then means uint8",
            hint="give an explicit int8 zero point 0 (edgekit quantize --profile trt does)", nodes=names,
        ))
    return findings


def _tensor_types(consts: Mapping[str, np.ndarray]) -> dict[str, int]:
    """onnx element type of each constant (-1 where numpy's dtype has none)."""
    from onnx import helper

    out = {}
    for name, value in consts.items():
        try:
            out[name] = helper.np_dtype_to_tensor_dtype(np.asarray(value).dtype)
        except (KeyError, TypeError, ValueError):
            out[name] = -1
    return out


def _trt_support_findings(nodes: Sequence[Any], name: str) -> list[Finding]:
    findings = []
    already = RANDOM_OPS | DATA_DEPENDENT_SHAPE_OPS
    for op, group in _by_op(nodes).items():
        names = _named(group)
        domain_op = ":" in op
        if domain_op:
            findings.append(Finding(
                "error", "unsupported-op", name,
                f"TensorRT's ONNX parser has no {op} ({len(group)} node(s): {_shown(names)})",
                hint="export without contrib ops (edgekit export uses only standard ONNX ops) or add a TensorRT plugin",
                nodes=names,
            ))
        elif op in TRT_UNSUPPORTED_OPS and op not in already:
            findings.append(Finding(
                "error", "unsupported-op", name,
                f"TensorRT does not support {op} ({len(group)} node(s): {_shown(names)})",
                hint="rewrite it with supported ops at export, or run this target on ONNX Runtime", nodes=names,
            ))
        elif op not in TRT_SUPPORTED_OPS and op not in TRT_UNSUPPORTED_OPS:
            findings.append(Finding(
                "warning", "unsupported-op", name,
                f"{op} is not in the ONNX-TensorRT 10 support matrix ({len(group)} node(s): {_shown(names)})",
                hint="check it with a test build on the device (edgekit build)", nodes=names,
            ))
    return findings


def _mobile_ep_findings(model_path: Path, target: Target, name: str) -> list[Finding]:
    """NNAPI/CoreML partitioning as onnxruntime's mobile usability checker estimates it, on the
    graph after ORT's basic optimizations (as `.ort` conversion applies them)."""
    from edgekit._deps import require

    onnx = require("onnx")
    require("onnxruntime")
    from onnxruntime.tools.mobile_helpers import usability_checker
    from onnxruntime.tools.onnx_model_utils import optimize_model

    ep = {"nnapi": "NNAPI", "coreml": "CoreML"}[target.lint.supported_ops]
    with tempfile.TemporaryDirectory(prefix="edgekit-lint-") as tmp:
        optimized = Path(tmp) / model_path.name
        try:
            optimize_model(model_path, optimized)
            model = onnx.load(str(optimized))
        except Exception as exc:  # noqa: BLE001 - ORT refuses the graph: that is the finding
            return [Finding(
                "error", "ep-coverage", name,
                f"ONNX Runtime cannot load the graph to check {ep} coverage: {str(exc).splitlines()[0][:200]}",
                hint="run `edgekit run BUNDLE` to see the full error",
            )]
    model = onnx.shape_inference.infer_shapes(model)
    if ep == "NNAPI":
        info = usability_checker.check_nnapi_partitions(model, require_fixed_input_sizes=True)
    else:
        info = usability_checker.check_coreml_partitions(model, True, "coreml_supported_mlprogram_ops.md")
    findings = []
    total, taken = info.num_nodes, info.num_supported_nodes
    others = [p for p in target.ort.providers if p not in ("NnapiExecutionProvider", "CoreMLExecutionProvider", "CPUExecutionProvider")]
    if info.unsupported_ops:
        ops = sorted(o.removeprefix("ai.onnx:") for o in info.unsupported_ops)
        findings.append(Finding(
            "warning", "ep-coverage", name,
            f"{ep} cannot run {', '.join(ops)}: {total - taken} of {total} nodes fall back to the CPU provider "
            f"({info.num_partitions} {ep} partition(s); each boundary copies tensors)",
            hint=f"measure with and without {ep} on the device (`edgekit deploy ... --command profile`)",
        ))
    findings.append(Finding(
        "info", "ep-coverage", name,
        f"{ep} can take {taken}/{total} nodes in {info.num_partitions} partition(s) "
        f"(onnxruntime's estimate: {info.suitability().name})"
        + (f"; {', '.join(others)} coverage cannot be checked offline" if others else ""),
    ))
    return findings


def _memory_findings(model: Any, model_path: Path, target: Target, name: str) -> list[Finding]:
    budget = target.lint.memory_budget_mb
    if not budget:
        return []
    size = model_path.stat().st_size + _external_data_bytes(model, model_path)
    mb = size / 1e6
    if mb > budget:
        return [Finding(
            "error", "memory", name, f"model weights are {mb:.0f} MB; target {target.name}'s memory budget is {budget} MB",
            hint=f"quantize it (`edgekit quantize BUNDLE --profile {target.quantization_profile}`) or use a smaller model",
        )]
    if mb > budget / 2:
        return [Finding(
            "warning", "memory", name,
            f"model weights are {mb:.0f} MB, over half of target {target.name}'s {budget} MB budget "
            "(activations and the runtime need the rest)",
            hint=f"consider int8 (`edgekit quantize BUNDLE --profile {target.quantization_profile}`)",
        )]
    return []


def _external_data_bytes(model: Any, model_path: Path) -> int:
    files = set()
    for init in model.graph.initializer:
        for entry in init.external_data:
            if entry.key == "location":
                files.add(entry.value)
    return sum((model_path.parent / f).stat().st_size for f in files if (model_path.parent / f).is_file())


__all__ = ["Finding", "LINT_SCHEMA", "SEVERITIES", "has_errors", "lint_bundle", "lint_onnx", "lint_report", "sort_findings"]
