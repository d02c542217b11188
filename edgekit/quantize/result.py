"""The summary every profile writes (``manifest["quantization"]``, the ``edgekit.quantize/1``
document) from what its search hands back (``hooks.SearchResult``): one set of keys whatever the
profile, with the profile's own extras (``qnn``, ``arithmetic``, ``fallback_form``) beside them."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from edgekit._deps import require
from edgekit._sidefiles import model_bytes
from edgekit.quantize.budget import budget_notes
from edgekit.quantize.context import QuantizeRun
from edgekit.quantize.hooks import SearchResult

SCHEMA = "edgekit.quantize/1"
# Ops users ask about when they read "what stayed float" (the rest are reshapes and arithmetic).
NOTABLE_FLOAT_OPS = ("Softmax", "LayerNormalization", "Sin", "Cos", "Gelu", "Tanh", "Sigmoid")


def summary(run: QuantizeRun, r: SearchResult) -> dict[str, Any]:
    """The ``edgekit.quantize/1`` document of a finished search (sizes and timing added at record)."""
    cfg, bundle = run.cfg, run.bundle
    by_name = run.plan.by_name()
    # Each model with its side files (a model over 2 GB keeps its weights beside the graph); the
    # int8 figure is the scratch model's until record_result counts the files it wrote.
    fp32_bytes, int8_bytes = model_bytes(run.fp32_path), model_bytes(r.model)

    def named(row: dict[str, Any]) -> dict[str, Any]:
        """``row`` with the names other tools know its node by: the FP32 graph's node(s) it came
        from and the torch module (``names.Lineage``); ``node`` is the prepared graph's name."""
        info = by_name.get(row["node"])
        return row | {
            "fp32_nodes": list(info.origin) if info is not None else [],
            "module": info.module if info is not None else None,
        }

    rows = [named(x) for x in r.float_rows]

    def brief(row: dict[str, Any]) -> dict[str, Any]:
        keys = ("node", "fp32_nodes", "module", "label", "op", "source")
        return {k: row[k] for k in keys}

    out = {
        "schema": SCHEMA,
        "model": bundle.name,
        "kind": bundle.kind,
        "profile": cfg.profile,
        "method": cfg.calibrator,  # the ranges the int8 model was made with (auto's choice)
        "config": cfg.to_json(),
        "calibration": run.traj.summary() | {"method": cfg.calibrator, "tensors_int8_inputs": len(r.tensors)},
        "range_drift": r.drift.to_json() if r.drift is not None else None,
        "selection": {
            # int8: fully INT8 (Q/DQ on activations and weights); weight_only: INT8 weights, float
            # activations and compute; fully_float: FP32 weights and compute (e.g. --exclude).
            "int8": [
                {"node": n, "label": by_name[n].label, "op": by_name[n].op_type, "precision": "int8"}
                for n in r.int8_nodes
            ],
            "weight_only": [brief(x) for x in rows if x["precision"] == "weight-only"],
            "fully_float": [brief(x) for x in rows if x["precision"] == "float"],
            "float": rows,
            "float_by_op_type": r.float_by_op_type,
            "excluded_user": sorted(x["node"] for x in rows if x["source"] in ("user", "override")),
            "excluded_auto": sorted(x["node"] for x in rows if x["source"] not in ("user", "override")),
        },
        "budget": {
            "limits": dict(run.budget),
            "checks": r.checks,
            "passed": r.passed,
            **r.budget_extra,
            "eval": {
                "samples": run.n_eval,
                "seed": cfg.eval_seed,
                "decode": dict(cfg.decode),
                "lockstep_token_agreement": "token decisions in lockstep with FP32 (same input, same noise)",
            },
            "history": r.history,
        },
        "passed": r.passed,
        "heldout_fp32_decode_s": run.heldout_s,  # each held-out FP32 decode's time (record.fp32_decodes)
        "measured": r.metrics,
        "notes": [] if r.passed else budget_notes(r.checks, r.metrics),
        "fallback": [named(f) for f in r.fallback],
        "sensitivity": r.sensitivity,
        "int8_flop_share": r.int8_flop_share,
        "structure": r.structure,
        "weights": weight_storage(r.model),
        "sizes": {"fp32_bytes": fp32_bytes, "int8_bytes": int8_bytes, "ratio": int8_bytes / fp32_bytes},
        "conditions": run.cond_doc,
        "preprocess": run.preprocess,
        "warnings": run.warnings,
    }
    return out | r.extras


# onnx.TensorProto data types -> what a weight stored so is: 8-bit (int8/uint8), float
# (float/float16/bfloat16) or other (int32 biases, int4, ...). int64 initializers are shapes and
# indices, no weights.
_STORAGE = {3: "int8", 2: "int8", 1: "float", 10: "float", 16: "float", 11: "float", 7: None, 8: None}


def weight_storage(path: Path) -> dict[str, Any]:
    """How the written model stores its weights (initializers, read from its graph alone): values
    and bytes that are 8-bit, float and other, and ``int8_share``, the 8-bit share of the values
    (quantized weights and int8 embedding tables; float: what computes or is stored in float)."""
    onnx = require("onnx")
    model = onnx.load(str(path), load_external_data=False)
    values = {"int8": 0, "float": 0, "other": 0}
    size = {"int8": 0, "float": 0, "other": 0}
    for init in model.graph.initializer:
        kind = _STORAGE.get(init.data_type, "other")
        if kind is None:
            continue
        n = math.prod(init.dims)
        values[kind] += n
        size[kind] += n * onnx.helper.tensor_dtype_to_np_dtype(init.data_type).itemsize
    total = sum(values.values())
    return {"values": values, "bytes": size, "int8_share": values["int8"] / total if total else None}


def notable_float_ops(run: QuantizeRun) -> dict[str, int]:
    """{op type: count} of the ops users ask about (``NOTABLE_FLOAT_OPS``) that no profile setting
    made INT8: they compute in float between the INT8 layers."""
    kept: dict[str, int] = {}
    for n in run.plan.nodes:
        if n.op_type not in run.cfg.op_types and n.activations and n.op_type in NOTABLE_FLOAT_OPS:
            kept[n.op_type] = kept.get(n.op_type, 0) + 1
    return kept
