"""OpenVINO IR files (``.xml`` graph + ``.bin`` weights) written from a bundle's ONNX, and what a
compiled model's execution graph runs in which precision. ``openvino`` is imported only when a
function runs.

``ov.save_model`` is not a plain copy of the graph: it runs OpenVINO's offline (MOC)
transformations first. On a QDQ model that folds each weight's Q/DQ pair into an i8 constant with
its decompression (Convert, Subtract, Multiply), and fuses tanh-GELU into ``Gelu`` and the
attention core into ``ScaledDotProductAttention``; the CPU plugin does the same at compile time
when it reads the ONNX, so the IR compiles to the same kernels (measured on the demo models:
the same FullyConnected u8/f32 counts, outputs 58-75 dB from the ONNX's: float rounding). ``compress_to_fp16``
stores float weights as f16 (decompressed to f32 again when the CPU compiles in f32); OpenVINO
ignores it for a model that is already quantized (any FakeQuantize), so a QDQ model's
"compressed" IR is byte for byte its plain one.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

from edgekit._deps import require
from edgekit.errors import EdgekitError
from edgekit.runtimes.openvino import _first_reason, openvino_version
from edgekit.runtimes.openvino_sin import rewrite_sins

# Route name -> compress_to_fp16 of ``ov.save_model``.
IR_ROUTES: dict[str, bool] = {"ir": False, "ir-fp16": True}
# The exec graph's node types that do the arithmetic a precision decides (matmuls, convolutions,
# the snippets that hold the attention core and fused elementwise chains); reshapes, transposes
# and constants move data in whatever type they are given.
COMPUTE_TYPES: tuple[str, ...] = (
    "FullyConnected",
    "MatMul",
    "Convolution",
    "GroupConvolution",
    "Deconvolution",
    "ScaledDotProductAttention",
    "Subgraph",
)


def save_ir(
    onnx_path: str | Path, xml_path: str | Path, compress_to_fp16: bool, for_cpu: bool = False
) -> tuple[Path, Path]:
    """Convert ``onnx_path`` (weights in a side file are read beside it) and write the IR as
    ``xml_path`` and its ``.bin`` beside it (the name ``read_model`` looks for); (xml, bin).
    ``for_cpu``: with ``Sin`` over large tensors as the polynomial the CPU plugin fuses
    (``openvino_sin``), as edgekit's runtime compiles it, so a plain OpenVINO reading the IR runs it
    as fast."""
    ov = require("openvino")
    xml = Path(xml_path)
    try:
        model = ov.convert_model(str(onnx_path))
        if for_cpu:
            rewrite_sins(model)
        ov.save_model(model, str(xml), compress_to_fp16=compress_to_fp16)
    except Exception as exc:  # noqa: BLE001 - ovc raises its own Error type besides the frontends' RuntimeErrors
        raise EdgekitError(
            f"OpenVINO {openvino_version()} cannot write {Path(onnx_path).name} as IR: {_first_reason(exc)}",
            hint="run `edgekit lint BUNDLE --target intel-cpu` for every finding",
        ) from None
    return xml, xml.with_suffix(".bin")


def exec_precisions(compiled: Any) -> dict[str, dict[str, int]]:
    """{exec node type: {runtime precision: count}} of ``compiled``'s (an ``ov.CompiledModel``)
    compute nodes (``COMPUTE_TYPES``), e.g. ``{"FullyConnected": {"u8": 13, "f32": 4}}``: u8/i8
    is an int8 kernel, f32 a float one (a float fallback, the attention core)."""
    counts: Counter[tuple[str, str]] = Counter()
    for op in compiled.get_runtime_model().get_ordered_ops():
        info = op.get_rt_info()
        kind = str(info["layerType"].astype(str)) if "layerType" in info else op.get_type_name()
        if kind not in COMPUTE_TYPES:
            continue
        precision = str(info["runtimePrecision"].astype(str)) if "runtimePrecision" in info else "unknown"
        counts[(kind, precision)] += 1
    table: dict[str, dict[str, int]] = {}
    for (kind, precision), n in sorted(counts.items()):
        table.setdefault(kind, {})[precision] = n
    return table


__all__ = ["COMPUTE_TYPES", "IR_ROUTES", "exec_precisions", "save_ir"]
