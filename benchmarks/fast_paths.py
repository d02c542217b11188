"""The fast-path rows of ``bench.py``: INT8 vs FP32 per forward with ORT's op profile, fused vs
host decode loops, RSS growth over many decodes, and NFE to reach 30 dB per flow solver and grid.

Each function measures side by side in one process and returns plain dicts (JSON-ready); the
numbers come from the probes and loops the CLI uses, nothing is assumed.
"""

from __future__ import annotations

import json
import time
from collections import defaultdict
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from edgekit.bundle import Bundle
from edgekit.export.verify import random_feed

# ORT kernels that carry a weight matrix (FP32, INT8 QDQ-fused, weight-only INT8): what INT8 speeds up.
WEIGHTED_KERNELS = frozenset(
    {
        "Gemm",
        "QGemm",
        "FusedGemm",
        "MatMulNBits",
        "MatMulInteger",
        "MatMulIntegerToFloat",
        "DynamicQuantizeMatMul",
        "QLinearMatMul",
        "Conv",
        "FusedConv",
        "QLinearConv",
        "NhwcFusedConv",
    }
)


def interleaved(fns: Mapping[str, Callable[[], object]], n: int, warmup: int = 3) -> dict[str, list[float]]:
    """ms per call of each fn, calls interleaved round-robin (drift hits every variant alike)."""
    for _ in range(warmup):
        for fn in fns.values():
            fn()
    samples: dict[str, list[float]] = {k: [] for k in fns}
    for _ in range(n):
        for name, fn in fns.items():
            t0 = time.perf_counter_ns()
            fn()
            samples[name].append((time.perf_counter_ns() - t0) / 1e6)
    return samples


def op_profile(path: Path, feeds: Mapping[str, np.ndarray], threads: int, runs: int) -> dict[str, Any]:
    """ORT kernel time per op type (ms per forward) from its profiler, over ``runs`` forwards."""
    from edgekit.runtimes.ort import OrtOptions, OrtRuntime

    with OrtRuntime(path, OrtOptions(intra_op_threads=threads, profiling=True)) as rt:
        for _ in range(runs):
            rt.run(feeds)
        trace = rt.end_profiling()
    per_op: dict[str, float] = defaultdict(float)
    try:
        for event in json.loads(trace.read_text()):
            if event.get("cat") == "Node" and str(event.get("name", "")).endswith("_kernel_time"):
                per_op[event["args"]["op_name"]] += event["dur"] / 1e3 / runs  # us -> ms per forward
    finally:
        trace.unlink(missing_ok=True)
    total = sum(per_op.values())
    weighted = sum(v for k, v in per_op.items() if k in WEIGHTED_KERNELS)
    ops = sorted(per_op.items(), key=lambda kv: -kv[1])
    return {
        "kernel_ms": total,
        "weighted_ms": weighted,
        "other_ms": total - weighted,
        "ops": [{"op": k, "ms": v, "share": v / total if total else None} for k, v in ops],
    }


