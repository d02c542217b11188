"""Where a graph the HTP backend refuses as a whole breaks.

Some graphs name no refused node: every op passes the backend's per-node check and the graph then
fails to finalize (``QNN_COMMON_ERROR_MEM_ALLOC`` for transformers' Llama RMSNorm written with
``Pow(x, 2)`` on onnxruntime-qnn 2.7's HTP v75 emulation, fp16). ``locate`` bisects over the
graph's nodes in their (topological) order: each probe compiles the first k nodes, with every
tensor they make and do not use as an output, and the first node whose joining breaks the compile
is the one to rewrite. log2(nodes) compiles, so only where one compile is quick
(``LOCATE_MAX_COMPILE_S``) and the weights small enough to copy per probe (``LOCATE_MAX_BYTES``).
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from edgekit._deps import require

LOCATE_MAX_BYTES = 1 << 30
LOCATE_MAX_COMPILE_S = 30.0
# Measured (onnxruntime-qnn 2.7, HTP v73/v75 emulation, fp16): Pow(x, 2) -> ReduceMean -> Add ->
# Sqrt -> Reciprocal -> Mul -> Mul(weight) fails to finalize; the same with x * x compiles.
_RMSNORM_POW = "an RMSNorm written with Pow(x, 2): compute the square as x * x in the module, then re-export"


@dataclass(frozen=True)
class Breaking:
    """The first node (in graph order) whose joining makes the compile fail."""

    node: str
    op: str
    index: int  # 1-based position in the graph's node list
    nodes: int  # the graph's node count
    compiles: int  # probes compiled to find it
    upstream: tuple[str, ...]  # the op types feeding it, nearest first (at most 8)

    def hint(self) -> str:
        if "Pow" in self.upstream and "ReduceMean" in self.upstream:
            return _RMSNORM_POW
        feeding = ", ".join(self.upstream) or "graph inputs"
        return (
            f"op rewrite: the pattern ending at this {self.op} (fed by {feeding}) is what the backend cannot finalize; "
            "express it with other ops, then re-export"
        )


def prefix_model(model: Any, k: int, types: dict[str, Any]) -> Any:
    """The first ``k`` nodes of ``model`` as a model of their own: the graph inputs and weights
    they read, and as outputs every tensor they make that none of them reads (or the graph
    outputs). ``types``: tensor name -> ValueInfoProto (shape inference's)."""
    onnx = require("onnx")
    nodes = list(model.graph.node)[:k]
    made = [t for n in nodes for t in n.output if t]
    read = {t for n in nodes for t in n.input}
    finals = {o.name for o in model.graph.output}
    outputs = [t for t in made if t not in read or t in finals]
    inputs = [i for i in model.graph.input if i.name in read]
    weights = [w for w in model.graph.initializer if w.name in read]
    graph = onnx.helper.make_graph(
        nodes,
        f"{model.graph.name}_prefix_{k}",
        inputs,
        [types.get(t) or onnx.helper.make_tensor_value_info(t, onnx.TensorProto.FLOAT, None) for t in outputs],
        weights,
    )
    return onnx.helper.make_model(graph, opset_imports=model.opset_import, ir_version=model.ir_version)


def _upstream(model: Any, index: int, depth: int = 8) -> tuple[str, ...]:
    """The op types feeding node ``index`` (0-based), breadth first, nearest first."""
    by_output = {t: n for n in model.graph.node for t in n.output}
    seen, queue, ops = set(), list(model.graph.node[index].input), []
    while queue and len(ops) < depth:
        producer = by_output.get(queue.pop(0))
        if producer is None or id(producer) in seen:
            continue
        seen.add(id(producer))
        ops.append(producer.op_type)
        queue.extend(producer.input)
    return tuple(ops)


def locate(model_path: Path, compiles: Callable[[Path], bool | None]) -> Breaking | None:
    """The first node whose joining breaks the compile of ``model_path`` (which fails whole; the
    last node where every shorter prefix compiles), or None where a probe cannot tell (a prefix
    that fails for another reason). ``compiles(path)``: True, False (refused by the backend),
    None (could not tell)."""
    onnx = require("onnx")
    model = onnx.load(str(model_path))
    try:
        inferred = onnx.shape_inference.infer_shapes(model).graph
        types = {v.name: v for v in (*inferred.value_info, *inferred.output)}
    except Exception:  # noqa: BLE001 - outputs without shapes still compile
        types = {}
    count = len(model.graph.node)
    lo, hi, probes = 0, count, 0  # prefix lo compiles (nothing), prefix hi fails (the whole graph)
    with tempfile.TemporaryDirectory(prefix="edgekit-htp-locate-") as tmp:
        while hi - lo > 1:
            mid = (lo + hi) // 2
            path = Path(tmp) / f"prefix-{mid}.onnx"
            onnx.save(prefix_model(model, mid, types), str(path))
            verdict = compiles(path)
            probes += 1
            if verdict is None:
                return None
            lo, hi = (mid, hi) if verdict else (lo, mid)
    node = model.graph.node[hi - 1]
    return Breaking(node.name or f"#{hi}", node.op_type, hi, count, probes, _upstream(model, hi - 1))
