"""An op's Q/DQ pairs as the QDQ graph stores them (``qdq_of``: activations, weights and its
output) and the same quantization in numpy (``quantize``, ``range_use``: SQNR, clipped share,
how much of the calibrated range a step uses), for ``attribute`` to take an op apart."""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from edgekit._deps import require
from edgekit.debug.topology import Entry
from edgekit.evaluate import power_ratio_db as sqnr_db


@dataclass(frozen=True)
class QdqInput:
    """One Q/DQ pair of the op: ``tensor`` is the float value before it (a weight: its
    quantized initializer), ``scale``/``zero_point`` as stored, ``axis`` for per-channel."""

    role: str  # activation | weight | output
    tensor: str
    scale: np.ndarray
    zero_point: np.ndarray
    qdtype: str
    axis: int | None
    values: np.ndarray | None = None  # a weight's stored integers

    def dequantize(self, q: np.ndarray) -> np.ndarray:
        shape = [1] * q.ndim
        if self.axis is not None and self.scale.ndim == 1 and q.ndim:
            shape[self.axis % q.ndim] = -1
        scale = self.scale.reshape(shape) if self.scale.ndim else self.scale
        zp = self.zero_point.astype(np.float64)
        return (q.astype(np.float64) - (zp.reshape(shape) if zp.ndim else zp)) * scale


def find_node(model: Any, entry: Entry) -> Any:
    """The candidate node that computes the entry's weighted op (or its captured op): the same
    name, or that name with the suffix a pre-processing pass added (``/MatMulAddFusion``, ``_matmul``)."""
    names = [entry.shown.name, *[n.name for n in entry.nodes]]
    for name in names:
        for node in model.graph.node:
            if node.name == name or node.name.startswith(name + "/") or node.name == f"{name}_matmul":
                return node
    produced = {o: n for n in model.graph.node for o in n.output}
    return produced.get(entry.tensor)


def quantized_ops(model: Any, names: Iterable[str]) -> set[str]:
    """Of the reference graph's op ``names``: those whose candidate node (``find_node``'s rule: the
    same name, or it with a pre-processing suffix) reads a dequantized input: the ops that
    quantize there. An op the candidate keeps float reads plain float tensors."""
    produced = {o: n.op_type for n in model.graph.node for o in n.output}
    fed: set[str] = set()
    for node in model.graph.node:
        if node.op_type in ("QuantizeLinear", "DequantizeLinear"):
            continue
        if any(produced.get(i) == "DequantizeLinear" for i in node.input):
            parts = node.name.split("/")  # "node_MatMul_3/MatMulAddFusion": also "node_MatMul_3"
            fed.update("/".join(parts[:k]) for k in range(1, len(parts) + 1))
            fed.add(node.name.removesuffix("_matmul"))
    return {n for n in names if n in fed}


def qdq_of(model: Any, node: Any, base_dir: str | Path = "") -> list[QdqInput]:
    """The Q/DQ pairs that feed ``node`` (activations, weights) and quantize its output; a tensor
    in an external-data file is read from ``base_dir`` (the model's folder)."""
    numpy_helper = require("onnx").numpy_helper
    inits = {i.name: i for i in model.graph.initializer}
    produced = {o: n for n in model.graph.node for o in n.output}
    consumers: dict[str, list[Any]] = {}
    for n in model.graph.node:
        for i in n.input:
            consumers.setdefault(i, []).append(n)

    def arr(dq: Any, k: int) -> np.ndarray:
        return (
            numpy_helper.to_array(inits[dq.input[k]], str(base_dir))
            if len(dq.input) > k and dq.input[k] in inits
            else np.zeros((), np.uint8)
        )

    def pair(dq: Any, role: str, tensor: str) -> QdqInput:
        axis = next((a.i for a in dq.attribute if a.name == "axis"), None)
        zp = arr(dq, 2)
        return QdqInput(
            role,
            tensor,
            arr(dq, 1).astype(np.float64),
            zp,
            str(zp.dtype),
            axis,
            arr(dq, 0) if role == "weight" else None,
        )

    out = []
    for name in node.input[:2]:
        dq = produced.get(name)
        if dq is None or dq.op_type != "DequantizeLinear":
            continue
        if dq.input[0] in inits:
            out.append(pair(dq, "weight", dq.input[0]))
        elif (q := produced.get(dq.input[0])) is not None and q.op_type == "QuantizeLinear":
            out.append(pair(dq, "activation", q.input[0]))
    for q in consumers.get(node.output[0], []):
        if q.op_type == "QuantizeLinear":
            dq = next((n for n in consumers.get(q.output[0], []) if n.op_type == "DequantizeLinear"), None)
            if dq is not None:
                out.append(pair(dq, "output", node.output[0]))
    return out


def _bounds(qdtype: str) -> tuple[int, int]:
    info = np.iinfo(np.dtype(qdtype))  # uint8 | int8 | uint16 | int16 | int32 (bias)
    return int(info.min), int(info.max)


def quantize(x: np.ndarray, p: QdqInput) -> tuple[np.ndarray, np.ndarray]:
    """(integer values, dequantized values) of ``x`` through ``p``'s Q/DQ (ONNX rounding: half to even)."""
    shape = [1] * x.ndim
    if p.axis is not None and p.scale.ndim == 1 and x.ndim:
        shape[p.axis % x.ndim] = -1
    s = p.scale.reshape(shape) if p.scale.ndim else p.scale
    zp = p.zero_point.astype(np.float64)
    zp = zp.reshape(shape) if zp.ndim else zp
    lo, hi = _bounds(p.qdtype)
    q = np.clip(np.round(x / s) + zp, lo, hi)
    return q, (q - zp) * s


def range_use(x: np.ndarray, p: QdqInput) -> dict[str, Any]:
    """SQNR of ``x`` through ``p``, share of values outside its range, and how much of the range
    (max |x| over the largest representable magnitude) this step uses."""
    _, dq = quantize(x, p)
    lo, hi = _bounds(p.qdtype)
    zp, s = p.zero_point.astype(np.float64), p.scale
    reach = float(np.max(np.maximum(np.abs((lo - zp) * s), np.abs((hi - zp) * s))))
    clipped = float(np.mean((x < np.min((lo - zp) * s)) | (x > np.max((hi - zp) * s)))) if x.size else 0.0
    return {
        "tensor": p.tensor,
        "role": p.role,
        "dtype": p.qdtype,
        "sqnr_db": sqnr_db(float(np.sum(x**2)), float(np.sum((x - dq) ** 2))),
        "clipped_share": clipped,
        "range_used": float(np.max(np.abs(x), initial=0.0)) / reach if reach > 0 else math.inf,
    }
