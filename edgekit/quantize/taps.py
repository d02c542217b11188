"""Graphs tapped for their activations, and the one session that runs such a graph with the
weights read from the model's own side file: what calibration (``calibrator``), the range drift
(``calibrate.range_drift``) and the sensitivity ranking (``cpu/sensitivity.py``) run. The graph
is read without its weights, the taps are added to it (each right after the node that makes its
tensor), and ``tapped_session`` opens it with the model's side files linked beside it: no copy of
the weights on disk or in Python. ``onnx`` and ``onnxruntime`` are imported lazily.
"""

from __future__ import annotations

import contextlib
import copy
import tempfile
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from edgekit._deps import require
from edgekit._sidefiles import model_bytes, side_files_beside
from edgekit.probes.memory import give_back_freed
from edgekit.quantize.quiet import quiet_ort_logging

# A graph run's outputs are alive together (ORT holds every graph output until the run returns,
# fetched or not): on a 2.25 GiB transformer one feed's were 1.0 GB (float graph) and 1.3 GB (QDQ
# graph) beside a session, and the quantize's peak (2.62x the weights, docs/large-models.md). Each
# graph outputs at most this share of the FP32 weight bytes (never under FETCH_FLOOR: a small
# model's feed stays one graph), at the cost of one more session and forward per group.
FETCH_SHARE = 0.2
FETCH_FLOOR = 256 << 20


def fetch_cap(model_path: Path) -> int:
    """The bytes one graph of ``model_path``'s tensors may output at once: FETCH_SHARE of its
    weights, at least FETCH_FLOOR."""
    return max(FETCH_FLOOR, int(FETCH_SHARE * model_bytes(model_path)))


def outputs_only(graph: Any, group: Sequence[str]) -> Any:
    """A copy of ``graph`` (weightless) that outputs ``group``'s tensors and nothing else, with only
    the nodes and initializers they need: ORT keeps every graph output of a run until the run
    returns, fetched or not, so each group runs on a graph that outputs only that group (Sana-600M:
    one QDQ graph tapped for all its 1,222 tensors held 2.4 GB a run whatever was fetched); and a
    group of the first layers' tensors runs the first layers only, so groups in graph order cost
    about half a forward each on average, not one. The tensors' values are the same: each is
    computed by the same nodes from the same inputs. Every graph input stays (feeds are unchanged).
    Not pruned where ``group`` has no tensor to output or a node holds a subgraph (names it reads
    from the outer graph are not its inputs): then the graph's own outputs stay beside ``group``'s."""
    fetch = fetch_names(graph, group)
    if not fetch or any(a.type in (5, 10) for n in graph.graph.node for a in n.attribute):  # GRAPH, GRAPHS
        out = copy.deepcopy(graph)
        add_tensor_outputs(out, group)
        return out
    known = {v.name: v for v in [*graph.graph.value_info, *graph.graph.output]}
    return subgraph(graph, needed_nodes(graph, fetch), [known[name] for name in fetch])


def subgraph(graph: Any, nodes: Sequence[Any], outputs: Sequence[Any], more_inputs: Sequence[Any] = ()) -> Any:
    """A copy of ``graph``'s model (weightless; not changed) with only ``nodes``, ``outputs`` (value
    infos) as its outputs, every graph input and ``more_inputs`` (value infos) as its inputs, and
    the initializers the nodes read: ``outputs_only``'s graphs and ``segments``'."""
    out = copy.deepcopy(graph)
    g, src = out.graph, graph.graph
    needed = {i for node in nodes for i in node.input if i} | {v.name for v in outputs}
    # Chosen from the untouched ``graph`` and copied in: no message is moved between repeated fields.
    for field, items in (
        (g.input, [*src.input, *more_inputs]),
        (g.output, outputs),
        (g.node, nodes),
        (g.initializer, [i for i in src.initializer if i.name in needed]),
    ):
        del field[:]
        field.extend(copy.deepcopy(item) for item in items)
    return out


def needed_nodes(graph: Any, tensors: Sequence[str]) -> list[Any]:
    """The nodes of ``graph`` that ``tensors`` are computed from, in graph order (``graph`` is not
    changed): what ``outputs_only`` keeps, and what a group's graph runs."""
    needed = set(tensors)
    kept = []
    for node in reversed(graph.graph.node):
        if any(o in needed for o in node.output):
            kept.append(node)
            needed.update(i for i in node.input if i)
    return kept[::-1]


