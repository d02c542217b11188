"""``edgekit inspect BUNDLE --float-set FORMAT``: the layers quantize kept float, as the other
quantizers take an exclusion list, so edgekit's float set can be reproduced with them.

The set is every layer the manifest's ``quantization.selection.float`` lists (kept float by rule,
``--exclude``, an override or the budget; weight-only layers too: their compute is float, and an
exclusion list can only say "not quantized"), named in the bundle's FP32 graph (``fp32_nodes``:
a fused MatMul + Add is both nodes). Each format is the keyword arguments of the tool's own call:

- ``nncf``: ``nncf.IgnoredScope(**doc)`` for ``nncf.quantize`` on the FP32 ONNX model (its
  node names);
- ``openvino``: ``nncf.IgnoredScope(**doc)`` for ``nncf.quantize`` on the OpenVINO model read
  from the FP32 ONNX (``ov.Core().read_model`` / ``ov.convert_model``): OpenVINO's own names for
  those ops (``openvino_names``: a Conv's bias becomes its own op, the op that makes a graph output
  takes the output's name);
- ``ort``: ``quantize_static(..., **doc)`` (``nodes_to_exclude``) on the FP32 ONNX as exported;
- ``ort-prepared``: the same after onnxruntime's ``quant_pre_process`` (which renames fused nodes),
  the names edgekit's own quantize run gave ORT (same onnxruntime version).
"""

from __future__ import annotations

from typing import Any

from edgekit.bundle import Bundle
from edgekit.errors import BundleError, UsageError, one_of
from edgekit.inspect.openvino_names import openvino_names
from edgekit.runtimes.onnx_file import load_onnx

FORMATS: tuple[str, ...] = ("nncf", "openvino", "ort", "ort-prepared")


def float_set(bundle: Bundle, fmt: str) -> tuple[dict[str, Any], list[str]]:
    """(the ``fmt`` document, warnings: layers no FP32 node could be named for)."""
    one_of("--float-set", fmt, FORMATS)
    q = bundle.quantization
    if q is None:
        raise UsageError(
            f"bundle {bundle.root} has no quantization summary: nothing was kept float yet",
            hint=f"quantize it first: `edgekit quantize {bundle.root}`",
        )
    rows = q.float_nodes
    if fmt == "ort-prepared":
        return {"nodes_to_exclude": list(dict.fromkeys(r.node for r in rows))}, []
    if any(r.fp32_nodes is None for r in rows):
        raise BundleError(
            f"bundle {bundle.root} was quantized by an edgekit that did not record the FP32 graph's names of "
            "its float layers",
            hint=f"re-quantize with `edgekit quantize {bundle.root}` (it records them), or --float-set ort-prepared",
        )
    warnings = [
        f"{r.node} ({r.module or 'no torch module'}): no node of the FP32 graph is known to have made it; left out"
        for r in rows
        if not r.fp32_nodes
    ]
    graph = load_onnx(bundle.path_of("fp32"), "artifact 'fp32'").graph  # names only: no weights read
    order = {n.name: i for i, n in enumerate(graph.node)}
    names = sorted({n for r in rows for n in r.fp32_nodes or () if n in order}, key=order.__getitem__)
    gone = sorted({n for r in rows for n in r.fp32_nodes or () if n not in order})
    if gone:
        raise BundleError(
            f"the FP32 graph of {bundle.root} has no node {gone[0]!r} that its quantization summary names",
            hint=f"the fp32 model changed since it was quantized: re-quantize with `edgekit quantize {bundle.root}`",
        )
    if fmt == "ort":
        return {"nodes_to_exclude": names}, warnings
    if fmt == "nncf":
        return {"names": names}, warnings
    renamed, missing = openvino_names(bundle.path_of("fp32"), graph, names)
    warnings += [f"{n}: OpenVINO has no op of this name or made from it; left out" for n in missing]
    return {"names": renamed}, warnings


__all__ = ["FORMATS", "float_set"]
