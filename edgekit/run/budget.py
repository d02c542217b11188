"""Latency-budgeted flow decoding: the best (solver, steps) whose NFE fits a time budget here.

Quality depends on the model, not the device: ``measure_flow_quality`` decodes each (solver, steps)
once against a many-step reference (RK4, 128 NFE) on a few seeds and stores the SNR table in
``manifest["flow_quality"]``. Latency depends on the device: ``plan_for_budget`` measures the
per-NFE latency of the bundle's flow network now (probes.latency.measure) and picks the highest
SNR whose ``NFE × per-NFE latency`` fits. Expected time covers network calls only (host
overhead of the loop is small next to a network call and is not added).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from edgekit._lock import writes_bundle
from edgekit.bundle import Bundle, now_iso
from edgekit.decode.dispatch import decode_config
from edgekit.decode.flow import NFE_PER_STEP, SOLVERS, FlowDecodeConfig, decode_flow
from edgekit.errors import CheckFailed, UsageError
from edgekit.evaluate import conditions, snr_db
from edgekit.probes.latency import MeasureConfig, measure
from edgekit.runtimes import open_runtime
from edgekit.runtimes.base import Runtime


@dataclass(frozen=True)
class QualityConfig:
    solvers: tuple[str, ...] = SOLVERS  # every solver decode/flow.py has
    steps: tuple[int, ...] = (1, 2, 3, 4, 6, 8)  # the few-step regime a budget chooses from
    seeds: tuple[int, ...] = (0, 1)  # a couple of noise draws: SNR of one draw is noisy
    reference_solver: str = "rk4"  # high order: its error at 32 steps is far below any candidate's
    reference_steps: int = 32  # RK4 × 32 = 128 NFE, the reference
    grid: str | None = None  # time grid; None = the bundle's decode default
    # Sway coefficient s of the "sway" grid; None = the bundle's decode default. s < 0 puts the
    # steps near t = 0 (F5-TTS), s > 0 near t = 1, where the flow demo's velocity is stiffest.
    sway: float | None = None


@dataclass(frozen=True)
class Plan:
    """The chosen decode: ``expected_ms`` = NFE × ``per_nfe_ms`` measured now; ``expected_snr`` in dB
    against the reference, from the manifest's quality table."""

    solver: str
    steps: int
    nfe: int
    expected_ms: float
    expected_snr: float
    per_nfe_ms: float

    def __iter__(self):  # (solver, steps, expected_ms, expected_snr), as the API reads
        return iter((self.solver, self.steps, self.expected_ms, self.expected_snr))


def _flow_bundle(path: Path | str) -> Bundle:
    bundle = Bundle.load(path)
    if bundle.kind != "flow":
        raise UsageError(
            f"--latency-budget-ms applies to flow bundles; {bundle.root} is {bundle.kind!r}; run it without the flag"
        )
    return bundle


@writes_bundle("run --latency-budget-ms")
def measure_flow_quality(
    path: Path | str,
    cfg: QualityConfig = QualityConfig(),
    *,
    runtime: Runtime | None = None,
    cond: Mapping[str, np.ndarray] | None = None,
) -> dict[str, Any]:
    """SNR dB of each (solver, steps) vs the reference, averaged over ``cfg.seeds``; stored in and
    returned as ``manifest["flow_quality"]``. ``runtime``: the network to decode with (default:
    the bundle's fp32 graph on ORT); ``cond``: conditioning [B, ...] for every seed (default: the
    demo evaluation set through evaluate.conditions, one draw per seed)."""
    bundle = _flow_bundle(path)
    defaults = decode_config("flow", bundle.decode_defaults, {})  # the bundle's grid and sway, checked
    grid = cfg.grid or defaults.grid
    sway = float(cfg.sway if cfg.sway is not None else defaults.sway)
    own = runtime is None
    rt = open_runtime(bundle) if own else runtime
    try:
        batch = rt.inputs["x"].shape[0]
        snrs: dict[tuple[str, int], list[float]] = {}
        for seed in cfg.seeds:
            seed_cond = cond if cond is not None else conditions(bundle, {}, batch, seed)
            ref_cfg = FlowDecodeConfig(
                steps=cfg.reference_steps, solver=cfg.reference_solver, grid=grid, sway=sway, seed=seed
            )
            ref = decode_flow(rt, bundle.meta, seed_cond, ref_cfg).x.astype(np.float64)
            for solver in cfg.solvers:
                for steps in cfg.steps:
                    x = decode_flow(
                        rt,
                        bundle.meta,
                        seed_cond,
                        FlowDecodeConfig(steps=steps, solver=solver, grid=grid, sway=sway, seed=seed),
                    ).x
                    snrs.setdefault((solver, steps), []).append(snr_db(ref, x))
    finally:
        if own:
            rt.close()
    table = [
        {"solver": s, "steps": k, "nfe": k * NFE_PER_STEP[s], "snr_db": float(np.mean(v))} for (s, k), v in snrs.items()
    ]
    doc = {
        "reference": {
            "solver": cfg.reference_solver,
            "steps": cfg.reference_steps,
            "nfe": cfg.reference_steps * NFE_PER_STEP[cfg.reference_solver],
        },
        "grid": grid,
        "sway": sway,
        "seeds": list(cfg.seeds),
        "metric": "snr_db of the final x vs the reference, mean over seeds",
        "table": sorted(table, key=lambda r: (r["nfe"], r["solver"])),
        "measured": now_iso(),
    }
    bundle.record("flow_quality", doc)
    bundle.save()
    return doc


