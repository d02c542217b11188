"""Embedding tables stored int8 (the cpu profile's ``ProfileSettings.int8_gather_tables``): a step
after ORT's quantizer, which quantizes MatMul/Gemm/Conv only and leaves a Gather's table in FP32.

Each table a selected Gather reads (``select.select_tables``) becomes a symmetric int8 table with
one float scale per row, and only the gathered rows are dequantized::

    Gather(table_int8 [V, D], idx) -> Cast(float) ─┐
    Gather(row_scale [V, 1], idx) ─────────────────┴─ Mul -> the Gather's old output [..., D]

so no kernel reads the whole table per call (a DequantizeLinear of the table before the Gather
would dequantize all of it at every forward on ORT, which folds no DequantizeLinear). Not a
DequantizeLinear after the Gather either: one scale per gathered row is a per-axis scale only for
1-D indices, and the blocked form (opset 21) is newer than the bundles' opset 18. A row rounds to
int8 with max |row| / 127: 42-49 dB SQNR per row measured (Gaussian rows lose most), below the
noise of the INT8 MatMuls around it.

The table's FP32 bytes leave the file: a model with external data gets the int8 table and the
scales appended to its own side file (``<name>.data``); its graph is read without its weights.
``onnx`` is imported lazily."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Collection, Mapping
from pathlib import Path
from typing import Any

import numpy as np

from edgekit._deps import require
from edgekit._sidefiles import INLINE_TENSOR_BYTES, external_data_locations
from edgekit.quantize.graph import FLOAT, GraphPlan, is_row_gather

# A table under this many FP32 bytes stays float. What int8 saves grows with the table (3 of every 4
# bytes, less 4 bytes of scale per row); what it costs hardly does: three more kernels per call
# (Gather of the scales, Cast, Mul) and a rounding step. Measured (benchmarks/gather_tables.py, AMD
# EPYC avx512-vnni, 2 threads, alone under the lock): the demo token table (65 x 128, [8, 64] ids)
# +25 us per call on ORT (11.6 -> 37.0), +3 us on OpenVINO; aMUSEd-256's (8256 x 768, [2, 256] ids)
# +154 us on ORT, -94 us on OpenVINO (its Gather reads a quarter of the bytes). From 16 KiB (4,096
# values: 32 rows of 128) a table saves at least 12 KiB; a class-label table of a few rows (the
# demos' 9 x 128, 4.6 KB) would save 3 KB for the same per-call price and stays float.
MIN_TABLE_BYTES = 16 * 1024
_INT8 = 3  # onnx.TensorProto.INT8


def per_row_int8(table: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(int8 table, float32 scales) of a float table [V, ...]: symmetric, one scale per row
    (max |row| / 127; an all-zero row scale 1), shaped [V, 1, ...] to broadcast over a gathered row."""
    w = np.asarray(table, np.float32)
    reduce = tuple(range(1, w.ndim))
    scale = (np.abs(w).max(axis=reduce, keepdims=True) / 127.0).astype(np.float32)
    scale[scale == 0] = 1.0
    q = np.clip(np.round(w / scale), -127, 127).astype(np.int8)
    return q, scale


def store_tables_int8(path: Path, gathers: Collection[str]) -> list[str]:
    """Store the table of each Gather of ``gathers`` in the model at ``path`` as int8 with per-row
    scales (edited in place); returns the Gathers now reading an int8 table. A table another node
    reads too (a Gather not in ``gathers``, any other op) stays float."""
    wanted = set(gathers)
    if not wanted:
        return []
    onnx = require("onnx")
    numpy_helper, helper = onnx.numpy_helper, onnx.helper
    path = Path(path)
    model = onnx.load(str(path), load_external_data=False)  # the graph; a table is read when converted
    g = model.graph
    inits = {i.name: i for i in g.initializer}
    readers: dict[str, list[Any]] = defaultdict(list)
    for node in g.node:
        for i in node.input:
            readers[i].append(node)
    # A table that is a graph output, a graph input's default (IR < 4) or read in an If/Loop body
    # has a reader this step cannot rewire: it stays float.
    fixed = {v.name for v in (*g.output, *g.input)} | _read_in_subgraphs(g)
    todo = sorted(
        {
            n.input[0]
            for n in g.node
            if n.name in wanted and n.input and n.input[0] in inits and inits[n.input[0]].data_type == FLOAT
        }
    )
    todo = [
        t
        for t in todo
        if t not in fixed and all(r.name in wanted and is_row_gather(r, t) for r in readers[t]) and inits[t].dims
    ]
    if not todo:
        return []
    sink = _SideFile(path) if external_data_locations(path) else None
    after: dict[str, list[Any]] = {}  # Gather name -> the nodes that dequantize its rows
    converted = []
    for t in todo:
        q, scale = per_row_int8(numpy_helper.to_array(inits[t], base_dir=str(path.parent)))
        g.initializer.remove(inits[t])
        for array, name in ((q, f"{t}_int8"), (scale, f"{t}_row_scale")):
            tensor = numpy_helper.from_array(array, name)
            if sink is not None:
                sink.move(tensor)
            g.initializer.append(tensor)
        for r in readers[t]:
            out, idx = r.output[0], r.input[1]
            r.input[0] = f"{t}_int8"
            r.output[0] = f"{out}_int8"
            after[r.name] = [
                helper.make_node("Gather", [f"{t}_row_scale", idx], [f"{out}_row_scale"], name=f"{r.name}_row_scale"),
                helper.make_node("Cast", [f"{out}_int8"], [f"{out}_float"], name=f"{r.name}_cast", to=FLOAT),
                helper.make_node("Mul", [f"{out}_float", f"{out}_row_scale"], [out], name=f"{r.name}_dequantize"),
            ]
            converted.append(r.name)
    nodes = []
    for node in g.node:  # each Gather's dequantization right after it: the graph stays sorted
        nodes.append(node)
        nodes.extend(after.get(node.name, []))
    del g.node[:]
    g.node.extend(nodes)
    if sink is not None:
        sink.close()
    onnx.save_model(model, str(path))
    return converted


