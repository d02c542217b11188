"""What a profile's search hands back to the pipeline, and the summary every profile writes
(``manifest["quantization"]``, the ``edgekit.quantize/1`` document): one set of keys whatever the
profile, with the profile's own extras (``qnn``, ``arithmetic``, ``fallback_form``) beside them."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from edgekit.quantize.calibrate import RangeDrift
from edgekit.quantize.context import QuantizeRun

SCHEMA = "edgekit.quantize/1"
# Ops users ask about when they read "what stayed float" (the rest are reshapes and arithmetic).
NOTABLE_FLOAT_OPS = ("Softmax", "LayerNormalization", "Sin", "Cos", "Gelu", "Tanh", "Sigmoid")


@dataclass
class SearchResult:
    model: Path  # the chosen INT8 graph (in the run's scratch folder)
    passed: bool
    metrics: dict[str, Any]
    checks: list[dict[str, Any]]
    int8_nodes: list[str]  # nodes computed in INT8 (activation and weight Q/DQ)
    # One row per node left out of INT8: {node, label, op, source (user|override|rule|budget), precision
    # ("weight-only" | "float"), reason}.
    float_rows: list[dict[str, Any]] = field(default_factory=list)
    fallback: list[dict[str, Any]] = field(default_factory=list)  # budget fallbacks in order, with why
    sensitivity: dict[str, dict[str, Any]] = field(default_factory=dict)  # the ten most sensitive, scores
    history: list[dict[str, Any]] = field(default_factory=list)
    int8_flop_share: dict[str, Any] = field(default_factory=dict)
    float_by_op_type: dict[str, int] = field(default_factory=dict)  # ops users ask about that stayed float
    structure: dict[str, Any] = field(default_factory=dict)
    drift: RangeDrift | None = None
    tensors: list[str] = field(default_factory=list)  # calibrated activation tensors (the TensorRT table's)
    cache: Path | None = None  # ORT's calibration cache, where the profile keeps one
    budget_extra: dict[str, Any] = field(default_factory=dict)  # e.g. measured_on
    extras: dict[str, Any] = field(default_factory=dict)  # profile keys: qnn, arithmetic, fallback_form, step_buckets, speed
    bucket_models: list[Path] = field(default_factory=list)  # step buckets: every bucket's graph (model first)


def summary(run: QuantizeRun, r: SearchResult) -> dict[str, Any]:
    """The ``edgekit.quantize/1`` document of a finished search (sizes and timing added at record)."""
    cfg, bundle = run.cfg, run.bundle
    rows = r.float_rows

    def brief(row: dict[str, Any]) -> dict[str, Any]:
        return {"node": row["node"], "label": row["label"], "op": row["op"], "source": row["source"]}

    by_name = run.plan.by_name()
    out = {
        "schema": SCHEMA,
        "model": bundle.name,
        "kind": bundle.kind,
        "profile": cfg.profile,
        "method": cfg.method,
        "config": cfg.to_json(),
        "calibration": run.traj.summary() | {"method": cfg.method, "tensors_int8_inputs": len(r.tensors)},
        "range_drift": r.drift.to_json() if r.drift is not None else None,
        "selection": {
            # int8: fully INT8 (Q/DQ on activations and weights); weight_only: INT8 weights, float
            # activations and compute; fully_float: FP32 weights and compute (e.g. --exclude).
            "int8": [{"node": n, "label": by_name[n].label, "op": by_name[n].op_type, "precision": "int8"} for n in r.int8_nodes],
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
            "eval": {"samples": run.n_eval, "seed": cfg.eval_seed, "decode": dict(cfg.decode),
                     "lockstep_token_agreement": "token decisions in lockstep with FP32 (same input, same noise)"},
            "history": r.history,
        },
        "passed": r.passed,
        "measured": r.metrics,
        "fallback": r.fallback,
        "sensitivity": r.sensitivity,
        "int8_flop_share": r.int8_flop_share,
        "structure": r.structure,
        "sizes": {
            "fp32_bytes": run.fp32_path.stat().st_size,
            "int8_bytes": r.model.stat().st_size,
            "ratio": r.model.stat().st_size / run.fp32_path.stat().st_size,
        },
        "conditions": run.cond_doc,
        "preprocess": run.preprocess,
        "warnings": run.warnings,
    }
    return out | r.extras


def notable_float_ops(run: QuantizeRun) -> dict[str, int]:
    """{op type: count} of the ops users ask about (``NOTABLE_FLOAT_OPS``) that no profile setting
    made INT8: they compute in float between the INT8 layers."""
    kept: dict[str, int] = {}
    for n in run.plan.nodes:
        if n.op_type not in run.cfg.op_types and n.activations and n.op_type in NOTABLE_FLOAT_OPS:
            kept[n.op_type] = kept.get(n.op_type, 0) + 1
    return kept
