"""``Sin`` over large tensors rewritten for OpenVINO's CPU plugin as a polynomial it compiles.

The CPU plugin has no vector kernel for ``Sin``: it runs the reference one (exec type
``ref_any_f32``, one ``std::sin`` per value). Snake activations (``x + sin²(αx)/β``: Matcha-TTS's
decoder, BigVGAN and HiFi-GAN-style vocoders) apply it to every activation of a block, and on
matcha's decoder at 400 frames it was 27 % of an INT8 forward on OpenVINO (13.6 of 49.7 ms; 20 %
of FP32's). Written as multiplies, adds, ``Round`` and ``Floor``, the same function is one fused
elementwise kernel (a JIT ``Subgraph``): 0.68 against 4.22 ms on a float32[2, 400, 1024] tensor,
2 threads, AMD EPYC (AVX-512), OpenVINO 2026.4 (``benchmarks/elementwise_rewrites.py``). ONNX
Runtime's own ``Sin`` is vectorised, and the same chain as separate ONNX nodes ran 2.2x slower
there than its ``Sin``: so the rewrite is made on the ``ov.Model`` only, when edgekit's OpenVINO
runtime reads a model and when ``build`` writes an IR, never in the ONNX files.

The function: ``k = round(x / π)``, ``r = x - k·π`` with π in three parts (Cody-Waite: each
``k·part`` exact for |k| < 2^12, so ``r`` is exact to float rounding for |x| up to ~12,000 and
degrades gently beyond), ``sin(r)`` by its odd Taylor series to r¹¹ (truncation below 6e-8 on
[-π/2, π/2]), and the sign ``(-1)^k`` from ``k``'s parity (``k - 2·floor(k/2)``). Against float64
``sin`` it errs by float32 rounding (about 1e-7 absolute, as ``std::sin`` of a float32 argument
does). Tensors under ``MIN_ELEMENTS`` values keep ``Sin`` (a flow's time embedding: microseconds,
and arguments up to 1000·t where the exact kernel is the safer one). ``openvino`` is imported only
when a function runs.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from edgekit._deps import require

# A Sin over fewer values than this keeps the reference kernel (it costs microseconds there).
MIN_ELEMENTS = 16384
# π = PI_1 + PI_2 + PI_3: PI_1 = 201/64 (8 significant bits) and PI_2 = 4059/2^22 (12), so k·PI_1
# and k·PI_2 are exact in float32 for |k| < 2^12; PI_3 (-8.7e-8) is the rest.
PI_1 = 201 / 64
PI_2 = 4059 / 2**22
PI_3 = math.pi - PI_1 - PI_2
# sin(r) = r·(1 + r²·(c3 + r²·(c5 + ...))): the odd Taylor coefficients to r¹¹.
SIN_COEFFICIENTS = tuple((-1) ** n / math.factorial(2 * n + 1) for n in range(6))


def large_sins(model: Any) -> list[Any]:
    """The ``Sin`` nodes of ``model`` (an ``ov.Model``) whose output has a static shape of at least
    ``MIN_ELEMENTS`` float32 values."""
    found = []
    for op in model.get_ordered_ops():
        if op.get_type_name() != "Sin" or op.get_output_element_type(0).get_type_name() != "f32":
            continue
        shape = op.get_output_partial_shape(0)
        if shape.is_static and math.prod(d.get_length() for d in shape) >= MIN_ELEMENTS:
            found.append(op)
    return found


def rewrite_sins(model: Any) -> int:
    """Replace each of ``large_sins(model)`` by the polynomial above, in place; how many it replaced.
    Shapes and dtypes are unchanged (float32 in, float32 out, the same shape)."""
    sins = large_sins(model)
    if not sins:
        return 0
    ops = require("openvino").opset13

    def c(value: float) -> Any:
        return ops.constant(np.float32(value))

    for sin in sins:
        x = sin.input_value(0)
        k = ops.round(ops.multiply(x, c(1.0 / math.pi)), "half_to_even")
        r = x
        for part in (PI_1, PI_2, PI_3):
            r = ops.subtract(r, ops.multiply(k, c(part)))
        u = ops.multiply(r, r)
        acc: Any = c(SIN_COEFFICIENTS[-1])
        for coefficient in reversed(SIN_COEFFICIENTS[:-1]):
            acc = ops.add(ops.multiply(acc, u), c(coefficient))
        odd = ops.subtract(k, ops.multiply(ops.floor(ops.multiply(k, c(0.5))), c(2.0)))  # 0 or 1
        sign = ops.subtract(c(1.0), ops.multiply(odd, c(2.0)))
        out = ops.multiply(ops.multiply(acc, r), sign)
        out.set_friendly_name(sin.get_friendly_name())
        for target in list(sin.output(0).get_target_inputs()):
            target.replace_source_output(out.output(0))
        # An output port keeps its tensor names on the new producer.
        out.output(0).get_tensor().set_names(sin.output(0).get_tensor().get_names())
    model.validate_nodes_and_infer_types()
    return len(sins)


__all__ = ["MIN_ELEMENTS", "large_sins", "rewrite_sins"]