def in_graph_order(graph: Any, tensors: Sequence[str]) -> list[str]:
    """``tensors`` ordered by the node of ``graph`` that makes each (graph inputs and tensors no
    node makes first): fetch groups of consecutive tensors then need consecutive layers, and a group
    of the first layers' runs only those (``outputs_only``)."""
    made_by = {o: i for i, node in enumerate(graph.graph.node) for o in node.output}
    return sorted(tensors, key=lambda t: made_by.get(t, -1))


def fetch_groups(
    fetch: Sequence[str], sizes: Mapping[str, int], cap: int, key: Callable[[str], str] = lambda t: t
) -> list[list[str]]:
    """``fetch`` split, in order, into runs of at most ``cap`` bytes; tensors with one ``key`` (an
    activation and its copies around its Q/DQ: compared together) stay in one group. A tensor of
    unknown shape counts as the largest known (static export: there should be none)."""
    unknown = max(sizes.values(), default=0)
    by_key: dict[str, list[str]] = {}
    for t in fetch:
        by_key.setdefault(key(t), []).append(t)
    groups: list[list[str]] = []
    held = 0
    for members in by_key.values():
        size = sum(sizes.get(t, unknown) for t in members)
        if not groups or (held + size > cap and groups[-1]):
            groups.append([])
            held = 0
        groups[-1].extend(members)
        held += size
    return groups or [[]]


# onnx.TensorProto element types ORT's calibrators observe: FLOAT and FLOAT16.
CALIBRATED_TYPES = (1, 10)


def calibrated_tensors(graph: Any, op_types: Sequence[str]) -> list[str]:
    """The tensors ORT's calibrator records for ``op_types`` (``CalibraterBase.
    select_tensors_to_calibrate``): every input and output of those nodes whose type the graph
    knows (value_info, inputs, outputs) as float or float16, initializers excluded. ``graph``: a
    shape-inferred ``ModelProto``."""
    g = graph.graph
    known = {v.name: v for v in [*g.value_info, *g.output, *g.input]}
    inits = {i.name for i in g.initializer}
    wanted = set(op_types)
    out: set[str] = set()
    for node in g.node:
        if wanted and node.op_type not in wanted:
            continue
        for name in [*node.input, *node.output]:
            v = known.get(name)
            if v is None or name in inits or not v.type.HasField("tensor_type"):
                continue
            if v.type.tensor_type.elem_type in CALIBRATED_TYPES:
                out.add(name)
    return sorted(out)


# Every output quantized: what ORT's own calibrator records (``calibrated_tensors``), and the qnn
# profile's rule (``ProfileSettings.quantized_outputs``).
ALL_OUTPUTS = ("*",)


def ranged_tensors(graph: Any, op_types: Sequence[str], quantized_outputs: Sequence[str] = ALL_OUTPUTS) -> list[str]:
    """The tensors of ``calibrated_tensors`` whose ranges ``quantize_static`` reads when it quantizes
    the outputs of the ``quantized_outputs`` node types only (``ptq.quantize_model`` passes the other
    ``op_types`` as ``OpTypesToExcludeOutputQuantization``): every input of an ``op_types`` node and
    the outputs of the ``quantized_outputs`` ones. An output that another ``op_types`` node reads
    stays (it is that node's input). "*" (or no ``op_types``): all of them, ORT's calibrator's set.
    The cpu profile quantizes Conv outputs only: Sana-600M's histograms then bin 568 of its 882
    tensors, 1.13 of 1.58 GiB a call, and the int8 model is the same (tests/quantize/test_calibrator.py)."""
    tensors = calibrated_tensors(graph, op_types)
    if "*" in quantized_outputs or not op_types:
        return tensors
    wanted, quantized = set(op_types), set(quantized_outputs)
    read: set[str] = set()
    for node in graph.graph.node:
        if node.op_type in wanted:
            read.update(node.input)
            if node.op_type in quantized:
                read.update(node.output)
    return [t for t in tensors if t in read]


