"""Why the error entered where it did: the op's weights, its activation range, or the integer
accumulation; and whether it compounds over the later steps or stays local.

The candidate's QDQ graph is run on onnxruntime's CPU EP with graph optimizations off (the QDQ
simulation ``qdq_loss_debug`` uses) on the feeds of the step where the error entered, capturing
the float values that reach each Q/DQ pair of the op. Then, each on its own:

- activation range: the op's input (and, where the op's output is quantized too, as on the HTP,
  its output) through its own Q/DQ: SQNR, the share of values clipped by the calibrated range,
  and how much of that range this step uses;
- weights: the weight's Q/DQ against the float weight; for MatMul/Gemm both are also measured at
  the op's output (x·ŵ and x̂·w against x·w);
- accumulation: for u8 × s8 MatMul/Gemm on a CPU runtime, the numpy model of the int8 kernel of
  the CPU class (``arithmetic.gemm_pairs_saturating`` where its int16 pair sums saturate: AVX2).

The cause is the component with the lowest SQNR. The op's Q/DQ pairs and their numpy
quantization are ``qdq``'s (``QdqInput``, ``quantize`` and ``range_use`` are named here too).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from edgekit._deps import require
from edgekit._sidefiles import side_files_beside
from edgekit.arithmetic import arithmetic_for, saturation
from edgekit.debug.qdq import QdqInput, find_node, qdq_of, quantize, range_use
from edgekit.debug.topology import Entry
from edgekit.evaluate import power_ratio_db as sqnr_db
from edgekit.runtimes.onnx_file import load_onnx
from edgekit.runtimes.ort import OrtOptions, OrtRuntime  # lazy: onnxruntime
from edgekit.runtimes.registry import backend

# Rows of the activation the kernel model multiplies (its pair products are M·K/2·N int64s).
MAX_KERNEL_ROWS = 512
# An op whose output SQNR spreads over more than this across the steps has a step-dependent error
# (range drift: a per-step-range scale, ``quantize --step-buckets``, is the fix to try first).
STEP_DEPENDENT_DB = 10.0


def capture(
    model_path: Path, tensors: Sequence[str], feeds: Sequence[Mapping[str, np.ndarray]], tmp: Path
) -> dict[str, np.ndarray]:
    """The float values of ``tensors`` in the QDQ graph (CPU EP, no fusions: the QDQ simulation),
    stacked over ``feeds``."""
    onnx = require("onnx")
    model = load_onnx(model_path, "the candidate's graph")  # the graph; weights in a side file stay there
    have = {o.name for o in model.graph.output}
    model.graph.output.extend(
        onnx.helper.make_tensor_value_info(t, onnx.TensorProto.FLOAT, None)
        for t in dict.fromkeys(tensors)
        if t not in have
    )
    path = tmp / "attribution.onnx"
    onnx.save(model, str(path))
    opts = OrtOptions(graph_optimization="disable", contrib_fusions=False, io_binding=False, intra_op_threads=1)
    with side_files_beside(model_path, tmp):
        rt = OrtRuntime(path, opts)
    with rt:
        runs = [rt.run(f) for f in feeds]
    return {t: np.stack([np.asarray(r[t], np.float64) for r in runs]) for t in tensors}


class _Weights(Mapping[str, np.ndarray]):
    """A graph's initializers by name as float64, each read (from the model's folder when in a
    side file) only when asked: one op's weights, not a 2 GB model's."""

    def __init__(self, model: Any, base_dir: Path):
        self._inits = {i.name: i for i in model.graph.initializer}
        self._base = str(base_dir)

    def __getitem__(self, name: str) -> np.ndarray:
        return require("onnx").numpy_helper.to_array(self._inits[name], self._base).astype(np.float64)

    def __iter__(self) -> Any:
        return iter(self._inits)

    def __len__(self) -> int:
        return len(self._inits)


def _float_weight(reference: Mapping[str, np.ndarray], p: QdqInput, shape: tuple[int, ...]) -> np.ndarray | None:
    for name in (p.tensor.removesuffix("_quantized"), p.tensor.removesuffix("_quantized").removesuffix("_matmul")):
        w = reference.get(name)
        if w is not None:
            return w if w.shape == shape else (w.T if w.T.shape == shape else None)
    return None


def _matmul_parts(node: Any, x: np.ndarray, w: np.ndarray, xq: np.ndarray, wq: np.ndarray) -> dict[str, float]:
    """SQNR at the op's output of x̂·w (activation) and x·ŵ (weights) against x·w."""
    trans_b = any(a.name == "transB" and a.i for a in node.attribute)
    k = w.shape[1] if trans_b else w.shape[0]
    w2 = (w.T if trans_b else w).reshape(k, -1)
    wq2 = (wq.T if trans_b else wq).reshape(k, -1)
    x2, xq2 = x.reshape(-1, k), xq.reshape(-1, k)
    y = x2 @ w2
    power = float(np.sum(y**2))
    return {
        "activation": sqnr_db(power, float(np.sum((xq2 @ w2 - y) ** 2))),
        "weights": sqnr_db(power, float(np.sum((x2 @ wq2 - y) ** 2))),
    }


