"""What a quantized file holds: its weight-only nodes, the QDQ structure summary, and TensorRT's QDQ
rule violations (its INT8 nodes and their weight pairs: ``arithmetic.quantized_nodes``,
``arithmetic.int8_weight_pairs``)."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np

from edgekit._deps import require
from edgekit.arithmetic import quantized_nodes
from edgekit.quantize.graph import FLOAT


# ---- structure of the result -------------------------------------------------------------------
def weight_only_nodes(model: Any) -> set[str]:
    """Names of weight-only nodes: not quantized (``quantized_nodes``), yet their weight (input
    1) is the output of a DequantizeLinear of an integer initializer; they compute in float."""
    inits = {i.name: i for i in model.graph.initializer}
    weight_dq = {
        n.output[0]
        for n in model.graph.node
        if n.op_type == "DequantizeLinear" and n.input[0] in inits and inits[n.input[0]].data_type != FLOAT
    }
    int8 = quantized_nodes(model)
    return {
        n.name
        for n in model.graph.node
        if n.op_type not in ("QuantizeLinear", "DequantizeLinear")
        and n.name not in int8
        and len(n.input) > 1
        and n.input[1] in weight_dq
    }


def qdq_structure(path: Path) -> dict[str, Any]:
    """Op counts, quantized nodes and the zero points/dtypes of every Q/DQ node of a QDQ model."""
    onnx = require("onnx")
    numpy_helper = onnx.numpy_helper
    model = onnx.load(str(path), load_external_data=False)  # the graph; a scale read where it is needed
    base = str(path.parent)
    inits = {i.name: i for i in model.graph.initializer}
    qdq = []
    for node in model.graph.node:
        if node.op_type not in ("QuantizeLinear", "DequantizeLinear"):
            continue
        scale = numpy_helper.to_array(inits[node.input[1]], base) if node.input[1] in inits else None
        zp = (
            numpy_helper.to_array(inits[node.input[2]], base)
            if len(node.input) > 2 and node.input[2] in inits
            else None
        )
        qdq.append(
            {
                "name": node.name,
                "op": node.op_type,
                "input": node.input[0],
                "constant_input": node.input[0] in inits,
                "scale_size": None if scale is None else int(scale.size),
                "axis": next((a.i for a in node.attribute if a.name == "axis"), None),
                "zero_point_dtype": None if zp is None else str(zp.dtype),
                "zero_point_max_abs": None if zp is None else int(np.abs(zp.astype(np.int64)).max(initial=0)),
                "quantized_dtype": str(onnx.helper.tensor_dtype_to_np_dtype(inits[node.input[0]].data_type))
                if node.input[0] in inits
                else None,
            }
        )
    return {
        "ops": dict(Counter(n.op_type for n in model.graph.node)),
        "quantized_nodes": sorted(quantized_nodes(model)),
        "weight_only_nodes": sorted(weight_only_nodes(model)),
        "qdq": qdq,
    }


def trt_violations(path: Path) -> list[str]:
    """Where a QDQ model breaks TensorRT's explicit-quantization rules (empty = none): every
    zero point int8 and 0; weights per-channel (one scale per output channel); no bias Q/DQ."""
    onnx = require("onnx")
    model = onnx.load(str(path), load_external_data=False)  # the graph: what is quantized, not the weights
    struct = qdq_structure(path)
    problems = []
    for q in struct["qdq"]:
        if q["zero_point_dtype"] != "int8":  # no zero point at all means uint8 in ONNX
            problems.append(
                f"{q['name']}: zero point dtype {q['zero_point_dtype'] or 'absent (uint8)'} (TensorRT: int8)"
            )
        if q["zero_point_max_abs"]:
            problems.append(f"{q['name']}: zero point {q['zero_point_max_abs']} != 0 (TensorRT: symmetric)")
        if q["quantized_dtype"] not in (None, "int8"):
            problems.append(f"{q['name']}: quantized weight dtype {q['quantized_dtype']} (TensorRT: int8)")
    by_output = {o: n for n in model.graph.node for o in n.output}
    inits = {i.name for i in model.graph.initializer}
    for node in model.graph.node:
        if node.op_type not in ("MatMul", "Gemm", "Conv"):
            continue
        for slot, name in enumerate(node.input):
            dq = by_output.get(name)
            if dq is None or dq.op_type != "DequantizeLinear":
                continue
            entry = next(q for q in struct["qdq"] if q["name"] == dq.name)
            if dq.input[0] in inits and slot == 2:
                problems.append(f"{node.name}: bias is quantized (TensorRT: keep bias float)")
            elif dq.input[0] in inits and (entry["scale_size"] or 1) <= 1:
                problems.append(f"{node.name}: weight is per-tensor (TensorRT profile: per-channel)")
            elif dq.input[0] not in inits and (entry["scale_size"] or 1) > 1:
                problems.append(f"{node.name}: activation is per-channel (TensorRT: per-tensor)")
    return problems
