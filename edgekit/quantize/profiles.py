"""The built-in quantization profiles, one registry entry each (``quantize/registry.py``): cpu and
trt run the float-fallback hooks (``cpu.fallback.FallbackProfile``), qnn the 16-bit promotion
hooks (``qnn.profile.QnnProfile``). A new profile registers its own entry the same way, from its
own module; nothing else in edgekit names it.
"""

from __future__ import annotations

from edgekit.quantize.cpu.fallback import FallbackProfile
from edgekit.quantize.cpu.structure import trt_violations
from edgekit.quantize.qnn.profile import QnnProfile
from edgekit.quantize.registry import ProfileSettings, QuantizeProfile, register_profile

# The cpu entry is the avx512-vnni/amx/arm form; QuantizeConfig.settings swaps in the scheme of the
# arithmetic quantized for (arithmetic.py: bounded weights on x86 without VNNI).
# Measured on this repo's demo graphs (AMD EPYC, AVX512-VNNI, ORT 1.32, 1 thread, one process,
# interleaved): u8 activations + s8 per-channel weights + int32 bias, no output Q except Conv,
# ran masked 1.8x, flow 1.9x, ar 1.1-1.3x faster than fp32 at 33-36 dB output SNR. s8 activations
# left Conv unfused (flow 1.1x); output Q on Gemm and no bias quantization left DQ -> Gemm
# unfused (0.85x, slower than fp32); reduce_range cost 1-3 dB and gained nothing on VNNI.
# Also tried on the masked demo (batch 8, 1 thread): QOperator (QLinearMatMul) and dynamic
# quantization after ORT's transformer optimizer ran 1.35x, below this QDQ->QGemm profile (1.56x
# then); 2 intra-op threads gave 1.39-1.57x (INT8 kernels scale worse at this size than FP32's).
# What bounds the ratio is the rest of the graph: with FastGelu (runtimes/ort_fusions.py) in both
# precisions, the weighted ops run 2.4x faster in INT8 but the other ops (GELU, attention core,
# LayerNorm, Transpose, QuantizeLinear) are ~half of INT8 time: 1.72x per forward
# (`python benchmarks/bench.py` prints the op profile).
CPU = register_profile(
    QuantizeProfile(
        name="cpu",
        help="fastest on ONNX Runtime CPU (u8 activations, s8 per-channel weights, int32 bias)",
        settings=ProfileSettings(
            activation_type="QUInt8",
            weight_type="QInt8",
            per_channel=True,
            reduce_range=False,
            activation_symmetric=False,
            weight_symmetric=True,
            quantize_bias=True,
            quantized_outputs=("Conv",),
            skip_gemv=False,
            weight_only_float=True,
            # Budget fallbacks are built plain FP32 here: a weight-only layer dequantizes its weight at
            # every call, which measured slower than FP32 on the CPUs tried. cpu.fallback.choose_fallback_form
            # then times both forms on the host and keeps weight-only (the smaller) unless it is surely
            # slower or misses the budget.
            weight_only_fallback=False,
            # ORT's CPU EP and OpenVINO run Gather on an int8 table, Cast and Mul as plain kernels on
            # the gathered rows; TensorRT and QNN (their own profiles) are not given this form.
            int8_gather_tables=True,
        ),
        hooks=FallbackProfile,
        cpu_arithmetic=True,
        # Every bucket is one more session (ORT) or compiled model (OpenVINO) in memory, as deployed.
        bucket_memory=True,
    )
)

# TensorRT explicit quantization (shared/reference/quantization.md): int8 only, zero points 0,
# per-channel weights, activations per-tensor, Q/DQ on weighted-op inputs, bias in float. It
# deploys TensorRT plans, whose memory the budget runtime (ORT) does not show: step buckets are
# not bounded by memory.
TRT = register_profile(
    QuantizeProfile(
        name="trt",
        help="TensorRT QDQ rules (int8 symmetric, zero points 0, float bias)",
        settings=ProfileSettings(
            activation_type="QInt8",
            weight_type="QInt8",
            per_channel=True,
            reduce_range=False,
            activation_symmetric=True,
            weight_symmetric=True,
            quantize_bias=False,
            quantized_outputs=(),
            skip_gemv=True,
            weight_only_float=False,  # a lone weight DQ is no TensorRT INT8 layer: keep float weights float
            # ...except budget fallbacks, which must keep the 0.3x size: int8 weight, zero point 0.
            weight_only_fallback=True,
        ),
        hooks=FallbackProfile,
        graph_rules=trt_violations,
    )
)

# Qualcomm HTP (quantize/qnn/): every op QDQ by onnxruntime's QNN rules, uint8 activations,
# MatMul weights int8 symmetric per output column (per_channel; the HTP backend of
# onnxruntime-qnn 2.7 runs them, an earlier build left them to the CPU EP), other weights uint8
# per tensor; the most sensitive tensors promoted to uint16 until the budget holds on the HTP.
# Its budgets (full-integer, no float fallback) lower only the lockstep-token-agreement floor: on
# the masked demo (batch 1, 4 held-out rows, sampled decisions in lockstep with FP32) 8-bit
# activations gave 0.957 on the HTP backend, every activation at 16 bit 0.984 (CPU EP
# simulation), 16-bit activations *and* weights 0.997, which the HTP refuses for LayerNorm and
# Conv weights; fp16 on the HTP gave 1.000. The ground-truth drop (what users see) keeps its
# limit, as do the flow budgets. It also budgets top-1 agreement at `check`'s default floors
# (masked 0.90, ar 0.95: evaluate/thresholds.py), so a model quantize passes does not fail check:
# the 8-bit masked demo had 0.957 token agreement but 0.869 top-1 on the HTP backend.
QNN = register_profile(
    QuantizeProfile(
        name="qnn",
        help=(
            "Qualcomm Hexagon NPU, every op quantized, sensitive activations "
            "promoted to 16 bit, budget measured on the HTP backend"
        ),
        settings=ProfileSettings(
            activation_type="QUInt8",
            weight_type="QUInt8",
            per_channel=True,
            reduce_range=False,
            activation_symmetric=False,
            weight_symmetric=False,
            quantize_bias=True,
            quantized_outputs=("*",),
            skip_gemv=False,
            weight_only_float=False,
            weight_only_fallback=False,
        ),
        hooks=QnnProfile,
        budgets={
            "masked": {"lockstep_token_agreement": 0.95, "top1_agreement": 0.90},
            "ar": {"lockstep_token_agreement": 0.95, "top1_agreement": 0.95},
        },
        emulated=True,
        emulated_why="the HTP backend is emulated on this CPU: its time is not the NPU's",
        overrides="tensor",
        extra="qnn",
    )
)