def _read_in_subgraphs(graph: Any) -> set[str]:
    """Every name a node inside an If/Loop/Scan body of ``graph`` reads (at any depth)."""
    out: set[str] = set()
    for node in graph.node:
        for attr in node.attribute:
            for sub in [attr.g, *attr.graphs] if attr.HasField("g") else list(attr.graphs):
                out |= {i for n in sub.node for i in n.input} | _read_in_subgraphs(sub)
    return out


class _SideFile:
    """The model's own side file (``<name>.data``), appended to: a tensor moved there leaves the
    graph. One the model does not read yet (a stale file of that name) is started anew."""

    def __init__(self, path: Path):
        self.path = path.with_name(path.name + ".data")
        mode = "ab" if self.path.name in external_data_locations(path) else "wb"
        self.fh = open(self.path, mode)

    def move(self, tensor: Any) -> None:
        if len(tensor.raw_data) < INLINE_TENSOR_BYTES:  # scales of a short table stay inline, as onnx keeps them
            return
        offset = self.fh.tell()
        self.fh.write(tensor.raw_data)
        tensor.ClearField("raw_data")
        for key, value in (("location", self.path.name), ("offset", offset), ("length", self.fh.tell() - offset)):
            entry = tensor.external_data.add()
            entry.key, entry.value = key, str(value)
        tensor.data_location = require("onnx").TensorProto.EXTERNAL

    def close(self) -> None:
        self.fh.close()


def int8_tables(model: Any) -> dict[str, dict[str, Any]]:
    """{Gather node: {"table": its int8 initializer, "shape", "int8_bytes"}} of the Gathers of
    ``model`` (an ``onnx.ModelProto``, read without its weights) that read an int8 table."""
    inits = {i.name: i for i in model.graph.initializer}
    out = {}
    for node in model.graph.node:
        init = inits.get(node.input[0]) if node.op_type == "Gather" and node.input else None
        if init is not None and init.data_type == _INT8 and len(init.dims) >= 2:
            shape = [int(d) for d in init.dims]
            out[node.name] = {"table": init.name, "shape": shape, "int8_bytes": int(np.prod(shape)) + 4 * shape[0]}
    return out


def tables_record(plan: GraphPlan, floated: Mapping[str, str], model_path: Path) -> dict[str, Any]:
    """The summary's ``gather_tables``: each embedding table of the prepared graph, int8 as the
    written model at ``model_path`` holds it, or float with why (``floated``: ``select_tables``'
    reasons; a table it chose that the model holds float was read by another node too)."""
    onnx = require("onnx")
    held = int8_tables(onnx.load(str(model_path), load_external_data=False))
    int8, kept = [], []
    for n in plan.nodes:
        if not n.table:
            continue
        row = {"node": n.name, "label": n.label, "module": n.module, "shape": list(n.table)}
        fp32 = 4 * int(np.prod(n.table))
        if n.name in held:
            int8.append(row | {"fp32_bytes": fp32, "int8_bytes": held[n.name]["int8_bytes"]})
        else:
            why = floated.get(n.name, "its table is also read by a node kept float")
            kept.append(row | {"fp32_bytes": fp32, "reason": why})
    return {
        "int8": int8,
        "float": kept,
        "min_bytes": MIN_TABLE_BYTES,
        "form": "int8 table, one float scale per row; Gather -> Cast -> Mul on the gathered rows",
    }