def graph_without_weights(model_path: Path) -> Any:
    """``model_path``'s graph, shapes inferred, its external weights left in their file (a model
    that keeps its weights inside the .onnx is small enough to hold: under the side-file rule)."""
    onnx = require("onnx")
    return onnx.shape_inference.infer_shapes(onnx.load(str(model_path), load_external_data=False))


def add_min_max_taps(
    graph: Any,
    tensors: Sequence[str],
    prefix: str = "edgekit_range",
    magnitude: bool = False,
    tails: Mapping[str, int] | None = None,
) -> list[str]:
    """Add a ReduceMin and a ReduceMax over all of each tensor to ``graph`` (scalar outputs), each
    pair right after the node that makes the tensor (a graph input's first): run in that order
    (``tapped_session``), a tensor is reduced, and freed, as soon as its consumers are done, where
    taps at the end would keep every tapped tensor of the call alive (+1 GB a call on a 2.25 GiB
    transformer). ``magnitude``: a ReduceMin of its Abs too (the smallest |x|). ``tails`` (with
    ``magnitude``): tensor -> k, a TopK of that Abs flattened too, the k largest |x| of the call
    (unsorted, [k]: ``ranges.Tails``). Returns their output names per tensor in turn: min, max (and
    min |x|), then the tails' in ``tensors``' order."""
    onnx = require("onnx")
    helper = onnx.helper
    g = graph.graph
    elem = {v.name: v.type.tensor_type.elem_type for v in [*g.value_info, *g.input, *g.output]}
    taps: list[str] = []
    tail_taps: list[str] = []
    after: dict[str, list[Any]] = {}
    tails = dict(tails or {}) if magnitude else {}
    if tails:
        g.initializer.append(onnx.numpy_helper.from_array(np.array([-1], np.int64), f"{prefix}_flat"))
    for i, name in enumerate(tensors):
        for op in ("ReduceMin", "ReduceMax", "AbsMin")[: 3 if magnitude else 2]:
            out = f"{prefix}_{op[-3:].lower()}_{i}" if op != "AbsMin" else f"{prefix}_absmin_{i}"
            made = after.setdefault(name, [])
            if op == "AbsMin":
                made.append(helper.make_node("Abs", [name], [f"{out}_abs"], name=f"{out}_abs"))
                made.append(helper.make_node("ReduceMin", [f"{out}_abs"], [out], keepdims=0, name=out))
                if name in tails:
                    tail = _add_tail(graph, f"{out}_abs", tails[name], f"{prefix}_tail_{i}", f"{prefix}_flat", made)
                    kind = elem.get(name) or onnx.TensorProto.FLOAT
                    g.output.append(helper.make_tensor_value_info(tail, kind, [tails[name]]))
                    tail_taps.append(tail)
            else:
                made.append(helper.make_node(op, [name], [out], keepdims=0, name=out))
            g.output.append(helper.make_tensor_value_info(out, elem.get(name) or onnx.TensorProto.FLOAT, []))
            taps.append(out)
    nodes = [tap for v in g.input for tap in after.pop(v.name, [])]
    for node in g.node:
        nodes.append(node)
        nodes += [tap for o in node.output for tap in after.pop(o, [])]
    nodes += [tap for rest in after.values() for tap in rest]  # made by no node: ORT will say so
    del g.node[:]
    g.node.extend(nodes)
    return taps + tail_taps


def _add_tail(graph: Any, magnitudes: str, k: int, out: str, flat: str, made: list[Any]) -> str:
    """Append to ``made`` the nodes that take the ``k`` largest values of ``magnitudes`` (any shape,
    flattened first by the shape initializer ``flat``, [-1]: TopK reads one axis) as ``out``."""
    onnx = require("onnx")
    graph.graph.initializer.append(onnx.numpy_helper.from_array(np.array([k], np.int64), f"{out}_k"))
    made.append(onnx.helper.make_node("Reshape", [magnitudes, flat], [f"{out}_flat"], name=f"{out}_flat"))
    made.append(
        onnx.helper.make_node(
            "TopK", [f"{out}_flat", f"{out}_k"], [out, f"{out}_index"], axis=0, largest=1, sorted=0, name=out
        )
    )
    return out


