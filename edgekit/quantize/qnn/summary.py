"""What the qnn profile's search hands back (``search_result``) and the ``qnn`` section of the
quantize summary (``promotions``): the HTP it was measured for, the tensors promoted to 16 bit
and why, and the share of activations left at 8 bit per call of the decode. The functions take
the ``QnnProfile`` whose run, tensors, weights, rules and step buckets they read."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from edgekit.quantize.calibrate import range_drift
from edgekit.quantize.hooks import SearchResult
from edgekit.quantize.qnn.graph import activation_bits, producer_labels
from edgekit.quantize.qnn.search import Promotion, promotion_label, tensor_of
from edgekit.runtimes.qnn import emulated, float_nodes, versions


def search_result(
    profile: Any,
    model: Path,
    promoted: list[Promotion],
    ranking: Mapping[Promotion, float],
    passed: bool,
    metrics: dict[str, Any],
    rows: list[dict[str, Any]],
) -> SearchResult:
    """The qnn profile's ``SearchResult`` for the chosen ``model``: its checks, the nodes that stay
    float (the HTP runs them in fp16), range drift of the first 64 activations, the 10 most
    sensitive promotions, and the ``qnn`` and ``step_buckets`` sections of the summary."""
    run = profile.run
    floats = float_nodes(model)
    if floats:  # get_qnn_qdq_config quantizes every op it knows; anything else is named here
        first = floats[0]
        run.warn(
            f"{len(floats)} node(s) stay float (e.g. {first['node']} {first['op']}): the HTP computes them in fp16"
        )
    producer = producer_labels(run.prepared, profile.labels)
    shown = [t for t in profile.tensors if t in producer][:64]
    with run.timed("range_drift_s"):
        drift = range_drift(run.prepared, shown, run.traj, run.cfg.threads, labels={t: producer[t] for t in shown})
    ops: dict[str, int] = {}
    for n in run.plan.nodes:
        ops[n.op_type] = ops.get(n.op_type, 0) + 1
    return SearchResult(
        model=model,
        passed=passed,
        metrics=metrics,
        checks=rows,
        int8_nodes=[n.name for n in run.plan.nodes],
        sensitivity={
            promotion_label(t): {"output_snr_db": ranking[t]} for t in sorted(ranking, key=ranking.__getitem__)[:10]
        },
        history=run.history,
        float_by_op_type={f["op"]: sum(1 for x in floats if x["op"] == f["op"]) for f in floats},
        int8_flop_share={"matmul": 1.0 if run.plan.matmul_flops() else None, "weighted": 1.0},
        structure={"ops": ops, "float_nodes": floats},
        drift=drift,
        tensors=profile.tensors,
        budget_extra={"measured_on": "qnn HTP backend" + (" (x86 emulation)" if emulated() else "")},
        extras={
            "qnn": promotions(profile, model, promoted, ranking, producer),
            "step_buckets": profile.buckets.to_json(model),
        },
        bucket_models=profile.buckets.paths(model),
    )


def promotions(
    profile: Any,
    model: Path,
    promoted: list[Promotion],
    ranking: Mapping[Promotion, float],
    producer: Mapping[str, str],
) -> dict[str, Any]:
    """The summary's ``qnn`` section: the HTP, the weights' and activations' bits, every promotion
    in order (what it is, what produced it, its output SNR alone at 8 bit, why it was promoted)."""
    weight_set = set(profile.weights)
    tensors = set(profile.tensors)
    rule = set(profile.by_rule)
    # Activations at 16 bit as each bucket's written graph holds them (promoted ones, inputs of
    # promoted MatMul weights, outputs of promoted Gather tables, and what ORT ties to them).
    paths = profile.buckets.paths(model)
    wide = [len({t for t, b in activation_bits(p, profile.tensors).items() if b == 16} & tensors) for p in paths]
    buckets = profile.buckets.for_model(model)
    if buckets is None:
        share = [1.0]
    else:
        calls = [len(mine) for mine in profile.buckets.calls_by_bucket(buckets)]
        share = [c / max(sum(calls), 1) for c in calls]
    # The 8-bit share per call of the decode: a bucket's graph runs for its own calls.
    mean_wide = float(sum(w * c for w, c in zip(wide, share)))
    doc = {
        "htp_arch": profile.htp.arch,
        "soc_model": profile.htp.soc,
        **versions(),
        "weights": (
            "MatMul weights int8 per output channel"
            if profile.run.cfg.settings.per_channel
            else "MatMul weights uint8 per tensor"
        )
        + ", other weights uint8 per tensor; promoted MatMul weights and Gather tables uint16",
        "activations": "uint8, promoted tensors uint16",
        "activation_tensors": len(profile.tensors),
        "promoted_16bit": len(promoted),
        "activations_16bit": round(mean_wide, 1) if len(paths) > 1 else wide[0],
        "weights_16bit": sum(1 for p in promoted if tensor_of(p) in weight_set),
        "share_8bit": 1.0 - mean_wide / len(tensors) if tensors else None,
        "refused_by_htp": profile.refused,
        "refused_like": profile.refused_like,  # left at 8 bit with a refused tensor of their kind
        "htp_below_simulation_unpromoted_db": profile.base_gap_db,  # the graph's own gap, where over 1.5 dB
        # the ranking's recorded calls per step bucket, its gated forwards and one forward's time
        "ranking": {"calls": list(profile.ranked_calls), **profile.rank_price},
        "promotions": [
            {
                "step": i + 1,
                "tensor": tensor_of(p),
                "bucket": None if isinstance(p, str) else p[0],
                "kind": "weight"
                if tensor_of(p) in weight_set
                else "constant"
                if tensor_of(p) in profile.facts.floats
                else "activation",
                "produced_by": "initializer"
                if tensor_of(p) in weight_set or tensor_of(p) in profile.facts.floats
                else producer.get(tensor_of(p), tensor_of(p)),
                "output_snr_db": ranking.get(p),
                "why": profile.by_rule[p] if p in rule else "override" if p in profile.forced else "budget",
            }
            for i, p in enumerate(promoted)
        ],
    }
    if len(paths) > 1:
        doc["activations_16bit_per_bucket"] = wide
        doc["share_8bit_is"] = "per call of the decode: each step bucket's graph, weighted by its share of the calls"
    return doc
