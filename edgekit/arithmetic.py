"""The integer arithmetic an INT8 model meets on each CPU class, and the scheme chosen for it.

ONNX Runtime's CPU INT8 GEMM (MLAS, behind QGemm, MatMulIntegerToFloat, QLinearMatMul and
QLinearConv) multiplies u8 (or s8) activations by s8 weights and sums in int32 — except on x86
without VNNI (``avx2``, ``avx512``), where its fast kernel (``vpmaddubsw``) first adds the products
of two consecutive elements of K into an **int16 that saturates** at ±32767: 255 · 127 · 2 =
64770 does not fit. On this repo's demo graphs a u8s8 model with full-range weights lost
15–20 dB of output SNR there (tests/quantize/test_arithmetic.py reproduces it bit for bit with
``gemm_pairs_saturating``), and the budget search then gave INT8 up layer by layer.

The ``pair`` weight bound makes the same fast kernel exact: each output channel's scale is set so
that no two consecutive weights along K sum past 128 in magnitude (255 · 128 = 32640 fits), which
costs less precision than ORT's ``reduce_range`` (7-bit weights, the same guarantee for any pair).
A Conv's K order depends on the kernel (im2col or the direct one), so its bound is taken over any
pair of its weights (the two largest). On every other class the arithmetic is exact, so the
pair-bounded model computes the same numbers there: a bundle quantized for ``avx2`` keeps its
validated accuracy on every x86 and ARM CPU; one quantized with ``full`` weights does not on avx2.

Numpy models of both kernels (``gemm_exact``, ``gemm_pairs_saturating``) let tests and ``lint``
predict the loss without the hardware; ``int8_weight_pairs`` reads what an INT8 model file's
weights can sum to in them (``lint`` checks a target's class with it).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from edgekit._deps import require
from edgekit.errors import one_of
from edgekit.host import ISA_CLASSES, HostFacts
from edgekit.manifest_sections import QuantizationSummary
from edgekit.targets import QUANTIZATION_PROFILES

INT16_MAX = 32767
# The largest |w_2i| + |w_2i+1| that keeps a u8 activation's pair sum inside int16: 255 · 128 = 32640.
PAIR_LIMIT = 128


@dataclass(frozen=True)
class Scheme:
    """How the cpu profile quantizes for one arithmetic: the ORT quantizer's types and the weight bound."""

    name: str
    activation_type: str  # onnxruntime QuantType member
    weight_type: str
    reduce_range: bool  # ORT's 7-bit weights
    weight_bound: str  # "full": |q| <= 127 | "pair": consecutive K pairs |q_2i| + |q_2i+1| <= 128 (Conv: any pair)
    description: str

    def saturates_on(self, isa: str) -> bool:
        """Whether this scheme's GEMMs can saturate on ``isa``'s kernels."""
        return (
            arithmetic_for(isa).saturating_pairs
            and self.weight_bound == "full"
            and not self.reduce_range
            and self.weight_type == "QInt8"
        )

    def to_json(self) -> dict[str, object]:
        return asdict(self)


SCHEMES: dict[str, Scheme] = {
    "u8s8": Scheme(
        "u8s8",
        "QUInt8",
        "QInt8",
        False,
        "full",
        "u8 activations, s8 per-channel weights at full range (exact on VNNI/AMX/ARM; saturates on AVX2)",
    ),
    "u8s8-pair": Scheme(
        "u8s8-pair",
        "QUInt8",
        "QInt8",
        False,
        "pair",
        "u8 activations, s8 per-channel weights bounded so no K pair sums past 128: exact on every CPU",
    ),
    "u8s8-rr": Scheme(
        "u8s8-rr",
        "QUInt8",
        "QInt8",
        True,
        "full",
        "u8 activations, 7-bit s8 weights (ORT reduce_range): exact on every CPU",
    ),
    "u8u8": Scheme(
        "u8u8",
        "QUInt8",
        "QUInt8",
        False,
        "full",
        "u8 activations and weights: exact (16-bit widening kernel), slower on AVX2",
    ),
}


