"""The ``TensorQuantOverrides`` the cpu and trt profiles hand onnxruntime's quantizer: weight
ranges bounded for the AVX2 kernel's int16 pair sums (``pair_bound_overrides``) and symmetric
int8 Q and K for OpenVINO's int8 attention (``attention_score_overrides``). ``onnx`` and
``onnxruntime`` are imported lazily."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from edgekit._deps import require
from edgekit.arithmetic import k_axis, pair_range
from edgekit.quantize.config import QuantizeConfig
from edgekit.quantize.graph import FLOAT, GraphPlan


def pair_bound_overrides(prepared: Path, nodes: Sequence[str]) -> dict[str, list[dict[str, Any]]]:
    """ORT ``TensorQuantOverrides`` that give the constant weight of each MatMul/Gemm/Conv in
    ``nodes`` per-channel ranges ``±arithmetic.pair_range``: symmetric int8 weights whose pairs
    the AVX2 u8s8 kernel sums never pass 128, so its int16 pair sums never saturate."""
    onnx = require("onnx")
    model = onnx.load(str(prepared), load_external_data=False)  # each weight read when needed
    inits = {i.name: i for i in model.graph.initializer}
    wanted = set(nodes)
    out: dict[str, list[dict[str, Any]]] = {}
    for node in model.graph.node:
        if node.name not in wanted or node.op_type not in ("MatMul", "Gemm", "Conv") or len(node.input) < 2:
            continue
        init = inits.get(node.input[1])
        if init is None or init.data_type != FLOAT:
            continue
        w = onnx.numpy_helper.to_array(init, base_dir=str(prepared.parent))
        trans_b = any(a.name == "transB" and a.i for a in node.attribute)
        # ORT's per-channel axes: MatMul the last, Gemm the output channel, Conv 0.
        axis = (0 if trans_b else 1) if node.op_type == "Gemm" else (w.ndim - 1 if node.op_type == "MatMul" else 0)
        r = pair_range(w, axis, k_axis(node.op_type, w, axis, trans_b))
        r = np.where(r > 0, r, 1.0)  # an all-zero channel: any scale (ORT would pick 1 too)
        out[node.input[1]] = [{"axis": axis, "rmin": float(-v), "rmax": float(v)} for v in r]
    return out


def attention_score_overrides(
    plan: GraphPlan, nodes: Sequence[str], cfg: QuantizeConfig
) -> dict[str, list[dict[str, Any]]]:
    """ORT ``TensorQuantOverrides`` that quantize Q and K of each INT8 QKᵀ in ``nodes`` (selected
    by ``cfg.attention_scores``, the rest of the core float) as symmetric int8: OpenVINO's CPU
    plugin then runs QKᵀ, the softmax and AV as one int8 attention kernel. With the profile's
    asymmetric u8 the zero point's Subtract stays a separate f32 snippet and the attention f32."""
    if not (cfg.float_attention_core and cfg.attention_scores == "int8"):
        return {}  # float, or every core MatMul quantized as ORT does (float_attention_core=False)
    quant = require("onnxruntime.quantization")
    by_name = plan.by_name()
    scores = [by_name[n] for n in nodes if by_name[n].attention_scores]
    return {x: [{"quant_type": quant.QuantType.QInt8, "symmetric": True}] for n in scores for x in n.activations}