def per_nfe_latency_ms(runtime: Runtime, *, measure_cfg=None) -> float:
    """Median ms of one network call on ``runtime`` with zero feeds (probes.latency.measure)."""
    feeds = {name: spec.zeros() for name, spec in runtime.inputs.items()}
    cfg = measure_cfg or MeasureConfig(warmup_iters=2, warmup_seconds=0.05, iters=10, min_seconds=0.2)
    return measure(lambda: runtime.run(feeds), cfg).stats.median_ms


def choose(table: list[Mapping[str, Any]], per_nfe_ms: float, budget_ms: float) -> Plan:
    """Highest SNR with NFE × per_nfe_ms ≤ budget (ties: fewer NFE). Raises CheckFailed when
    even the cheapest entry does not fit."""
    if not budget_ms > 0:
        raise UsageError(f"--latency-budget-ms {budget_ms} is invalid; valid: a number of milliseconds > 0")
    fits = [r for r in table if r["nfe"] * per_nfe_ms <= budget_ms]
    if not fits:
        cheapest = min(table, key=lambda r: r["nfe"])
        need = cheapest["nfe"] * per_nfe_ms
        raise CheckFailed(
            f"--latency-budget-ms {budget_ms:g} is below one {cheapest['solver']} step ({cheapest['nfe']} NFE × "
            f"{per_nfe_ms:.3f} ms = {need:.3f} ms) on this device; valid: >= {need:.3f}, or export a smaller --batch"
        )
    best = max(fits, key=lambda r: (r["snr_db"], -r["nfe"]))
    return Plan(
        best["solver"],
        int(best["steps"]),
        int(best["nfe"]),
        best["nfe"] * per_nfe_ms,
        float(best["snr_db"]),
        per_nfe_ms,
    )


def plan_for_budget(
    path: Path | str,
    budget_ms: float,
    *,
    runtime: Runtime | None = None,
    measure_cfg=None,
    cond: Mapping[str, np.ndarray] | None = None,
) -> Plan:
    """The best-quality (solver, steps) for ``budget_ms`` per decode on this device.

    Uses ``manifest["flow_quality"]`` (measured and stored first when absent) and the per-NFE
    latency of ``runtime`` (default: the bundle's fp32 network on ORT) measured now. The Plan
    unpacks as (solver, steps, expected_ms, expected_snr)."""
    if not budget_ms > 0:
        raise UsageError(f"--latency-budget-ms {budget_ms} is invalid; valid: a number of milliseconds > 0")
    bundle = _flow_bundle(path)
    quality = bundle.flow_quality or measure_flow_quality(path, runtime=runtime, cond=cond)
    own = runtime is None
    rt = open_runtime(bundle) if own else runtime
    try:
        per_nfe = per_nfe_latency_ms(rt, measure_cfg=measure_cfg)
    finally:
        if own:
            rt.close()
    return choose(quality["table"], per_nfe, budget_ms)


def plan_for_request(
    path: Path | str,
    budget_ms: float,
    raw_cond: Mapping[str, str],
    batch: int | None,
    seed: int,
    progress: Callable[[str], None] | None = None,
) -> Plan:
    """``plan_for_budget`` with the conditions a `run`/`profile` command line asks for;
    ``progress(message)`` hears about the one-time quality table (seconds to minutes)."""
    bundle = Bundle.load(path)
    if progress is not None:
        if bundle.kind == "flow" and not bundle.flow_quality:
            progress(
                "first budget run on this bundle: measuring every solver and step count against a 128-NFE "
                "RK4 reference once (stored in the bundle)"
            )
        progress("measuring the per-NFE latency on this device")
    return plan_for_budget(path, budget_ms, cond=conditions(bundle, raw_cond, batch or bundle.batch, seed))