def int8_forward(masked: Path, threads: int, n: int) -> dict[str, Any]:
    """FP32 vs INT8 per forward on ORT (the bundle's graphs as `edgekit run` loads them), with the
    op profile that says where INT8 time goes, and the Amdahl bound: the ratio if every weighted
    op took no time at all in INT8."""
    from edgekit.runtimes.ort import OrtOptions, OrtRuntime

    bundle = Bundle.load(masked)
    paths = {p: bundle.path_of(p) for p in ("fp32", "int8")}
    feeds = random_feed(bundle.inputs, np.random.default_rng(0))  # values inside each input's declared range
    rts = {p: OrtRuntime(path, OrtOptions(intra_op_threads=threads)) for p, path in paths.items()}
    try:
        samples = interleaved({p: (lambda rt=rt: rt.run(feeds)) for p, rt in rts.items()}, n)
        fusions = {p: rt.fusions for p, rt in rts.items()}
    finally:
        for rt in rts.values():
            rt.close()
    med = {p: float(np.median(v)) for p, v in samples.items()}
    prof = {p: op_profile(path, feeds, threads, max(20, n // 4)) for p, path in paths.items()}
    f, q = prof["fp32"], prof["int8"]
    return {
        "fp32_ms": med["fp32"],
        "int8_ms": med["int8"],
        "speedup": med["fp32"] / med["int8"],
        "n": n,
        "threads": threads,
        "fusions": fusions,
        "weighted_speedup": f["weighted_ms"] / q["weighted_ms"] if q["weighted_ms"] else None,
        "fp32_weighted_share": f["weighted_ms"] / f["kernel_ms"] if f["kernel_ms"] else None,
        "int8_other_share": q["other_ms"] / q["kernel_ms"] if q["kernel_ms"] else None,
        "amdahl_bound": f["kernel_ms"] / q["other_ms"] if q["other_ms"] else None,
        "profile": prof,
    }


def fused_vs_host(bundle_path: Path, graphs: Sequence[str], threads: int, n: int) -> dict[str, Any]:
    """Median decode ms through the host loop and each fused graph of the bundle (fp32, ORT,
    the bundle's decode defaults, same seed and conditions), interleaved; and each path's host
    overhead share (decode time outside ``Runtime.run`` / decode time)."""
    from edgekit.decode.dispatch import decode, decode_config
    from edgekit.decode.fused import decode_fused
    from edgekit.evaluate import conditions
    from edgekit.probes.latency import TimedRuntime
    from edgekit.runtimes import open_fused, open_runtime

    bundle = Bundle.load(bundle_path)
    kind = bundle.kind
    cfg = decode_config(kind, bundle.manifest.get("decode_defaults", {}), {})
    batch = next(iter(bundle.inputs.values())).shape[0]
    cond = conditions(bundle, {}, batch, 0)
    timed = {"host": TimedRuntime(open_runtime(bundle, "ort", "fp32", threads=threads))}
    entries = {}
    for g in graphs:
        rt, entries[g] = open_fused(bundle, g, threads=threads)
        timed[g] = TimedRuntime(rt)
    try:
        fns: dict[str, Callable[[], object]] = {
            "host": timed["host"].timed_decodes(lambda: decode(kind, timed["host"], bundle.meta, cond, cfg))
        }
        for g in graphs:
            fns[g] = timed[g].timed_decodes(lambda g=g: decode_fused(kind, timed[g], entries[g], cond, cfg))
        warmup = 3  # rounds; TimedRuntime records them as decodes too, so the breakdown skips them
        samples = interleaved(fns, n, warmup=warmup)
        share = {k: t.breakdown(skip=warmup).host_overhead_share for k, t in timed.items()}
    finally:
        for t in timed.values():
            t.close()
    med = {k: float(np.median(v)) for k, v in samples.items()}
    return {
        "kind": kind,
        "batch": batch,
        "decode": {k: v for k, v in vars(cfg).items() if k != "seed"},
        "n": n,
        "median_ms": med,
        "speedup_vs_host": {g: med["host"] / med[g] for g in graphs},
        "host_share": share,
    }


def rss_growth(masked: Path, precision: str, decodes: int, threads: int, warmup: int = 100) -> dict[str, Any]:
    """RSS after ``warmup`` decodes vs after ``decodes`` more of the host loop (ORT), with the RSS
    every 10 % of the way: a leak grows along the series, a one-off (allocator arenas, numpy's
    caches settling; ~0.7 MiB in the first ~200 decodes here) does not, hence the long warm-up."""
    from edgekit.decode.dispatch import decode, decode_config
    from edgekit.evaluate import conditions
    from edgekit.probes.memory import RssTracker
    from edgekit.runtimes import open_runtime

    bundle = Bundle.load(masked)
    cfg = decode_config(bundle.kind, bundle.manifest.get("decode_defaults", {}), {})
    batch = next(iter(bundle.inputs.values())).shape[0]
    cond = conditions(bundle, {}, batch, 0)
    tracker = RssTracker()
    every = max(1, decodes // 10)
    with open_runtime(bundle, "ort", precision, threads=threads) as rt:
        tracker.start()
        for _ in range(warmup):
            decode(bundle.kind, rt, bundle.meta, cond, cfg)
        tracker.after_warmup()
        t0 = time.perf_counter()
        for i in range(1, decodes + 1):
            decode(bundle.kind, rt, bundle.meta, cond, cfg)
            if i % every == 0 and i < decodes:
                tracker.mark(f"after {i}")
        seconds = time.perf_counter() - t0
        report = tracker.stop()
    warm_rss, end_rss = report.rss("after_warmup"), report.rss("end")
    growth = report.growth_bytes("after_warmup", "end")
    series = [(name, snap.rss_bytes) for name, snap in report.points if name.startswith("after ") or name == "end"]
    return {
        "decodes": decodes,
        "warmup": warmup,
        "precision": precision,
        "seconds": seconds,
        "rss_after_warmup_bytes": warm_rss,
        "rss_end_bytes": end_rss,
        "growth_bytes": growth,
        "series": series,
        "reason": None if growth is not None else "RSS unreadable on this host (/proc/self/status)",
    }


def nfe_to_snr(flow: Path, target_db: float, grids: Sequence[tuple[str, float | None]]) -> dict[str, Any]:
    """For each solver and (time grid, sway coefficient): the fewest NFE whose final frames reach
    ``target_db`` SNR vs the 128-NFE RK4 reference on that grid (run.budget.measure_flow_quality;
    one table per grid). The bundle's own quality table is left as it was."""
    from edgekit.run.budget import QualityConfig, measure_flow_quality

    bundle = Bundle.load(flow)
    kept = bundle.manifest.get("flow_quality")
    rows = []
    tables = {}
    try:
        for grid, sway in grids:
            name = grid if grid != "sway" else f"sway s={sway:+g}"
            doc = measure_flow_quality(flow, QualityConfig(grid=grid, sway=sway))
            tables[name] = doc
            by_solver: dict[str, list[dict[str, Any]]] = defaultdict(list)
            for r in doc["table"]:
                by_solver[r["solver"]].append(r)
            for solver, rs in by_solver.items():
                rs.sort(key=lambda r: r["nfe"])
                hit = next((r for r in rs if r["snr_db"] >= target_db), None)
                best = max(rs, key=lambda r: r["snr_db"])
                rows.append(
                    {
                        "solver": solver,
                        "grid": name,
                        "nfe": hit["nfe"] if hit else None,
                        "steps": hit["steps"] if hit else None,
                        "snr_db": hit["snr_db"] if hit else None,
                        "best_snr_db": best["snr_db"],
                        "best_nfe": best["nfe"],
                        "max_nfe": rs[-1]["nfe"],
                    }
                )
    finally:
        restored = Bundle.load(flow)
        if kept is None:
            restored.manifest.pop("flow_quality", None)
        else:
            restored.manifest["flow_quality"] = kept
        restored.save()
    first = next(iter(tables.values()))
    return {"target_db": target_db, "reference": first["reference"], "rows": rows, "tables": tables}


def nar_ar_at(masked: Path, ar: Path, length: int, precision: str, threads: int, iters: int) -> dict[str, Any]:
    """Median decode ms of MaskGIT (the bundle's K) and AR (``length`` tokens, KV cache) at
    ``length``, architecture-only models on ORT in ``precision`` (profiler.length_sweep)."""
    from edgekit.probes.latency import MeasureConfig
    from edgekit.profile import ProfileConfig, graph_batch, length_sweep

    bundle, ar_bundle = Bundle.load(masked), Bundle.load(ar)
    steps = int(bundle.manifest.get("decode_defaults", {}).get("steps", 8))
    cfg = ProfileConfig(
        threads=threads,
        sweep_precision=precision,
        power="off",
        sweep_measure=MeasureConfig(warmup_iters=1, warmup_seconds=0.2, iters=iters, min_seconds=1.0),
    )
    sweep = length_sweep(bundle, ar_bundle, "ort", steps, graph_batch(bundle), (length,), cfg)
    if not sweep.get("available"):
        raise RuntimeError(sweep.get("reason", "the length sweep did not run"))
    point = sweep["points"][0]
    return {
        "length": length,
        "precision": precision,
        "nar_steps": steps,
        "how": sweep["how"],
        "nar_ms": point["nar_decode_ms"],
        "ar_ms": point["ar_decode_ms"],
        "speedup": point["ar_decode_ms"] / point["nar_decode_ms"],
    }
