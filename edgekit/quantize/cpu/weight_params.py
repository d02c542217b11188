"""ORT's per-channel weight scales and zero points, computed over whole arrays instead of one
channel at a time.

``QDQQuantizer._calc_initializer_quant_params`` computes a per-channel weight's parameters in a
Python loop, one ``compute_data_quant_params`` call per output channel (Sana-600M: 1.2 M channels,
27 s of a 50 s ``quantize_static``). For the case quantize writes (symmetric per-channel integer
weights, no tensor overrides, no block size or minimum range) each step of that function is an
elementwise one: the channel's min and max, both widened to include 0, the larger magnitude, its
double over the integer range in float64, stored in the weight's dtype, and the scale 1 with zero
point 0 where it falls under the dtype's smallest normal. ``per_channel_params`` runs the same
steps on all channels at once, in the same dtypes, so the numbers are the same to the bit
(``tests/quantize/cpu/test_weight_params.py`` compares them with ORT's own function); anything else
(a NaN, on which ORT's assertion fails; an empty channel) is left to ORT.

``quantize_onnx_initializer`` then quantizes each weight with those parameters, again one channel
at a time (``quantize_nparray``: divide by the scale, round half to even, add the zero point, clip,
cast; 14 s of Sana-600M's 50 s). ``whole_array_initializers`` wraps it so that a per-channel integer
weight takes the same elementwise steps over the whole array at once, everything else ORT's own
function. ``onnxruntime`` and ``onnx`` are imported lazily.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from edgekit._deps import require

# The integer types whose symmetric ranges ORT's compute_data_quant_params handles this way.
INTEGER_TYPES = (2, 3, 4, 5)  # onnx.TensorProto UINT8, INT8, UINT16, INT16


def per_channel_params(
    data: np.ndarray, axis: int, quant_type: int, reduce_range: bool
) -> tuple[np.ndarray, np.ndarray] | None:
    """(zero points [C] of the quantized type, scales [C] of ``data``'s dtype) for ``data``'s
    channels along ``axis`` (C = data.shape[axis]), as ORT's per-channel loop computes them with
    ``symmetric=True``, no overrides and no minimum range; None where this does not apply
    (a dtype other than float32/float16, an empty channel, a NaN, a non-integer type)."""
    utils = require("onnxruntime.quantization.quant_utils")
    if quant_type not in INTEGER_TYPES or data.dtype not in (np.float32, np.float16) or not data.size:
        return None
    if not -data.ndim <= axis < data.ndim:
        return None
    axis %= data.ndim
    qmin, qmax = utils.get_qmin_qmax_for_qType(quant_type, reduce_range, symmetric=True)
    others = tuple(i for i in range(data.ndim) if i != axis)
    rmin, rmax = data.min(axis=others), data.max(axis=others)
    if np.isnan(rmin).any() or np.isnan(rmax).any():
        return None
    # compute_scale_zp: [rmin, rmax] widened to hold 0, made symmetric, in the weight's dtype.
    zero = np.array(0, dtype=data.dtype)
    absmax = np.maximum(np.abs(np.minimum(rmin, zero)), np.abs(np.maximum(rmax, zero)))
    dr = absmax.astype(np.float64) - (-absmax).astype(np.float64)
    dq = np.array(qmax, dtype=np.float64) - np.array(qmin, dtype=np.float64)
    scale = dr / dq
    finfo = np.finfo(data.dtype)
    stored = scale.astype(data.dtype)
    half = data.dtype == np.float16  # ORT keeps fp16 scales down to its subnormals
    tiny = (stored if half else scale) < (finfo.smallest_subnormal if half else finfo.tiny)
    middle = np.array(np.round((qmin + qmax) / np.array(2.0, dtype=np.float64)), dtype=qmin.dtype)
    zero_point = np.where(tiny, np.array(0, dtype=qmin.dtype), middle).astype(qmin.dtype)
    return zero_point, np.where(tiny, np.array(1.0, dtype=data.dtype), stored).astype(data.dtype)


def fast_params(quantizer: Any, name: str, info: Any) -> Any | None:
    """ORT's ``QuantizationParams`` for initializer ``name`` (``info``: its ``QDQTensorQuantInfo``)
    where ``quantizer`` (a ``QDQQuantizer``) would compute them with its per-channel loop and
    ``per_channel_params`` applies; else None (ORT computes them)."""
    quant_utils = require("onnxruntime.quantization.quant_utils")
    qdq = require("onnxruntime.quantization.qdq_quantizer")
    if info.tensor_type is not qdq.QDQQuantTensorType.WEIGHT or info.axis is None:
        return None
    if name in quantizer.tensor_quant_overrides or quantizer.block_size > 0 or quantizer.min_real_range is not None:
        return None
    initializer = quant_utils.find_by_name(name, quantizer.model.initializer())
    if initializer is None:
        return None
    data = quant_utils.tensor_proto_to_array(initializer)
    found = per_channel_params(data, info.axis, quantizer.weight_qType, quantizer.reduce_range)
    if found is None:
        return None
    zero_point, scale = found
    return qdq.QuantizationParams(
        zero_point=zero_point, scale=scale, quant_type=quantizer.weight_qType, axis=int(info.axis) % data.ndim
    )


def quantize_per_channel(
    data: np.ndarray, quant_type: int, zero_point: np.ndarray, scale: np.ndarray, axis: int
) -> np.ndarray | None:
    """``data`` quantized per channel along ``axis`` as ORT's ``quantize_onnx_initializer`` loop
    quantizes it (``quantize_nparray`` of each channel), in the quantized type's numpy dtype; None
    where this does not apply (a non-integer type, parameters not one per channel)."""
    utils = require("onnxruntime.quantization.quant_utils")
    axis %= data.ndim
    channels = data.shape[axis]
    if quant_type not in INTEGER_TYPES or np.shape(scale) != (channels,) or np.shape(zero_point) != (channels,):
        return None
    dtype = utils.ONNX_TYPE_TO_NP_TYPE[quant_type]
    qmin, qmax = utils.get_qmin_qmax_for_qType(quant_type, reduce_range=False, symmetric=False)
    along = [channels if i == axis else 1 for i in range(data.ndim)]
    values = np.asarray((data.astype(np.float32) / scale.reshape(along)).round() + zero_point.reshape(along))
    np.clip(values, qmin, qmax, out=values)
    return values.astype(dtype)


def whole_array_initializers(orts: Any) -> Any:
    """ORT's ``quantize_onnx_initializer`` (``orts``), with a per-channel integer weight quantized
    over its whole array (``quantize_per_channel``) and written as ORT writes it."""
    onnx = require("onnx")
    utils = require("onnxruntime.quantization.quant_utils")

    def quantize_onnx_initializer(
        weight: Any,
        quant_type: Any,
        zero_point: np.ndarray,
        scale: np.ndarray,
        axis: int | None = None,
        quant_weight_name: str | None = None,
        block_size: int = 0,
    ) -> Any:
        if axis is None or block_size > 0 or quant_type not in INTEGER_TYPES:
            return orts(weight, quant_type, zero_point, scale, axis, quant_weight_name, block_size)
        data = utils.tensor_proto_to_array(weight)
        quantized = quantize_per_channel(data, quant_type, zero_point, scale, axis)
        if quantized is None:
            return orts(weight, quant_type, zero_point, scale, axis, quant_weight_name, block_size)
        name = quant_weight_name if quant_weight_name else f"{weight.name}{utils.TENSOR_NAME_QUANT_SUFFIX}"
        dtype = onnx.helper.tensor_dtype_to_np_dtype(quant_type)
        return onnx.numpy_helper.from_array(np.asarray(quantized, dtype=dtype).reshape(weight.dims), name)

    return quantize_onnx_initializer


__all__ = ["fast_params", "per_channel_params", "quantize_per_channel", "whole_array_initializers"]
