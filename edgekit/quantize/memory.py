"""What quantize holds of this host's memory: the process's peak, said in the summary beside the
FP32 weights and one call's activations (the goal: peak <= 2.5x the weights + the activations),
and the memory a finished step freed, handed back to the system before the next one.

Why the handing back: glibc keeps what a process frees for its next allocations (after a freed
block of a few MB it stops mapping blocks of that size on their own and carves them from its
heaps). A released ONNX Runtime session's weights stayed resident that way: on a 2.25 GiB
transformer quantize held 2.7 GB after the FP32 session was closed, and the next session, whose
weights are mapped from their file, came on top of it (``benchmarks/quantize_memory.py``: 7.0 GB
peak; after ``malloc_trim`` 0.4 GB stayed). ``give_back_freed`` (``probes.memory``) is that trim, where there is one.
"""

from __future__ import annotations

import resource
import sys
from pathlib import Path
from typing import Any

import numpy as np

from edgekit._deps import require
from edgekit.probes.memory import give_back_freed

# The goal of issue #42: quantize's peak at most this many times the FP32 weight bytes, plus one
# call's activations.
GOAL_WEIGHT_FACTOR = 2.5


def peak_rss_bytes() -> int:
    """The process's peak resident memory so far (``getrusage``: KiB on Linux, bytes on macOS)."""
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return int(peak) if sys.platform == "darwin" else int(peak) * 1024


def tensor_bytes(model: Any, unknown_dim: int | None = None) -> dict[str, int]:
    """Bytes of each typed tensor of ``model`` (a shape-inferred ``ModelProto``: its inputs,
    value_info and outputs) from its shape; a dimension without a value counts as ``unknown_dim``,
    and with None the tensor is left out."""
    onnx = require("onnx")
    out: dict[str, int] = {}
    g = model.graph
    for v in [*g.value_info, *g.input, *g.output]:
        t = v.type.tensor_type
        if not (v.type.HasField("tensor_type") and t.elem_type):
            continue
        dims = [d.dim_value if d.HasField("dim_value") else unknown_dim for d in t.shape.dim]
        known = [d for d in dims if d is not None]
        if len(known) == len(dims):
            itemsize = np.dtype(onnx.helper.tensor_dtype_to_np_dtype(t.elem_type)).itemsize
            out[v.name] = itemsize * int(np.prod(known, dtype=np.int64))
    return out


def activation_bytes(model_path: Path) -> int:
    """The most bytes of tensors one call of ``model_path`` holds at once: its nodes run in the
    graph's order, each output alive from the node that makes it to its last reader, the graph's
    inputs and outputs for the whole call (shapes inferred from the graph alone; weights are not
    activations). ONNX Runtime plans its buffers alike; what it holds is more (its arena rounds
    buffers up, kernels take scratch): the 2.25 GiB masked transformer's call is 17 MB here, and
    its session grew by 0.12 GB over its first call."""
    onnx = require("onnx")
    model = onnx.shape_inference.infer_shapes(onnx.load(str(model_path), load_external_data=False))
    g = model.graph
    inits = {i.name for i in g.initializer}
    size = {name: n for name, n in tensor_bytes(model, unknown_dim=1).items() if name not in inits}
    last = {name: i for i, node in enumerate(g.node) for name in node.input}
    kept = {v.name for v in [*g.input, *g.output]}
    live = {v.name for v in g.input if v.name not in inits}
    held = peak = sum(size.get(n, 0) for n in live)
    for i, node in enumerate(g.node):
        made = [o for o in node.output if o and o not in live]
        live.update(made)
        held += sum(size.get(o, 0) for o in made)
        peak = max(peak, held)
        done = [n for n in live if n not in kept and last.get(n, -1) <= i]
        live.difference_update(done)
        held -= sum(size.get(n, 0) for n in done)
    return peak


def memory_record(peak_before: int, weights: int, activations: int | None) -> dict[str, Any]:
    """The summary's ``memory`` section: the peak against the FP32 weights and the goal. The peak is
    the process's (``getrusage``): one that predates quantize shows as ``peak_before_bytes`` equal
    to it (a program that did more before calling quantize)."""
    peak = peak_rss_bytes()
    goal = int(GOAL_WEIGHT_FACTOR * weights) + (activations or 0)
    return {
        "peak_rss_bytes": peak,
        "peak_before_bytes": peak_before,
        "fp32_weight_bytes": weights,
        "ratio": peak / weights if weights else None,
        "activation_bytes": activations,
        "goal_weight_factor": GOAL_WEIGHT_FACTOR,
        "goal_bytes": goal,
        "within_goal": peak <= goal,
        "measured_by": "getrusage(RUSAGE_SELF).ru_maxrss: this process's peak resident memory",
    }


__all__ = [
    "GOAL_WEIGHT_FACTOR",
    "activation_bytes",
    "give_back_freed",
    "memory_record",
    "peak_rss_bytes",
    "tensor_bytes",
]
