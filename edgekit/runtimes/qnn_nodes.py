"""What the HTP backend does not compute as asked, read from a graph or the QNN EP's log: the nodes
it refused, and the nodes that would compute in float (the HTP has no float32)."""

from __future__ import annotations

import re
from pathlib import Path

from edgekit._deps import require
from edgekit.runtimes.onnx_file import load_onnx

_UNSUPPORTED = re.compile(r"\{ name: ([^,]+), type: ([^ }]+) \}")
_VALIDATE = re.compile(r"failed for node `([^`]+)` of type `([^`]+)`")


def refused_nodes(log: str) -> list[dict[str, str]]:
    """[{node, op, qnn_op}] the QNN EP logged as refused (its GetCapability and op validation)."""
    qnn_ops = {m.group(1): m.group(2) for m in _VALIDATE.finditer(log)}
    out, seen = [], set()
    for match in _UNSUPPORTED.finditer(log):
        name, op = match.group(1).strip(), match.group(2).strip()
        if name not in seen:
            seen.add(name)
            out.append({"node": name, "op": op, "qnn_op": qnn_ops.get(name, "")})
    return out


# Ops that move data without arithmetic: on a float graph input (``t`` unsqueezed before its
# QuantizeLinear; in bundles of the AR "loop" form, one layer's slice of the stacked ``k_cache``
# selected by Gather; the "layers" form's caches are inputs of their own, quantized as they enter)
# they compute nothing in float, and the QNN quantizer leaves them so.
DATA_MOVEMENT_OPS = frozenset(
    {"Reshape", "Unsqueeze", "Squeeze", "Transpose", "Flatten", "Identity", "Gather", "Slice"}
)


def float_nodes(model_path: Path) -> list[dict[str, str]]:
    """[{node, op}] of a graph's nodes that compute in float32: a float input that is not a
    DequantizeLinear output (data movement, ``DATA_MOVEMENT_OPS``, aside). The HTP has no float32
    arithmetic: it runs such a node in fp16 (v73+, the soc_model set) or not at all."""
    onnx = require("onnx")
    model = load_onnx(model_path)
    graph = model.graph
    types = {vi.name: vi.type.tensor_type.elem_type for vi in [*graph.input, *graph.output, *graph.value_info]}
    types.update({i.name: i.data_type for i in graph.initializer})
    try:
        inferred = onnx.shape_inference.infer_shapes(model).graph
        types.update({vi.name: vi.type.tensor_type.elem_type for vi in inferred.value_info})
    except Exception:  # noqa: BLE001 - best effort: unknown types count as not float
        pass
    producer = {o: n for n in graph.node for o in n.output}
    out = []
    for node in graph.node:
        if node.op_type in ("QuantizeLinear", "DequantizeLinear", "Constant") or node.op_type in DATA_MOVEMENT_OPS:
            continue
        float_inputs = [i for i in node.input if i and types.get(i) == onnx.TensorProto.FLOAT]
        if any(getattr(producer.get(i), "op_type", None) != "DequantizeLinear" for i in float_inputs):
            out.append({"node": node.name, "op": node.op_type})
    return out
