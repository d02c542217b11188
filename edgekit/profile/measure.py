"""Measuring one variant: decodes timed by the latency probe (runtime vs host time per call),
memory, power and system state around them."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from edgekit.bundle import Bundle
from edgekit.decode.dispatch import decode_config, decode_rows
from edgekit.probes.latency import MeasureConfig, TimedRuntime, measure
from edgekit.probes.memory import RssTracker, file_sizes, give_back_freed
from edgekit.probes.power import (
    PowerSampler,
    Unavailable,
    detect,
    energy_per_decode_mj,
    measure_idle,
    unseen_reason,
)
from edgekit.probes.speed import HostProbe, Timing, Watch
from edgekit.probes.system import compare_states, system_state
from edgekit.profile.config import DecodeModel, ProfileConfig, ProgressFn, Variant
from edgekit.runtimes import open_runtime
from edgekit.runtimes.base import Runtime


# ---- one variant --------------------------------------------------------------------------------
@dataclass
class PowerProbe:
    sampler: PowerSampler | None
    unavailable: Unavailable | None
    idle: Any = None  # PowerTrace of the idle baseline
    auto: bool = False  # the sampler is the one --power auto found, not one the user named


def measure_decodes(
    model: DecodeModel,
    runtime: Runtime,
    cond: Mapping[str, np.ndarray],
    decode_cfg: Any,
    mcfg: MeasureConfig,
    *,
    power: PowerProbe | None,
    rss: RssTracker | None,
    progress: Callable[[int, int], None] | None,
    keep_samples: bool,
    probe: HostProbe | None = None,
) -> dict[str, Any]:
    """Warm up, then measure decodes of ``runtime`` with the breakdown, power and RSS probes
    around the measured phase only. Returns the variant's figures (JSON-ready); ``timing``: the
    median, spread and the host's load around the measured phase (``probes.speed``; ``probe``
    reads the host, a stand-in in tests), what the ratios between variants are judged on."""
    timed = TimedRuntime(runtime)
    last: dict[str, Any] = {}

    def one_decode() -> None:
        last["decoded"] = decode_rows(model.kind, timed, model.meta, cond, decode_cfg)

    fn = timed.timed_decodes(one_decode)
    # Warm-up as its own measure() call so the power window and RSS growth cover steady state
    # only; its one measured call is discarded with the warm-up.
    warm = measure(
        fn,
        MeasureConfig(mcfg.warmup_iters, mcfg.warmup_seconds, iters=1, min_seconds=0.0, max_seconds=mcfg.max_seconds),
    )
    timed.reset()
    if rss is not None:
        rss.after_warmup()
    steady = MeasureConfig(0, 0.0, mcfg.iters, mcfg.min_seconds, mcfg.max_iters, mcfg.max_seconds)
    sampler = power.sampler if power is not None else None
    trace = None
    if sampler is not None:
        sampler.start()
    watch = Watch(probe or HostProbe())
    try:
        m = measure(fn, steady, progress)
    finally:
        if sampler is not None:
            trace = sampler.stop()
    timing = Timing.of([s / 1e6 for s in m.samples_ns], watch.stop())
    decoded = last["decoded"]
    breakdown = timed.breakdown()
    n = m.stats.n
    rows = int(decoded.output.shape[0])
    items = rows * int(decoded.output.shape[1])  # tokens [B, L] or frames [B, T, C]
    total_s = sum(m.samples_ns) / 1e9
    decodes_per_s = n / total_s if total_s > 0 else float("nan")
    host_ms = [d.host_ns / 1e6 for d in timed.decodes]
    doc: dict[str, Any] = {
        "device": runtime.device,
        # OpenVINO: threads, streams, performance hint and inference precision as compiled.
        "runtime_settings": dict(runtime.settings),
        "runtime_warnings": list(runtime.warnings),
        # Where a latency is not the device's (the NPU emulated on x86): said with every figure.
        "timing_note": runtime.timing_note,
        "decode": {"steps": decoded.steps, "nfe": decoded.nfe, "runtime_calls": decoded.runtime_calls, "rows": rows},
        "latency": m.stats.to_json(),
        "timing": timing.to_json(samples=False),
        "measurement": {
            "warmup_iters": warm.warmup_iters + 1,  # + the discarded call of the warm-up measure()
            "warmup_s": (warm.warmup_ns + warm.wall_ns) / 1e9,
            "wall_s": m.wall_ns / 1e9,
            "capped_at_max_iters": m.capped,
            "bounded_at_max_seconds": m.bounded,
            "max_seconds": mcfg.max_seconds,
        },
        "breakdown": breakdown.to_json()
        | {
            "median_host_ms": float(np.median(host_ms)),
            "step_ms_median": _per_call_medians(timed.decodes),
            "per_step_ms": (m.stats.median_ms / decoded.steps) if decoded.steps else None,
        },
        "throughput": {
            "decodes_per_s": decodes_per_s,
            "items_per_decode": items,
            "items_per_s": items * decodes_per_s,
        },
    }
    if keep_samples:
        doc["samples_ms"] = [s / 1e6 for s in m.samples_ns]
    doc["energy"], doc["power_trace"] = _energy(power, trace, n, keep_samples, runtime.device)
    return doc


def time_decodes(
    model: DecodeModel,
    runtime: Runtime,
    cond: Mapping[str, np.ndarray],
    decode_cfg: Any,
    mcfg: MeasureConfig,
    label: str,
    progress: ProgressFn | None,
) -> dict[str, Any]:
    """``measure_decodes`` for the latency alone (no power, RSS or kept samples), its progress
    told under ``label``: the frontier's points, the crossover sweep, AI Hub's host loop."""
    tick = (lambda done, total: progress(label, done, total)) if progress else None
    return measure_decodes(
        model, runtime, cond, decode_cfg, mcfg, power=None, rss=None, progress=tick, keep_samples=False
    )


def _per_call_medians(decodes: Sequence[Any]) -> list[float]:
    """Median duration (ms) of the i-th Runtime.run call over decodes, for the calls every
    decode made (a decode that stops early has fewer)."""
    if not decodes:
        return []
    calls = min(d.calls for d in decodes)
    steps = np.asarray([d.step_ns[:calls] for d in decodes], dtype=np.float64) / 1e6  # (decodes, calls)
    return [float(v) for v in np.median(steps, axis=0)] if calls else []


def _energy(
    power: PowerProbe | None, trace: Any, n: int, keep_samples: bool, device: str
) -> tuple[dict[str, Any], Any]:
    """The variant's ``energy`` and ``power_trace``. Where the probe does not read the device the
    decode ran on (``probes.power.scope``), the trace is kept (its readings are real) but no
    energy figure is derived from it."""
    if power is None or trace is None:
        reason = power.unavailable.reason if power is not None and power.unavailable else "power not measured"
        probe = power.unavailable.probe if power is not None and power.unavailable else "off"
        return {"available": False, "probe": probe, "reason": reason}, None
    trace_doc = trace.to_json(samples=keep_samples)
    unseen = unseen_reason(trace.probe, device, getattr(power.sampler, "cuda_index", None))
    if unseen is not None:
        picked = f" (--power auto picked {trace.probe}, the first probe this host has)" if power.auto else ""
        return {"available": False, "probe": trace.probe, "reason": unseen + picked}, trace_doc
    per = energy_per_decode_mj(trace, n, power.idle)
    doc = {"available": per.gross_mj is not None, "probe": trace.probe} | per.to_json()
    if per.gross_mj is None:
        doc["reason"] = per.reason or "the trace has no energy"
    return doc, trace_doc


def profile_variant(
    bundle: Bundle,
    variant: Variant,
    label: str,
    cond: Mapping[str, np.ndarray],
    cfg: ProfileConfig,
    power: PowerProbe,
    progress: ProgressFn | None,
    overrides: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    model = DecodeModel.of(bundle)
    opts = dict(overrides or {})
    if variant.steps is not None:
        opts["steps"] = variant.steps
    decode_cfg = decode_config(model.kind, model.decode_defaults, opts, seed=cfg.seed)
    if progress:
        progress(label, 0, 0)
    before = system_state()
    # What the variant before this one freed goes back to the system first: glibc keeps a closed
    # session's heap for the next allocations, and this variant's peak would sit on it
    # (Sana-600M: the INT8 session's peak read 0.95x FP32's, FP32's weights under it).
    give_back_freed()
    rss = RssTracker()
    rss.start()
    engine = variant.engine  # --target: the file the target loads
    opened = (
        engine.open(threads=cfg.threads)
        if engine is not None
        else open_runtime(bundle, variant.runtime, variant.precision, threads=cfg.threads)
    )
    with opened as rt:
        rss.mark("loaded")
        tick = (lambda done, total: progress(label, done, total)) if progress else None
        doc = measure_decodes(
            model, rt, cond, decode_cfg, cfg.measure, power=power, rss=rss, progress=tick, keep_samples=cfg.keep_samples
        )
        report = rss.stop()
        files = file_sizes(rt.model_files)  # the model and weight files (or engine) it loaded
    after = system_state()
    memory = report.to_json()
    memory.pop("points", None)
    memory["model_files_bytes"] = files
    memory["model_bytes"] = sum(files.values()) if files else None
    return {
        "id": label,
        "available": True,
        "runtime": variant.runtime,
        "precision": variant.precision,
        "target": None if engine is None else engine.target.name,
        "engine": None if engine is None else {"path": str(engine.path), "built": engine.built},
        "steps": doc["decode"]["steps"],
        "decode_config": {k: v for k, v in dataclasses.asdict(decode_cfg).items()},
        **doc,
        "memory": memory,
        "system": {"before": before, "after": after, "warnings": compare_states(before, after)},
    }


# ---- the stage ----------------------------------------------------------------------------------
def open_power(cfg: ProfileConfig, progress: ProgressFn | None) -> PowerProbe:
    found = detect(cfg.power, cfg.power_root)
    if isinstance(found, Unavailable):
        return PowerProbe(None, found)
    idle = None
    if cfg.idle_seconds > 0:
        if progress:
            progress(f"idle power baseline ({cfg.idle_seconds:g} s)", 0, 0)
        idle = measure_idle(found, cfg.idle_seconds)
    return PowerProbe(found, None, idle, auto=cfg.power == "auto")


def power_doc(power: PowerProbe) -> dict[str, Any]:
    if power.sampler is None:
        return power.unavailable.to_json() if power.unavailable else {"available": False, "reason": "not measured"}
    doc: dict[str, Any] = {"probe": power.sampler.probe, "available": True, "notes": list(power.sampler.notes())}
    if power.idle is not None:
        doc["idle"] = power.idle.to_json(samples=False)
        doc["idle_mw"] = power.idle.total_average_mw
    return doc
