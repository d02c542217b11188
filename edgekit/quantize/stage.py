"""The quantize stage: bundle fp32 graph -> calibrated, budget-checked ``int8`` artifact.

    prepare (quant_pre_process) -> analyse + select nodes -> FP32 decode: record calibration
    trajectories, decode the held-out set -> quantize_static -> INT8 decode of the held-out set
    -> budget? else sensitivity + fallback -> range drift, structure, sizes -> artifact + manifest
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any, Callable, Mapping

import numpy as np

from edgekit._lock import owned_tempdir, writes_bundle
from edgekit.bundle import Bundle
from edgekit.check import gate_runtimes
from edgekit.decode.dispatch import decode_config
from edgekit.errors import EdgekitError
from edgekit.quantize.conditions import condition_sets, gate_metrics
from edgekit.quantize.budget import (
    compare,
    decode_eval_set,
    fallback_until_within_budget,
    isolated_output_sqnr,
    node_sensitivity,
    rank_by_sensitivity,
)
from edgekit.quantize.calibrate import (
    calibration_reader,
    range_drift,
    record_trajectories,
)
from edgekit.quantize.config import QuantizeConfig
from edgekit.quantize.graph import (
    GraphPlan,
    analyse_graph,
    module_labels,
    select_nodes,
    weight_only_by_rule,
)
from edgekit.quantize.ptq import calibrate, prepare_model, quantize_model
from edgekit.quantize.qnn import quantize_bundle_qnn
from edgekit.quantize.record import record_result
from edgekit.quantize.structure import qdq_structure, trt_violations
from edgekit.runtimes.onnx_file import load_onnx
from edgekit.runtimes.openvino import OpenVinoRuntime, OvOptions  # lazy: openvino
from edgekit.runtimes.ort import OrtOptions, OrtRuntime
from edgekit.runtimes.qnn import qnn_options_for
from edgekit.spec import KIND_IO
from edgekit.targets import load_target

SCHEMA = "edgekit.quantize/1"
# At most this many budget fallbacks escalate from weight-only to fully float (each re-runs the
# fallback loop, sensitivity ranking included: ~1 min on the flow demo).
MAX_FULL_FLOAT = 3


@writes_bundle("quantize")
def quantize_bundle(
    path: Path | str, cfg: QuantizeConfig = QuantizeConfig(), progress: Callable[[str], None] | None = None,
    warn: Callable[[str], None] | None = None,
) -> dict[str, Any]:
    """Quantize the bundle's fp32 graph, check it against the accuracy budget (falling back the
    most sensitive nodes to weight-only INT8 (float activations) until it holds), write the ``int8`` artifact and record
    everything in ``manifest["quantization"]``. Returns that summary (``passed`` says whether
    the budget holds; the artifact is written either way so it can be inspected)."""

    if cfg.profile == "qnn":  # full-integer for the Hexagon NPU, budget measured on the (target's) HTP backend
        htp = qnn_options_for(load_target(cfg.target), "int8") if cfg.target else None
        return quantize_bundle_qnn(path, cfg, progress=progress, htp=htp)
    say = progress or (lambda message: None)
    warnings: list[str] = []
    sink = warn or say

    def warn(message: str) -> None:  # kept in the summary too, so --json carries it
        warnings.append(message)
        sink(message)

    clock: dict[str, float] = {}
    start = time.perf_counter()
    bundle = Bundle.load(path)
    kind = bundle.kind
    budget = cfg.budget_for(kind)
    decode_config(kind, bundle.manifest.get("decode_defaults", {}), cfg.decode)  # bad options fail here
    fp32_path = bundle.path_of("fp32")
    load_onnx(fp32_path, "artifact 'fp32'")  # a corrupt graph is one line, not a DecodeError 40 s in
    options = OrtOptions(intra_op_threads=cfg.threads)
    calib_rows, eval_rows, cond_doc = condition_sets(bundle, cfg)
    n_calib = cfg.calib_samples if calib_rows is None else len(next(iter(calib_rows.values())))
    n_eval = cfg.eval_samples if eval_rows is None else len(next(iter(eval_rows.values())))

    with owned_tempdir("edgekit-quantize-") as tmp:  # a killed run's dir is swept by the next
        prepared, skipped = prepare_model(fp32_path, tmp / "prepared.onnx", cfg.preprocess)
        if skipped is None:
            say("prepared the graph with quant_pre_process")
        elif cfg.preprocess:  # the one warning line: what was skipped and why
            warn(f"{skipped}: quantizing without pre-processing (MatMul+Add stay unfused; INT8 may run slower)")
        preprocess_doc = {"applied": skipped is None, "skipped_because": skipped}
        time_input = KIND_IO["flow"][0][1] if kind == "flow" else None
        plan = analyse_graph(prepared, time_input, module_labels(fp32_path))
        selected, floated = select_nodes(plan, cfg)
        if not selected:
            raise EdgekitError(
                f"nothing to quantize in {bundle.name}: every {'/'.join(cfg.op_types)} node is excluded or kept float",
                hint="drop some --exclude values",
            )
        clock["prepare_s"] = time.perf_counter() - start

        say(f"FP32 decode: {n_calib} calibration + {n_eval} held-out sequences ({cond_doc['source']})")
        t0 = time.perf_counter()
        with OrtRuntime(fp32_path, options) as rt:
            traj = record_trajectories(bundle, rt, n_calib, cfg.calib_seed, cfg.decode, rows=calib_rows)
            reference = decode_eval_set(bundle, rt, n_eval, cfg.eval_seed, cfg.decode, rows=eval_rows)
        clock["fp32_decode_s"] = time.perf_counter() - t0
        reader = calibration_reader(traj.feeds, bundle.inputs)
        cache = tmp / "calibration.json"
        say(f"calibrate ({cfg.method}) on {len(traj.feeds)} recorded network calls")
        t0 = time.perf_counter()
        calibrate(prepared, reader, cfg, cache)
        clock["calibrate_s"] = time.perf_counter() - t0
        builds = iter(range(10**6))
        by_name = plan.by_name()
        labels = {n.name: n.label for n in plan.nodes}

        # Float nodes that store INT8 weights (float activations and compute): kept float by rule
        # where the profile allows it, and every budget fallback (a selected node left out of a
        # build). --exclude means fully float.
        settings = cfg.settings
        weight_only = weight_only_by_rule(floated, cfg)
        # Fallbacks whose weight-only noise alone broke the budget: fully float (FP32 weights).
        full_float: list[str] = []

        def build(nodes: list[str]) -> Path:
            out = tmp / f"int8-{next(builds)}.onnx"
            wo = weight_only + ([n for n in selected if n not in full_float] if settings.weight_only_fallback else [])
            quantize_model(prepared, out, reader, nodes, cfg, plan, calibration_cache=cache, weight_only=wo)
            return out

        def measure(model: Path) -> dict[str, Any]:
            with _budget_runtime(model, cfg, options) as rt:
                run = decode_eval_set(bundle, rt, n_eval, cfg.eval_seed, cfg.decode, reference=fp32_rt, rows=eval_rows)
                # `edgekit check`'s default gate on the same rows, seed and decode settings
                gate = gate_runtimes(bundle, fp32_rt, rt, n_eval, cfg.eval_seed, cfg.decode, eval_rows)
            return compare(kind, reference, run) | gate_metrics(gate)

        def sensitivity(model: Path, nodes: list[str]) -> dict[str, dict[str, float]]:
            pick = np.linspace(0, len(traj.feeds) - 1, min(cfg.sensitivity_feeds, len(traj.feeds))).round().astype(int)
            feeds = [traj.feeds[i] for i in sorted(set(pick.tolist()))]
            scores = node_sensitivity(prepared, model, feeds, {n: by_name[n] for n in nodes})
            alone = isolated_output_sqnr(prepared, build, nodes, feeds, KIND_IO[kind][1][0])
            return {n: scores.get(n, {}) | {"isolated_output_sqnr_db": alone[n]} for n in nodes}

        say(f"quantize {len(selected)} nodes ({cfg.profile} profile, {cfg.method}) and decode the held-out set in INT8")
        t0 = time.perf_counter()
        with OrtRuntime(fp32_path, options) as fp32_rt:  # drives the lockstep decodes
            def loop() -> tuple[Path, Any]:
                return fallback_until_within_budget(
                    selected, budget, build, measure, sensitivity,
                    enabled=cfg.fallback, max_fallback=cfg.max_fallback, labels=labels, progress=say,
                    fallback_to="weight-only" if settings.weight_only_fallback else "float",
                )

            model, outcome = loop()
            escalated: list[dict[str, Any]] = []
            # Weight-only fallbacks cannot remove weight-quantization noise: when the loop ran out
            # with the budget still failing, the first (most sensitive) fallback goes fully float
            # and the loop runs again (flow demo, batch 2: every node weight-only still lost > 1 dB).
            while (not outcome.passed and cfg.fallback and settings.weight_only_fallback and outcome.fallback
                   and len(full_float) < MAX_FULL_FLOAT):
                first = next((f for f in outcome.fallback if f["node"] not in full_float), None)
                if first is None:
                    break
                full_float.append(first["node"])
                escalated.append({"node": first["node"], "reason": first["reason"] + "; weight-only was not enough: fully float"})
                say(f"budget still not met with weight-only fallbacks: {first['label']} -> fully float, fall back again")
                model, outcome = loop()
            if escalated:
                why = {f["node"]: f["reason"] for f in escalated}
                outcome.fallback = [f | {"reason": why[f["node"]]} if f["node"] in why else f for f in outcome.fallback]
        clock["quantize_and_budget_s"] = time.perf_counter() - t0

        structure = qdq_structure(model)
        violations = trt_violations(model) if cfg.profile == "trt" else []
        if violations:  # a profile that breaks its own rules is a bug here, not a user error
            raise RuntimeError(f"trt profile produced a graph TensorRT rejects: {violations[:3]}")
        # What ORT really quantized of what was asked (Conv outputs' consumers also read a DQ).
        int8_nodes = sorted(set(outcome.quantized) & set(structure["quantized_nodes"]))
        weight_only_nodes = sorted(set(structure["weight_only_nodes"]) - set(int8_nodes))
        t0 = time.perf_counter()
        readers = {a: f"{by_name[n].label} input" for n in reversed(int8_nodes) for a in by_name[n].activations}
        tensors = sorted(readers)
        drift = range_drift(prepared, tensors, traj, cfg.threads, labels=readers)
        clock["range_drift_s"] = time.perf_counter() - t0

        summary = _summary(bundle, cfg, plan, floated, outcome, traj, drift, structure, budget, int8_nodes, weight_only_nodes)
        summary["budget"]["eval"]["samples"] = n_eval
        summary["conditions"] = cond_doc
        summary["sizes"] = {
            "fp32_bytes": fp32_path.stat().st_size,
            "int8_bytes": model.stat().st_size,
            "ratio": model.stat().st_size / fp32_path.stat().st_size,
        }
        summary["preprocess"] = preprocess_doc
        summary["warnings"] = warnings
        summary["structure"]["trt_rules"] = "pass" if cfg.profile == "trt" else "not checked (cpu profile)"
        record_result(bundle, model, cache, tensors, tmp, cfg, summary, clock, start, eval_rows)
    return bundle.manifest["quantization"] | {"bundle": str(bundle.root)}


def _budget_runtime(model: Path, cfg: QuantizeConfig, options: Any) -> Any:
    """The runtime that decodes an INT8 candidate for the budget (``cfg.runtime``)."""
    if cfg.runtime == "openvino":
        return OpenVinoRuntime(model, OvOptions(threads=cfg.threads))
    return OrtRuntime(model, options)


def _summary(
    bundle: Bundle,
    cfg: QuantizeConfig,
    plan: GraphPlan,
    floated: Mapping[str, str],
    outcome: Any,
    traj: Any,
    drift: Any,
    structure: Mapping[str, Any],
    budget: Mapping[str, float],
    int8_nodes: list[str],
    weight_only_nodes: list[str] = (),
) -> dict[str, Any]:
    by_name = plan.by_name()
    fallback_names = {f["node"] for f in outcome.fallback}
    weight_only = set(weight_only_nodes)

    def row(name: str, reason: str, source: str) -> dict[str, Any]:
        # precision: "weight-only" = INT8 weight + DQ, float activations and compute; "float" = FP32.
        wo = name in weight_only
        return {
            "node": name, "label": by_name[name].label, "op": by_name[name].op_type, "source": source,
            "precision": "weight-only" if wo else "float",
            "reason": reason + ("; weights stored INT8, computed in float" if wo else ""),
        }

    floated_rows = [row(n, r, "user" if r.startswith("excluded") else "rule") for n, r in floated.items()] + [
        row(f["node"], f["reason"], "budget") for f in outcome.fallback
    ]
    kept_float_ops: dict[str, int] = {}
    for n in plan.nodes:
        if n.op_type not in cfg.op_types and n.activations and n.op_type in _NOTABLE_FLOAT_OPS:
            kept_float_ops[n.op_type] = kept_float_ops.get(n.op_type, 0) + 1
    total_mm = plan.matmul_flops()
    total_w = plan.matmul_flops(ops=("MatMul", "Gemm", "Conv"))
    return {
        "schema": SCHEMA,
        "model": bundle.name,
        "kind": bundle.kind,
        "profile": cfg.profile,
        "method": cfg.method,
        "config": cfg.to_json(),
        "calibration": traj.summary() | {"method": cfg.method, "tensors_int8_inputs": len(drift.tensors)},
        "range_drift": drift.to_json(),
        "selection": {
            # int8: fully INT8 (Q/DQ on activations and weights); weight_only: INT8 weights, float
            # activations and compute; fully_float: FP32 weights and compute (e.g. --exclude).
            "int8": [{"node": n, "label": by_name[n].label, "op": by_name[n].op_type, "precision": "int8"} for n in int8_nodes],
            "weight_only": [{"node": r["node"], "label": r["label"], "op": r["op"], "source": r["source"]}
                            for r in floated_rows if r["precision"] == "weight-only"],
            "fully_float": [{"node": r["node"], "label": r["label"], "op": r["op"], "source": r["source"]}
                            for r in floated_rows if r["precision"] == "float"],
            "float": floated_rows,
            "float_by_op_type": kept_float_ops,
            "excluded_user": sorted(n for n, r in floated.items() if r.startswith("excluded")),
            "excluded_auto": sorted([n for n, r in floated.items() if not r.startswith("excluded")] + list(fallback_names)),
        },
        "budget": {
            "limits": dict(budget),
            "checks": outcome.checks,
            "passed": outcome.passed,
            "eval": {"samples": cfg.eval_samples, "seed": cfg.eval_seed, "decode": dict(cfg.decode),
                     "lockstep_token_agreement": "token decisions in lockstep with FP32 (same input, same noise)"},
            "history": outcome.history,
        },
        "passed": outcome.passed,
        "measured": outcome.metrics,
        "fallback": outcome.fallback,
        "sensitivity": {n: outcome.ranking[n] for n in rank_by_sensitivity(outcome.ranking)[:10]},
        "int8_flop_share": {
            "matmul": plan.matmul_flops(int8_nodes) / total_mm if total_mm else None,
            "weighted": plan.matmul_flops(int8_nodes, ops=("MatMul", "Gemm", "Conv")) / total_w if total_w else None,
        },
        "structure": {"ops": structure["ops"], "qdq_nodes": len(structure["qdq"])},
    }


# Ops users ask about when they read "what stayed float" (the rest are reshapes and arithmetic).
_NOTABLE_FLOAT_OPS = ("Softmax", "LayerNormalization", "Sin", "Cos", "Gelu", "Tanh", "Sigmoid")


def demo_quantize(bundles: Mapping[str, Bundle], n: int = 16, seed: int = 0, progress: Callable[[str], None] | None = None) -> dict[str, Any]:
    """The demo's quantize stage: ``quantize_bundle`` on each demo bundle (cpu profile, default
    budgets, ``n`` held-out sequences from ``seed``) and the FP32-vs-INT8 numbers side by side:
    {kind: {"passed", "measured", "quality_fp32", "quality_int8", "sizes", "fallback", ...}}."""
    say = progress or (lambda message: None)
    out: dict[str, Any] = {}
    for kind, bundle in bundles.items():
        say(f"quantize {bundle.name} (INT8, cpu profile)")
        s = quantize_bundle(bundle.root, QuantizeConfig(eval_samples=n, eval_seed=seed), progress=None)
        measured = s["measured"]
        out[kind] = {
            "bundle": s["bundle"],
            "passed": s["passed"],
            "budget": s["budget"]["checks"],
            "measured": {k: v for k, v in measured.items() if not k.startswith("quality")},
            "quality_fp32": measured.get("quality_fp32"),
            "quality_int8": measured.get("quality_int8"),
            "sizes": s["sizes"],
            "int8_flop_share": s["int8_flop_share"],
            "fallback": [f["label"] for f in s["fallback"]],
        }
    return out