def accumulation(
    node: Any,
    act: QdqInput | None,
    x: np.ndarray | None,
    weight: QdqInput | None,
    wq_int: np.ndarray | None,
    runtime: str,
    isa: str,
) -> dict[str, Any]:
    """The int8 kernel's accumulation on ``isa`` for a u8 × s8 MatMul/Gemm on a runtime whose int8
    GEMM is MLAS's (its registry entry's ``DebugHooks.mlas_kernels``: arithmetic.py models it)."""
    hooks = backend(runtime).debug
    if (
        hooks is None
        or not hooks.mlas_kernels
        or node.op_type not in ("MatMul", "Gemm")
        or act is None
        or weight is None
    ):
        return {"isa": isa, "modelled": False, "why": f"no u8·s8 CPU kernel model for {node.op_type} on {runtime}"}
    if act.qdtype != "uint8" or weight.qdtype != "int8" or x is None or wq_int is None:
        return {"isa": isa, "modelled": False, "why": f"{act.qdtype}·{weight.qdtype}: exact widening kernel"}
    if not arithmetic_for(isa).saturating_pairs:
        return {
            "isa": isa,
            "modelled": True,
            "saturating_pairs": False,
            "sqnr_db": math.inf,
            "pairs_saturated": 0.0,
            "why": f"{isa}: int32 dot products, exact",
        }
    trans_b = any(a.name == "transB" and a.i for a in node.attribute)
    w = (wq_int.T if trans_b else wq_int).astype(np.int64)
    a, _ = quantize(x, act)
    a = a.reshape(-1, w.shape[0])[:MAX_KERNEL_ROWS].astype(np.int64)
    sat = saturation(a, w.reshape(w.shape[0], -1))
    return {
        "isa": isa,
        "modelled": True,
        "saturating_pairs": True,
        "sqnr_db": sat["sqnr_db"],
        "pairs_saturated": sat["pairs"],
        "why": f"{isa}: u8·s8 pairs summed in int16 (vpmaddubsw) saturate",
    }


def components(
    node: Any,
    pairs: list[QdqInput],
    values: Mapping[str, np.ndarray],
    reference: Mapping[str, np.ndarray],
    runtime: str,
    isa: str,
) -> dict[str, Any]:
    """{"activation": [...], "weights": {...}, "at_output": {...}, "accumulation": {...}} of one node."""
    doc: dict[str, Any] = {
        "activation": [
            range_use(values[p.tensor], p) for p in pairs if p.role in ("activation", "output") and p.tensor in values
        ]
    }
    weight = next((p for p in pairs if p.role == "weight" and p.values is not None), None)
    act = next((p for p in pairs if p.role == "activation"), None)
    x = values.get(act.tensor) if act is not None else None
    w_float = None
    if weight is not None:
        w_dq = weight.dequantize(weight.values)
        w_float = _float_weight(reference, weight, weight.values.shape)
        if w_float is not None:
            doc["weights"] = {
                "tensor": weight.tensor,
                "dtype": weight.qdtype,
                "per_channel": weight.scale.size > 1,
                "sqnr_db": sqnr_db(float(np.sum(w_float**2)), float(np.sum((w_float - w_dq) ** 2))),
            }
    if node.op_type in ("MatMul", "Gemm") and x is not None and w_float is not None:
        parts = _matmul_parts(node, x, w_float, quantize(x, act)[1], w_dq)
        doc["at_output"] = parts
        doc["weights"]["output_sqnr_db"] = parts["weights"]
        doc["activation"][0]["output_sqnr_db"] = parts["activation"]
    doc["accumulation"] = accumulation(node, act, x, weight, None if weight is None else weight.values, runtime, isa)
    return doc


