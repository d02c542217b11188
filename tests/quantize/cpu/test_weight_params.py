"""Per-channel weight parameters over whole arrays (``edgekit.quantize.cpu.weight_params``): the
numbers ORT's own per-channel loop computes, to the bit, channel for channel."""

from __future__ import annotations

import numpy as np
import pytest

quant_utils = pytest.importorskip("onnxruntime.quantization.quant_utils")

from edgekit.quantize.cpu.weight_params import per_channel_params  # noqa: E402

UINT8, INT8, UINT16, INT16 = 2, 3, 4, 5


def orts(data: np.ndarray, axis: int, quant_type: int, reduce_range: bool) -> tuple[np.ndarray, np.ndarray]:
    """What ``QDQQuantizer._calc_initializer_quant_params`` computes for a per-channel weight."""
    zero_points, scales = [], []
    for i in range(data.shape[axis]):
        zp, scale = quant_utils.compute_data_quant_params(
            data.take(i, axis).ravel(), quant_type, True, reduce_range=reduce_range
        )
        zero_points.append(zp)
        scales.append(scale)
    return np.asarray(zero_points), np.asarray(scales)


def weights(shape, dtype, seed=0) -> np.ndarray:
    """Random weights whose first channels are the edge cases: all zero, all negative, subnormal
    (a scale under float32's smallest normal: ORT's 1.0 and zero point 0), one huge value."""
    rng = np.random.default_rng(seed)
    w = (rng.standard_normal(shape) * rng.uniform(1e-3, 10.0, size=shape[:1] + (1,) * (len(shape) - 1))).astype(dtype)
    w[0] = 0
    w[1] = -np.abs(w[1])
    if dtype == np.float32:
        w[2] = np.float32(1e-40)
    w[3].flat[0] = np.finfo(dtype).max / 2
    return w


def along(shape, axis, dtype) -> np.ndarray:
    """``weights`` of ``shape`` with its channels (and edge cases) along ``axis``."""
    axis %= len(shape)
    first = (shape[axis],) + tuple(d for i, d in enumerate(shape) if i != axis)
    return np.ascontiguousarray(np.moveaxis(weights(first, dtype), 0, axis))


@pytest.mark.parametrize("dtype", [np.float32, np.float16])
@pytest.mark.parametrize("quant_type", [INT8, UINT8, INT16, UINT16])
@pytest.mark.parametrize("reduce_range", [False, True])
@pytest.mark.parametrize("shape, axis", [((64, 48), 0), ((48, 64), 1), ((32, 8, 3, 3), 0), ((6, 16, 5), -1)])
def test_whole_array_parameters_are_orts_to_the_bit(dtype, quant_type, reduce_range, shape, axis):
    data = along(shape, axis, dtype)
    assert data.shape == shape
    got = per_channel_params(data, axis, quant_type, reduce_range)
    assert got is not None
    zp, scale = orts(data, axis % data.ndim, quant_type, reduce_range)
    assert got[0].dtype == zp.dtype and got[1].dtype == scale.dtype
    assert got[0].shape == zp.shape == scale.shape == (data.shape[axis],)
    np.testing.assert_array_equal(got[0], zp)
    np.testing.assert_array_equal(got[1], scale)


def test_what_orts_loop_would_refuse_or_compute_otherwise_is_left_to_it():
    data = weights((8, 4), np.float32)
    nan = data.copy()
    nan[5, 1] = np.nan  # ORT's assertion on the scale fails: it says so, not this
    assert per_channel_params(nan, 0, INT8, False) is None
    assert per_channel_params(np.zeros((0, 4), np.float32), 0, INT8, False) is None
    assert per_channel_params(data.astype(np.float64), 0, INT8, False) is None
    assert per_channel_params(data, 2, INT8, False) is None  # no such axis
    assert per_channel_params(data, 0, 21, False) is None  # INT4: ORT's own path


@pytest.mark.filterwarnings("ignore:overflow encountered")  # fp16's largest value over a scale: ORT's too
@pytest.mark.parametrize("dtype", [np.float32, np.float16])
@pytest.mark.parametrize("quant_type", [INT8, UINT8, INT16])
@pytest.mark.parametrize("shape, axis", [((64, 48), 0), ((48, 64), 1), ((32, 8, 3, 3), 0)])
def test_whole_array_quantized_weights_are_orts_initializer_byte_for_byte(dtype, quant_type, shape, axis):
    """Quantized with ORT's own parameters (half the values on a rounding tie or past the clip
    bounds would show a different order of steps): the initializer ORT writes, byte for byte."""
    onnx = pytest.importorskip("onnx")
    from edgekit.quantize.cpu.weight_params import whole_array_initializers

    data = along(shape, axis, dtype)
    zp, scale = orts(data, axis, quant_type, False)
    data.flat[::7] = (np.round(data.flat[::7] / scale.max()) + 0.5) * scale.max()  # ties
    weight = onnx.numpy_helper.from_array(data, "w")
    theirs = quant_utils.quantize_onnx_initializer(weight, quant_type, zp, scale, axis)
    ours = whole_array_initializers(quant_utils.quantize_onnx_initializer)(weight, quant_type, zp, scale, axis)
    assert ours.SerializeToString() == theirs.SerializeToString()
    named = whole_array_initializers(quant_utils.quantize_onnx_initializer)(weight, quant_type, zp, scale, axis, "q")
    assert named.name == "q"


def test_what_the_whole_array_quantizer_does_not_handle_is_orts():
    from edgekit.quantize.cpu.weight_params import quantize_per_channel, whole_array_initializers

    data = along((8, 4), 0, np.float32)
    zp, scale = orts(data, 0, INT8, False)
    assert quantize_per_channel(data, INT8, zp[:4], scale[:4], 0) is None  # not one per channel
    asked = []
    wrapped = whole_array_initializers(lambda *a: asked.append(a) or "orts")
    onnx = pytest.importorskip("onnx")
    weight = onnx.numpy_helper.from_array(data, "w")
    assert wrapped(weight, INT8, zp[0], scale[0]) == "orts"  # per tensor
    assert wrapped(weight, INT8, zp, scale, 0, None, 4) == "orts"  # per block
    assert len(asked) == 2