def value_dtypes(graph: Any) -> dict[str, np.dtype]:
    """The numpy dtype of every tensor whose type ``graph`` declares (value_info, inputs, outputs)."""
    to_np = require("onnx").helper.tensor_dtype_to_np_dtype
    g = graph.graph
    return {
        v.name: np.dtype(to_np(v.type.tensor_type.elem_type))
        for v in [*g.value_info, *g.input, *g.output]
        if v.type.HasField("tensor_type") and v.type.tensor_type.elem_type
    }


def element_counts(graph: Any, tensors: Sequence[str]) -> dict[str, int] | None:
    """Each tensor's number of elements from the static shapes ``graph`` declares (value_info,
    inputs, outputs); None where one has no fixed shape."""
    g = graph.graph
    shapes = {v.name: v.type.tensor_type.shape for v in [*g.value_info, *g.input, *g.output]}
    counts: dict[str, int] = {}
    for name in tensors:
        shape = shapes.get(name)
        if shape is None or not all(d.HasField("dim_value") for d in shape.dim):
            return None
        counts[name] = int(np.prod([d.dim_value for d in shape.dim], dtype=np.int64))
    return counts


def fetch_names(graph: Any, tensors: Sequence[str]) -> list[str]:
    """The names of ``tensors`` a session of ``graph`` fetches as outputs: all but the graph inputs
    (read from the feeds instead). ``graph`` is not changed."""
    inputs = {v.name for v in graph.graph.input}
    return [name for name in tensors if name not in inputs]


def add_tensor_outputs(graph: Any, tensors: Sequence[str]) -> list[str]:
    """Make each of ``tensors`` a graph output (graph inputs are read from the feeds instead);
    returns the names to fetch (``fetch_names``)."""
    g = graph.graph
    outputs = {v.name for v in g.output}
    known = {v.name: v for v in g.value_info}
    fetch = fetch_names(graph, tensors)
    g.output.extend(known[name] for name in fetch if name not in outputs)
    return fetch


def group_progress(before: int, g: int, groups: int, calls: int, i: int) -> int:
    """Progress in calls' worth of one graph over every call, after call ``i`` of group ``g`` of
    ``groups`` (each group runs every one of ``calls`` calls), plus ``before`` already done."""
    return before + (g * calls + i + 1) // groups


@contextlib.contextmanager
def tapped_session(
    model_path: Path, graph: Any, threads: int = 0, optimize: bool = True, in_order: bool = True
) -> Iterator[Any]:
    """An ORT session of ``graph`` (a copy of ``model_path``'s with taps added) that reads the
    weights from ``model_path``'s own side file: the graph is written to a scratch folder beside the
    model with its side files linked in, so no copy of the weights is made on disk or in Python.
    ``optimize`` False: no graph optimization (what ORT's calibrators run, so the tensors are the
    ones they observe). ``in_order`` False: ORT's default order, for a graph whose taps are only
    outputs (no tap nodes to run early): the priority order ran every node that reads only
    initializers first, and a QDQ graph run unfused dequantized every weight at the start of a
    call (Sana-600M: 3.0 GB a run against 1.2 GB in the default order)."""
    onnx = require("onnx")
    ort = require("onnxruntime")
    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    # The nodes in the graph's order, as ready (each tap right after its tensor's producer), and no
    # memory pattern: ORT's default order ran the taps last (+1 GB of live tensors a call at 2.25
    # GiB), and its pattern, set up after the first run, took a second block beside the first
    # run's (+1 GB more). Either way the tensors ORT computes are the same.
    order = getattr(getattr(ort, "ExecutionOrder", None), "PRIORITY_BASED", None)
    if order is not None and in_order:
        options.execution_order = order
    options.enable_mem_pattern = False
    if not optimize:
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    give_back_freed()  # its weights are mapped from their file: not on top of what a last step freed
    with tempfile.TemporaryDirectory(prefix="edgekit-taps-", dir=model_path.parent) as tmp:
        path = Path(tmp) / "tapped.onnx"
        with side_files_beside(model_path, Path(tmp)), quiet_ort_logging():
            onnx.save(graph, str(path))
            session = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
    try:
        yield session
    finally:
        del session