def cause(doc: Mapping[str, Any]) -> tuple[str, str]:
    """(cause, why) from ``components``' document: the lowest SQNR wins."""
    options: list[tuple[float, str, str]] = []
    for a in doc.get("activation", []):
        db = a.get("output_sqnr_db", a["sqnr_db"])
        what = f"{a['role']} {a['tensor']}"
        if a["clipped_share"] > 0:
            why = f"{what} exceeds its calibrated range: {a['clipped_share']:.1%} of values clipped"
        elif a["range_used"] < 0.25:
            why = f"{what} uses {a['range_used']:.1%} of its calibrated range at this step (too coarse)"
        else:
            why = f"{what} at {a['dtype']}: {db:.1f} dB"
        options.append((db, "activation range", why))
    w = doc.get("weights")
    if w:
        db = w.get("output_sqnr_db", w["sqnr_db"])
        options.append(
            (db, "weights", f"{w['dtype']} weights {'per channel' if w['per_channel'] else 'per tensor'}: {db:.1f} dB")
        )
    acc = doc.get("accumulation") or {}
    if acc.get("saturating_pairs"):
        options.append(
            (
                acc["sqnr_db"],
                "accumulation",
                f"{acc['why']}: {acc['pairs_saturated']:.1%} of pair sums, {acc['sqnr_db']:.1f} dB",
            )
        )
    if not options:
        return "unknown", "the op has no Q/DQ pair edgekit can take apart"
    db, name, why = min(options, key=lambda o: o[0])
    return name, why


def attribute(
    cand_path: Path,
    ref_path: Path,
    entry: Entry,
    feeds: Sequence[Mapping[str, np.ndarray]],
    runtime: str,
    isa: str,
    tmp: Path,
) -> dict[str, Any]:
    """The components of the candidate node behind ``entry`` on ``feeds`` (the calls of its
    step), and the cause: {"node", "op", "activation", "weights", "accumulation", "cause", "why"}."""
    model = load_onnx(cand_path, "the candidate's graph")  # tensors read from disk as needed
    node = find_node(model, entry)
    pairs = qdq_of(model, node, cand_path.parent) if node is not None else []
    if not pairs:
        return {
            "node": getattr(node, "name", None),
            "cause": "precision",
            "why": "the op has no Q/DQ pair here: it computes in this variant's float precision",
        }
    values = capture(cand_path, [p.tensor for p in pairs if p.role != "weight"], feeds, tmp)
    reference = _Weights(load_onnx(ref_path, "artifact 'fp32'"), ref_path.parent)
    doc = {
        "node": node.name,
        "op": node.op_type,
        "measured_on": "the QDQ graph on onnxruntime's CPU EP, no fusions (QDQ simulation)",
    }
    doc |= components(node, pairs, values, reference, runtime, isa)
    doc["cause"], doc["why"] = cause(doc)
    return doc


def compounding(
    entry_step: int, crossing_steps: Sequence[int], divergence: Sequence[float], sqnr_per_step: Sequence[float]
) -> dict[str, Any]:
    """Whether the error compounds: the candidate's own decode drifts further from the reference
    after the step where the error entered (``divergence``: per step, then the final output).
    ``crossing_steps``: the steps (0-based) at which the op adds noise below the threshold;
    ``sqnr_per_step``: the op's output SQNR per step (teacher-forced): whether it depends on the step."""
    finite = [v for v in sqnr_per_step if math.isfinite(v)]
    spread = max(finite) - min(finite) if finite else 0.0
    after = [d for d in divergence[entry_step + 1 :] if not math.isnan(d)]
    grows = bool(after) and after[-1] > 0 and after[-1] >= 1.5 * after[0]
    if grows:
        why = f"the candidate's own decode drifts from {after[0]:.3g} after that step to {after[-1]:.3g} at the output"
    elif after and after[-1] > 0:
        why = f"the candidate's own decode differs by {after[-1]:.3g} at the output, no more than right after that step"
    else:
        why = "the candidate's own decode ends where the reference's does"
    return {
        "compounds": grows,
        "summary": "compounds" if grows else "stays local",
        "why": why,
        "steps_crossing": [s + 1 for s in crossing_steps],
        "divergence_per_step": list(divergence),
        "sqnr_per_step": list(sqnr_per_step),
        "step_dependent": spread >= STEP_DEPENDENT_DB,
    }


__all__ = ["QdqInput", "accumulation", "attribute", "cause", "components", "compounding", "quantize", "range_use"]