@dataclass(frozen=True)
class IsaArithmetic:
    isa: str
    saturating_pairs: bool  # u8·s8 pair sums saturate in int16 (vpmaddubsw)
    scheme: str  # the cpu profile's scheme for this class (SCHEMES)
    why: str  # the measurement (or the reason) behind the choice


# benchmarks/isa_schemes.py measures every scheme on the host it runs on (accuracy per forward and
# per decode against FP32, speed per forward, ORT and OpenVINO); its rows are in docs/int8.md.
ISA: dict[str, IsaArithmetic] = {
    "avx2": IsaArithmetic("avx2", True, "u8s8-pair", "measured: see benchmarks/isa_schemes.py (AMD EPYC, AVX2 only)"),
    "avx512": IsaArithmetic(
        "avx512", True, "u8s8-pair", "the same saturating pair sums as avx2 (vpmaddubsw, 512 bits)"
    ),
    "avx-vnni": IsaArithmetic(
        "avx-vnni", False, "u8s8", "exact vpdpbusd dot products: full-range weights keep 1 bit more"
    ),
    "avx512-vnni": IsaArithmetic(
        "avx512-vnni",
        False,
        "u8s8",
        "measured last round (Xeon, AVX-512 VNNI, ORT 1.32): masked 1.8x, flow 1.9x per forward at 33-36 dB",
    ),
    "amx": IsaArithmetic("amx", False, "u8s8", "exact int8 tiles (MLAS AMX kernel) and VNNI for small GEMMs"),
    "arm64": IsaArithmetic("arm64", False, "u8s8", "exact NEON widening multiplies; not measured here (no ARM host)"),
    "arm64-dotprod": IsaArithmetic(
        "arm64-dotprod", False, "u8s8", "exact udot/sdot kernels; not measured here (no ARM host)"
    ),
    "arm64-i8mm": IsaArithmetic(
        "arm64-i8mm", False, "u8s8", "exact usmmla/smmla kernels; not measured here (no ARM host)"
    ),
    "x86-64": IsaArithmetic(
        "x86-64", True, "u8s8-pair", "no AVX2: SSE kernels; bounded weights are exact on any kernel"
    ),
}
assert set(ISA) == set(ISA_CLASSES), "every ISA class (edgekit.host) has an arithmetic entry"


# A CPU edgekit cannot classify: the scheme that is exact on every kernel.
UNKNOWN = IsaArithmetic("unknown", True, "u8s8-pair", "unknown CPU: the scheme that is exact on every int8 kernel")


def arithmetic_for(isa: str) -> IsaArithmetic:
    if isa == "unknown":
        return UNKNOWN
    one_of("ISA class", isa, ISA, hint='set isa = "host" or one of those in the target file')
    return ISA[isa]


def scheme_for(isa: str) -> Scheme:
    return SCHEMES[arithmetic_for(isa).scheme]


# ---- the bound on the weights --------------------------------------------------------------------
def k_axis(op_type: str, weight: np.ndarray, channel_axis: int, trans_b: bool = False) -> int | None:
    """The reduction (K) axis of a weight whose K order the kernel pairs consecutively, or None
    (Conv: the pairing depends on the kernel, so any pair counts)."""
    if op_type == "Gemm":
        return 1 if trans_b else 0
    if op_type == "MatMul":
        return weight.ndim - 2
    return None


def pair_range(weight: np.ndarray, channel_axis: int, k: int | None) -> np.ndarray:
    """Per output channel (along ``channel_axis``), the magnitude the weights must be scaled by so
    that ``|q| <= 127`` and no pair that the kernel adds sums past ``PAIR_LIMIT``: the largest
    ``|w_2i| + |w_2i+1|`` along ``k`` (consecutive pairs), or the two largest ``|w|`` of the channel
    when ``k`` is None. Scaling by it/127 leaves every pair at <= 127 + 1 (rounding) = 128."""
    w = np.abs(np.moveaxis(np.asarray(weight, np.float64), channel_axis, 0))  # (C, ...)
    if k is None:
        flat = w.reshape(len(w), -1)
        top = np.sort(flat, axis=1)[:, -2:] if flat.shape[1] > 1 else np.concatenate([flat, np.zeros_like(flat)], 1)
        return top.sum(axis=1)
    k = k + 1 if k < channel_axis else k  # its place after moving the channel axis to the front
    w = np.moveaxis(w, k, 1)  # (C, K, ...)
    if w.shape[1] % 2:
        w = np.concatenate([w, np.zeros_like(w[:, :1])], axis=1)
    pairs = w[:, 0::2] + w[:, 1::2]
    return pairs.reshape(len(w), -1).max(axis=1)


