"""TensorRT rules checked offline: its QDQ rules (int8, zero point 0, per-channel weights) and the
ONNX-TensorRT op support matrix."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from edgekit.lint.findings import Finding
from edgekit.lint.ops import (
    DATA_DEPENDENT_SHAPE_OPS,
    DEFAULT_DOMAINS,
    ELEM_NAMES,
    RANDOM_OPS,
    SEQUENCE_OPS,
    node_names,
    nodes_by_op,
    shown_names,
)

# The ONNX-TensorRT support matrix (onnx/onnx-tensorrt docs/operators.md, TensorRT 10.1 GA),
# default domain. Keep in step with that file when TensorRT moves. It supports no sequence op.
TRT_UNSUPPORTED_OPS = SEQUENCE_OPS | frozenset(
    {
        "AffineGrid",
        "Bernoulli",
        "BitShift",
        "BitwiseAnd",
        "BitwiseNot",
        "BitwiseOr",
        "BitwiseXor",
        "BlackmanWindow",
        "CenterCropPad",
        "Col2Im",
        "Compress",
        "ConvInteger",
        "DFT",
        "Det",
        "DynamicQuantizeLinear",
        "HammingWindow",
        "HannWindow",
        "ImageDecoder",
        "MatMulInteger",
        "MaxRoiPool",
        "MaxUnpool",
        "MelWeightMatrix",
        "Multinomial",
        "NegativeLogLikelihoodLoss",
        "Optional",
        "OptionalGetElement",
        "OptionalHasElement",
        "QLinearConv",
        "QLinearMatMul",
        "RegexFullMatch",
        "STFT",
        "SoftmaxCrossEntropyLoss",
        "StringConcat",
        "StringNormalizer",
        "StringSplit",
        "TfIdfVectorizer",
        "Unique",
    }
)


TRT_SUPPORTED_OPS = frozenset(
    {
        "Abs",
        "Acos",
        "Acosh",
        "Add",
        "And",
        "ArgMax",
        "ArgMin",
        "Asin",
        "Asinh",
        "Atan",
        "Atanh",
        "AveragePool",
        "BatchNormalization",
        "Cast",
        "CastLike",
        "Ceil",
        "Celu",
        "Clip",
        "Concat",
        "Constant",
        "ConstantOfShape",
        "Conv",
        "ConvTranspose",
        "Cos",
        "Cosh",
        "CumSum",
        "DeformConv",
        "DepthToSpace",
        "DequantizeLinear",
        "Div",
        "Dropout",
        "Einsum",
        "Elu",
        "Equal",
        "Erf",
        "Exp",
        "Expand",
        "EyeLike",
        "Flatten",
        "Floor",
        "Gather",
        "GatherElements",
        "GatherND",
        "Gelu",
        "Gemm",
        "GlobalAveragePool",
        "GlobalLpPool",
        "GlobalMaxPool",
        "Greater",
        "GreaterOrEqual",
        "GridSample",
        "GroupNormalization",
        "GRU",
        "HardSigmoid",
        "HardSwish",
        "Hardmax",
        "Identity",
        "If",
        "ImageScaler",
        "InstanceNormalization",
        "IsInf",
        "IsNaN",
        "LayerNormalization",
        "LeakyRelu",
        "Less",
        "LessOrEqual",
        "Log",
        "LogSoftmax",
        "Loop",
        "LRN",
        "LSTM",
        "LpNormalization",
        "LpPool",
        "MatMul",
        "Max",
        "MaxPool",
        "Mean",
        "MeanVarianceNormalization",
        "Min",
        "Mish",
        "Mod",
        "Mul",
        "Neg",
        "NonMaxSuppression",
        "NonZero",
        "Not",
        "OneHot",
        "Or",
        "Pad",
        "ParametricSoftplus",
        "Pow",
        "PRelu",
        "QuantizeLinear",
        "RandomNormal",
        "RandomNormalLike",
        "RandomUniform",
        "RandomUniformLike",
        "Range",
        "Reciprocal",
        "ReduceL1",
        "ReduceL2",
        "ReduceLogSum",
        "ReduceLogSumExp",
        "ReduceMax",
        "ReduceMean",
        "ReduceMin",
        "ReduceProd",
        "ReduceSum",
        "ReduceSumSquare",
        "Relu",
        "Reshape",
        "Resize",
        "ReverseSequence",
        "RNN",
        "RoiAlign",
        "Round",
        "ScaledTanh",
        "Scan",
        "Scatter",
        "ScatterElements",
        "ScatterND",
        "Selu",
        "Shape",
        "Shrink",
        "Sigmoid",
        "Sign",
        "Sin",
        "Sinh",
        "Size",
        "Slice",
        "Softmax",
        "Softplus",
        "Softsign",
        "SpaceToDepth",
        "Split",
        "Sqrt",
        "Squeeze",
        "Sub",
        "Sum",
        "Tan",
        "Tanh",
        "ThresholdedRelu",
        "Tile",
        "TopK",
        "Transpose",
        "Trilu",
        "Unsqueeze",
        "Upsample",
        "Where",
        "Xor",
    }
)


# Zero-point types TensorRT accepts for Q/DQ (its "quantized types": INT8, FP8, INT4).
_TRT_QUANT_TYPES = {3, 17, 22}


def trt_qdq_findings(nodes: Sequence[Any], consts: Mapping[str, np.ndarray], name: str) -> list[Finding]:
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
            wrong_type.setdefault(ELEM_NAMES.get(dtype, f"type {dtype}"), []).append(node)
        if np.any(np.asarray(consts[zp]).astype(np.float64) != 0):
            nonzero.append(node)

    def finding(severity: str, group: list[Any], says: str, why: str, hint: str) -> Finding:
        names = node_names(group)
        message = f"{len(group)} {says} ({shown_names(names)}){why}"
        return Finding(severity, "qdq", name, message, hint=hint, nodes=names)

    trt_profile = "quantize with the trt profile: `edgekit quantize BUNDLE --profile trt`"
    findings = [
        finding(
            "error",
            group,
            f"Q/DQ node(s) have {dtype} zero points",
            "; TensorRT quantizes to int8 only",
            f"{trt_profile} (int8, symmetric)",
        )
        for dtype, group in wrong_type.items()
    ]
    if nonzero:
        findings.append(
            finding(
                "error",
                nonzero,
                "Q/DQ node(s) have non-zero zero points",
                "; TensorRT is symmetric only",
                f"{trt_profile} (zero points 0)",
            )
        )
    if dynamic:
        findings.append(
            finding(
                "error",
                dynamic,
                "Q/DQ node(s) take their zero point from the graph",
                "",
                "zero points must be initializers (0)",
            )
        )
    if missing:
        findings.append(
            finding(
                "warning",
                missing,
                "QuantizeLinear node(s) have no zero point",
                ": ONNX then means uint8",
                "give an explicit int8 zero point 0 (edgekit quantize --profile trt does)",
            )
        )
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


def trt_support_findings(nodes: Sequence[Any], name: str) -> list[Finding]:
    findings = []
    already = RANDOM_OPS | DATA_DEPENDENT_SHAPE_OPS
    for op, group in nodes_by_op(nodes).items():
        names = node_names(group)
        domain_op = ":" in op
        if domain_op:
            findings.append(
                Finding(
                    "error",
                    "unsupported-op",
                    name,
                    f"TensorRT's ONNX parser has no {op} ({len(group)} node(s): {shown_names(names)})",
                    hint=(
                        "export without contrib ops (edgekit export uses only standard ONNX ops) or add a TensorRT "
                        "plugin"
                    ),
                    nodes=names,
                )
            )
        elif op in TRT_UNSUPPORTED_OPS and op not in already:
            findings.append(
                Finding(
                    "error",
                    "unsupported-op",
                    name,
                    f"TensorRT does not support {op} ({len(group)} node(s): {shown_names(names)})",
                    hint="rewrite it with supported ops at export, or run this target on ONNX Runtime",
                    nodes=names,
                )
            )
        elif op not in TRT_SUPPORTED_OPS and op not in TRT_UNSUPPORTED_OPS:
            findings.append(
                Finding(
                    "warning",
                    "unsupported-op",
                    name,
                    f"{op} is not in the ONNX-TensorRT 10 support matrix ({len(group)} node(s): {shown_names(names)})",
                    hint="check it with a test build on the device (edgekit build)",
                    nodes=names,
                )
            )
    return findings
