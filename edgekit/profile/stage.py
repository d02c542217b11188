"""The profile stage: decode a bundle's model on several variants (runtime x precision x steps)
side by side in one run, with latency, per-step, memory, power and system-state probes around
each, ratios between the variants, and optionally the autoregressive baseline and the NAR-vs-AR
crossover length.

Every figure comes from ``edgekit.probes``; where a probe cannot measure (no power sensor, no
torch for the length sweep, no int8 artifact for the AR baseline) the document says
``unavailable`` with the reason instead of a number."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from edgekit.arithmetic import int8_host_warnings
from edgekit.bundle import Bundle, now_iso
from edgekit.decode.dispatch import decode_config
from edgekit.errors import EdgekitError
from edgekit.int8_match import int8_warnings
from edgekit.probes.system import compare_states, system_state
from edgekit.profile.aihub import AIHUB, aihub_precisions, profile_on_aihub
from edgekit.profile.compare_ar import compare_ar, resolve_ar_bundle
from edgekit.profile.config import (
    SCHEMA,
    ProfileConfig,
    ProgressFn,
    bundle_conditions,
    plan_variants,
)
from edgekit.profile.frontier_points import check_frontier_metric
from edgekit.profile.measure import open_power, power_doc, profile_variant
from edgekit.profile.ratios import variant_ratios
from edgekit.profile.targets import target_variants
from edgekit.runtimes.registry import backend


def profile_bundle(
    path: Path | str, cfg: ProfileConfig = ProfileConfig(), progress: ProgressFn | None = None
) -> dict[str, Any]:
    """Measure ``path``'s model on every variant of ``cfg`` in this process, one after the other,
    with the same seed, conditions and decode options. Returns the ``edgekit.profile/1`` document
    (JSON-ready; ``variants`` in measuring order, ``ratios`` between them, ``compare_ar`` when
    asked). ``progress(label, done, total)`` is called outside timed regions."""
    bundle = Bundle.load(path)
    decode_config(bundle.kind, bundle.decode_defaults, dict(cfg.decode))  # bad options fail here
    # AI Hub's devices run as jobs (profile.aihub); every other runtime is measured in this process.
    local = tuple(r for r in cfg.runtimes if r != AIHUB)
    mine = (
        tuple(p for p in cfg.precisions if any(p in backend(r).precisions for r in local)) or cfg.precisions
    )  # fp16 may be aihub's only
    if cfg.target is not None:  # the target's engines, instead of --runtime's
        variants_plan = target_variants(bundle, cfg)
    elif local:
        plan = dataclasses.replace(cfg, runtimes=local, precisions=mine, devices=(), require_npu=False)
        variants_plan = plan_variants(bundle, plan)
    else:
        variants_plan = []
    if cfg.compare_ar:
        resolve_ar_bundle(bundle, cfg)  # fail before measuring anything
        if cfg.frontier_steps:
            check_frontier_metric(bundle, cfg)
    show_steps = len(cfg.steps) > 1
    rows = cfg.batch or bundle.batch
    cond = bundle_conditions(bundle, rows, cfg.seed, cfg.cond, cfg.cond_data)
    power = open_power(cfg if variants_plan else dataclasses.replace(cfg, power="off"), progress)
    start_state = system_state()
    variants = [_measured_or_why(bundle, v, v.label(show_steps), cond, cfg, power, progress) for v in variants_plan]
    measured = [v for v in variants if v["available"]]
    doc: dict[str, Any] = {
        "schema": SCHEMA,
        "created": now_iso(),
        "bundle": str(bundle.root),
        "model": bundle.name,
        "kind": bundle.kind,
        "item_unit": "frames" if bundle.kind == "flow" else "tokens",
        "rows": rows,
        "config": cfg.to_json(),
        "power": power_doc(power),
        "variants": variants,
        "ratios": variant_ratios(measured),
        "compare_ar": compare_ar(bundle, measured, cfg, power, progress) if cfg.compare_ar and measured else None,
        "aihub": profile_on_aihub(bundle, cfg, cond, progress) if AIHUB in cfg.runtimes else None,
    }
    end_state = system_state()
    doc["system"] = {"before": start_state, "after": end_state, "warnings": compare_states(start_state, end_state)}
    arithmetic = int8_host_warnings(bundle.quantization, [v["precision"] for v in measured], str(bundle.root))
    asked = [v.precision for v in variants_plan] + (list(aihub_precisions(bundle, cfg)) if doc["aihub"] else [])
    swapped = int8_warnings(bundle, asked)[1]  # an int8 model quantize did not make: its figures are another model's
    doc["warnings"] = swapped + arithmetic + list(_warnings(doc)) + (doc["aihub"]["warnings"] if doc["aihub"] else [])
    return doc


def _measured_or_why(
    bundle: Bundle, v: Any, label: str, cond: Any, cfg: ProfileConfig, power: Any, progress: Any
) -> dict[str, Any]:
    """One variant's figures, or (it could not run) a row saying why: the other variants are
    still measured and reported."""
    try:
        return profile_variant(bundle, v, label, cond, cfg, power, progress, cfg.decode)
    except EdgekitError as exc:
        return {
            "id": label,
            "available": False,
            "runtime": v.runtime,
            "precision": v.precision,
            "reason": f"{bundle.root}: {exc}",
        }


def _warnings(doc: Mapping[str, Any]) -> Iterator[str]:
    """Everything that makes a figure suspect, prefixed with the variant it concerns."""
    every = [v for v in doc["variants"] if v["available"]]
    if doc.get("compare_ar"):
        every += [v for v in doc["compare_ar"]["variants"] if v.get("available")]
    for v in every:
        if v.get("timing_note"):
            yield f"{v['id']}: every latency of this variant is {v['timing_note']}"
        for w in v["latency"]["warnings"] + v["system"]["warnings"] + v["runtime_warnings"]:
            yield f"{v['id']}: {w}"
        if v["measurement"]["capped_at_max_iters"]:
            yield f"{v['id']}: stopped at max_iters before min_seconds"
        if v["measurement"].get("bounded_at_max_seconds"):
            yield (
                f"{v['id']}: {v['latency']['n']} decodes measured, stopped at --max-seconds "
                f"{v['measurement']['max_seconds']:g} (a decode takes {v['latency']['median_ms'] / 1e3:.1f} s; "
                "--iters N --max-seconds 0 measures N)"
            )
    yield from doc["system"]["warnings"]