def max_pair_sum(q: np.ndarray, channel_axis: int, k: int | None) -> int:
    """The largest pair sum of |q| the kernel can form in an int8 weight (``pair_range`` on q)."""
    return int(pair_range(q.astype(np.int64), channel_axis, k).max()) if q.size else 0


# ---- the int8 layers of a QDQ model, as these kernels meet them ---------------------------------------
def quantized_nodes(model: Any) -> set[str]:
    """Names of nodes (other than Q/DQ) with an activation input that passes through Q/DQ.

    Weight and bias DQs do not count: ORT's optimizer may share one (zero) bias initializer
    between several nodes, so a bias DQ can feed nodes that were never quantized."""
    inits = {i.name for i in model.graph.initializer}
    act_dq = {
        o for n in model.graph.node if n.op_type == "DequantizeLinear" and n.input[0] not in inits for o in n.output
    }
    return {
        n.name
        for n in model.graph.node
        if n.op_type not in ("QuantizeLinear", "DequantizeLinear") and any(i in act_dq for i in n.input)
    }


def int8_weight_pairs(model: Any, base_dir: str | Path = "") -> dict[str, int]:
    """{INT8 node (quantized activation and s8 weight): the largest |q_2i| + |q_2i+1| the AVX2
    u8s8 kernel can form from its weight} (``PAIR_LIMIT`` or less: it cannot saturate) of an
    INT8 ``onnx.ModelProto``. Weight-only nodes compute in float and are not listed. A model
    loaded without its external data (``load_onnx`` without ``external_data``) reads each weight
    from ``base_dir`` (the model file's folder) when it is checked: one tensor in memory at a time."""
    onnx = require("onnx")
    inits = {i.name: i for i in model.graph.initializer}
    producer = {o: n for n in model.graph.node for o in n.output}
    int8 = quantized_nodes(model)
    out: dict[str, int] = {}
    for node in model.graph.node:
        if node.name not in int8 or node.op_type not in ("MatMul", "Gemm", "Conv") or len(node.input) < 2:
            continue
        dq = producer.get(node.input[1])
        if dq is None or dq.op_type != "DequantizeLinear":
            continue
        init = inits.get(dq.input[0])
        if init is None or init.data_type != onnx.TensorProto.INT8:
            continue
        q = onnx.numpy_helper.to_array(init, base_dir=str(base_dir))
        axis = next((a.i for a in dq.attribute if a.name == "axis"), 1) % max(q.ndim, 1)
        trans_b = any(a.name == "transB" and a.i for a in node.attribute)
        out[node.name] = max_pair_sum(q, axis, k_axis(node.op_type, q, axis, trans_b))
    return out


# ---- numpy models of the kernels -------------------------------------------------------------------
def gemm_exact(a: np.ndarray, w: np.ndarray) -> np.ndarray:
    """int64 ``a @ w`` of raw integer operands a (M, K) and w (K, N): VNNI, AMX, ARM, u8u8 kernels."""
    return a.astype(np.int64) @ w.astype(np.int64)


