"""Which conditions quantize calibrates and judges on: ``--cond-data`` rows split into
calibration and held-out rows, ``--cond`` values, or the bundle's seeded rule."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from edgekit.bundle import Bundle
from edgekit.evaluate import condition_rows, load_condition_data
from edgekit.evaluate.metrics import near_tie_note
from edgekit.quantize.config import QuantizeConfig


def condition_sets(bundle: Bundle, cfg: QuantizeConfig) -> tuple[dict | None, dict | None, dict[str, Any]]:
    """(calibration rows, held-out rows, what the manifest records about them). Rows are None
    where the bundle's seeded rule applies (demo held-out set, or draws in the declared ranges)."""
    n_calib, n_eval = cfg.samples
    if cfg.cond_data is not None:
        data = load_condition_data(bundle, cfg.cond_data)
        (c0, c1), (h0, h1) = data.split(n_calib, n_eval)
        doc = data.to_json() | {
            "calibration_rows": [c0, c1],
            "heldout_rows": [h0, h1],
            "cond": dict(cfg.cond),
            "source": f"--cond-data {data.source}: rows {c0}..{c1 - 1} calibrate, rows {h0}..{h1 - 1} held out",
        }
        return (
            condition_rows(bundle, cfg.cond, c1 - c0, cfg.calib_seed, data.take(c0, c1)),
            condition_rows(bundle, cfg.cond, h1 - h0, cfg.eval_seed, data.take(h0, h1)),
            doc,
        )
    if cfg.cond:
        doc = {"source": "--cond " + " ".join(f"{k}={v}" for k, v in cfg.cond.items()), "cond": dict(cfg.cond)}
        return (
            condition_rows(bundle, cfg.cond, n_calib, cfg.calib_seed),
            condition_rows(bundle, cfg.cond, n_eval, cfg.eval_seed),
            doc,
        )
    if bundle.ground_truth or not bundle.meta.get("conditioning"):
        return (
            None,
            None,
            {"source": "the demo model's held-out set" if bundle.ground_truth else "no conditioning inputs"},
        )
    sampler = bundle.condition_sampler
    if sampler:
        return None, None, {"source": f"the model's condition sampler {sampler} (seeded)", "sampler": sampler}
    return (
        None,
        None,
        {
            "source": "uniform draws within each conditioning input's declared [low, high) "
            "(give real rows with --cond-data FILE.npz)"
        },
    )


# check metrics shown beside the budget (the gated ones of each kind)
CHECK_SHOWN = (
    "token_agreement",
    "logits_kl",
    "top1_agreement",
    "snr_db",
    "cosine_similarity",
    "velocity_snr_db",
    "quality_drop.event_accuracy",
    "quality_drop.validity",
    "quality_drop.snr_db",
)


def gate_metrics(gate: Mapping[str, Any]) -> dict[str, Any]:
    """The budget's view of ``evaluate.gate_runtimes``' verdict: the margin (budget key
    ``check_margin``), the failed gates and the check metrics shown beside the budget."""
    return {
        "check_margin": gate["margin"],
        "check_failed": gate["failed"],
        "check_metrics": {k: v for k, v in gate["metrics"].items() if k in CHECK_SHOWN},
        # where check's top-1 gate fails on the FP32 model's own near-ties: that line
        "check_note": near_tie_note(gate["metrics"]) if "top1_agreement" in gate["failed"] else None,
    }