def gemm_pairs_saturating(a: np.ndarray, w: np.ndarray) -> np.ndarray:
    """What MLAS's AVX2/AVX-512 u8s8 kernel computes for raw u8 a (M, K) and s8 w (K, N): the
    products of K elements 2i and 2i+1 summed into int16 with saturation (vpmaddubsw), then the
    pair sums added in int32 (vpmaddwd). ORT subtracts the activation zero point's share after."""
    a = a.astype(np.int64)
    w = w.astype(np.int64)
    if a.shape[1] % 2:
        a = np.concatenate([a, np.zeros_like(a[:, :1])], axis=1)
        w = np.concatenate([w, np.zeros_like(w[:1])], axis=0)
    pairs = a[:, 0::2, None] * w[None, 0::2, :] + a[:, 1::2, None] * w[None, 1::2, :]  # (M, K/2, N)
    return np.clip(pairs, -INT16_MAX - 1, INT16_MAX).sum(axis=1)


def saturation(a: np.ndarray, w: np.ndarray) -> Mapping[str, float]:
    """How much the saturating kernel loses on one layer: {"pairs": share of pair sums that
    saturate, "sqnr_db": SQNR of the saturating result against the exact one (inf when none)}."""
    exact = gemm_exact(a, w).astype(np.float64)
    got = gemm_pairs_saturating(a, w).astype(np.float64)
    a2 = a.astype(np.int64)
    w2 = w.astype(np.int64)
    if a2.shape[1] % 2:
        a2 = np.concatenate([a2, np.zeros_like(a2[:, :1])], axis=1)
        w2 = np.concatenate([w2, np.zeros_like(w2[:1])], axis=0)
    pairs = a2[:, 0::2, None] * w2[None, 0::2, :] + a2[:, 1::2, None] * w2[None, 1::2, :]
    share = float(np.mean(np.abs(pairs) > INT16_MAX)) if pairs.size else 0.0
    noise = float(np.sum((exact - got) ** 2))
    sqnr = float("inf") if noise == 0 else float(10 * np.log10(np.sum(exact**2) / noise))
    return {"pairs": share, "sqnr_db": sqnr}


# ---- where an int8 model meets another CPU --------------------------------------------------------
def host_warning(q: QuantizationSummary | None, host_isa: str, bundle: str = "BUNDLE") -> str | None:
    """One line when an int8 model of a profile with CPU arithmetic (``targets.ProfileFacts``: the
    cpu profile) runs on a CPU class other than the one its budget was measured on
    (``Bundle.quantization``): whether its accuracy carries over (the scheme computes the same
    integers on both) or not (its u8s8 GEMMs saturate here). None when the classes match or the
    model's profile runs on no CPU's int8 kernels."""
    facts = QUANTIZATION_PROFILES.get(str(q.profile)) if q is not None else None
    if q is None or facts is None or not facts.cpu_arithmetic:
        return None
    arith = q.arithmetic
    if arith is not None:
        scheme = SCHEMES.get(arith.scheme or "")
        validated = arith.validated_on or "unknown"
    else:  # quantized before edgekit recorded the arithmetic: full-range u8s8, class unknown
        scheme, validated = SCHEMES["u8s8"], "unknown"
    if scheme is None or validated == host_isa:
        return None
    where = f"a {validated} CPU" if validated != "unknown" else "a CPU edgekit did not record"
    if scheme.saturates_on(host_isa):
        return (
            f"the int8 model was validated on {where} with scheme {scheme.name}, whose u8s8 GEMMs saturate on this "
            f"{host_isa} CPU: its accuracy here is not the one quantize measured; re-quantize for this CPU "
            f"(`edgekit quantize {bundle} --isa {host_isa}`) or for every CPU "
            f"(`edgekit quantize {bundle} --target x86-avx2`)"
        )
    return (
        f"the int8 model was validated on {where}; this CPU is {host_isa}: scheme {scheme.name} computes the same "
        f"integers on both, so its measured accuracy holds here (its speed does not: `edgekit profile {bundle}`)"
    )


def int8_host_warnings(
    quantization: QuantizationSummary | None,
    precisions: tuple[str, ...] | list[str] | set[str],
    bundle: str = "BUNDLE",
) -> list[str]:
    """``host_warning`` for this host, when one of ``precisions`` is int8: what run, check and
    profile add to their warnings (once, and in ``--json``)."""
    if "int8" not in set(precisions):
        return []
    line = host_warning(quantization, HostFacts.detect().isa_class, bundle)
    return [line] if line else []
