"""The OpenVINO rows of ``bench.py`` (issue #17): the best INT8 engine against ONNX Runtime FP32,
per forward and per decode; NAR (K=8) vs AR at L=256 on each engine in INT8 with the crossover
length per engine; the host overhead share of a masked decode on the best engine (host loop and
fused graphs); and OpenVINO's op profile, which says where INT8 time goes.

Every ratio is measured side by side in one process with the calls interleaved round-robin
(``probes.latency.interleaved``): on a shared machine the load moves absolute times by tens of
percent between seconds, and interleaving makes it hit every engine alike.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from edgekit.bundle import Bundle
from edgekit.export.verify import random_feed
from edgekit.probes.latency import interleaved

# (label, runtime, artifact, OpenVINO inference precision or None for ORT)
FORWARD_VARIANTS: tuple[tuple[str, str, str, str | None], ...] = (
    ("ort fp32", "ort", "fp32", None),
    ("ort int8", "ort", "int8", None),
    ("openvino fp32", "openvino", "fp32", "f32"),
    ("openvino bf16", "openvino", "fp32", "bf16"),
    ("openvino int8", "openvino", "int8", "f32"),
    ("openvino int8+bf16", "openvino", "int8", "bf16"),  # the QDQ model's float parts in bf16
)


def _open(
    bundle: Bundle,
    runtime: str,
    artifact: str,
    precision: str | None,
    threads: int,
    path: Path | None = None,
    profiling: bool = False,
) -> Any:
    from edgekit.runtimes.openvino import OpenVinoRuntime, OvOptions
    from edgekit.runtimes.ort import OrtOptions, OrtRuntime

    path = path or bundle.path_of(artifact)
    if runtime == "ort":
        return OrtRuntime(path, OrtOptions(intra_op_threads=threads))
    return OpenVinoRuntime(path, OvOptions(threads=threads, inference_precision=precision, profiling=profiling))


def _bf16() -> bool:
    from edgekit.runtimes.openvino import device_capabilities

    return "BF16" in device_capabilities("CPU")


def engines_forward(
    masked: Path, threads: int, rounds: int, extra_int8: Mapping[str, Path] | None = None
) -> dict[str, Any]:
    """Median ms per forward of every engine x precision (interleaved), each over ORT FP32, and
    OpenVINO's op profile of its INT8 forward. ``extra_int8``: other QDQ files of the same model
    ({label: path}, e.g. another quantization profile) timed on OpenVINO beside them."""
    bundle = Bundle.load(masked)
    feeds = random_feed(bundle.inputs, np.random.default_rng(0))
    variants = [v for v in FORWARD_VARIANTS if "bf16" not in v[0] or _bf16()]
    rts = {label: _open(bundle, rt, art, prec, threads) for label, rt, art, prec in variants}
    for label, path in (extra_int8 or {}).items():
        rts[f"openvino int8 ({label})"] = _open(bundle, "openvino", "int8", "f32", threads, path=path)
    try:
        samples = interleaved({k: (lambda rt=rt: rt.run(feeds)) for k, rt in rts.items()}, rounds, warmup=3)
        settings = {k: dict(getattr(rt, "settings", {}) or {}) for k, rt in rts.items()}
    finally:
        for rt in rts.values():
            rt.close()
    med = {k: float(np.median(v)) for k, v in samples.items()}
    base = med["ort fp32"]
    int8 = {k: v for k, v in med.items() if "int8" in k and k.startswith("openvino")}
    best = min(int8, key=int8.get)
    return {
        "threads": threads,
        "rounds": rounds,
        "median_ms": med,
        "speedup_vs_ort_fp32": {k: base / v for k, v in med.items()},
        "p25_ms": {k: float(np.percentile(v, 25)) for k, v in samples.items()},
        "best_int8": best,
        "settings": settings,
        "op_profile": ov_op_profile(bundle, "int8", threads, feeds),
        "op_profile_fp32": ov_op_profile(bundle, "fp32", threads, feeds),
    }


def ov_op_profile(
    bundle: Bundle, artifact: str, threads: int, feeds: Mapping[str, np.ndarray], runs: int = 20
) -> dict[str, Any]:
    """OpenVINO's per-node times (PERF_COUNT) summed by (node type, kernel), ms per forward."""
    per: dict[str, float] = defaultdict(float)
    count: dict[str, int] = defaultdict(int)
    with _open(bundle, "openvino", artifact, "f32", threads, profiling=True) as rt:
        for _ in range(3):
            rt.run(feeds)
        for _ in range(runs):
            rt.run(feeds)
            for row in rt.op_profile():
                key = f"{row['type']} [{row['kernel']}]"
                per[key] += row["us"] / 1e3 / runs
                count[key] += 1
    total = sum(per.values())
    ops = sorted(per.items(), key=lambda kv: -kv[1])
    return {
        "kernel_ms": total,
        "ops": [{"op": k, "ms": v, "share": v / total if total else None, "nodes": count[k] // runs} for k, v in ops],
    }


def engines_decode(masked: Path, threads: int, rounds: int, graphs: Sequence[str] = ()) -> dict[str, Any]:
    """Median ms per masked decode (bundle defaults, host loop) on ORT FP32/INT8 and OpenVINO
    INT8/bf16, interleaved, with each one's host overhead share (decode time outside
    ``Runtime.run``); and the fused ``graphs`` on OpenVINO (fp32 graphs; bf16 where the CPU has it)."""
    from edgekit.decode.dispatch import decode, decode_config
    from edgekit.decode.fused import decode_fused
    from edgekit.evaluate import conditions
    from edgekit.probes.latency import TimedRuntime
    from edgekit.runtimes import open_fused, open_runtime

    bundle = Bundle.load(masked)
    kind = bundle.kind
    cfg = decode_config(kind, bundle.manifest.get("decode_defaults", {}), {})
    batch = next(iter(bundle.inputs.values())).shape[0]
    cond = conditions(bundle, {}, batch, 0)
    wanted = [("ort", "fp32"), ("ort", "int8"), ("openvino", "int8"), ("openvino", "fp32")] + (
        [("openvino", "bf16")] if _bf16() else []
    )
    timed = {f"{r} {p}": TimedRuntime(open_runtime(bundle, r, p, threads=threads)) for r, p in wanted}
    if _bf16():  # the QDQ model with its float parts in bf16 (a target's [openvino] inference_precision = "bf16")
        timed["openvino int8+bf16"] = TimedRuntime(_open(bundle, "openvino", "int8", "bf16", threads))
    fused_precision = "bf16" if _bf16() else "fp32"
    entries = {}
    for g in graphs:
        rt, entries[g] = open_fused(bundle, g, threads=threads, runtime="openvino", precision=fused_precision)
        timed[f"openvino {fused_precision} fused {g}"] = TimedRuntime(rt)
    try:
        fns: dict[str, Callable[[], object]] = {}
        for label, t in timed.items():
            g = next((g for g in graphs if label.endswith(f"fused {g}")), None)
            if g is None:
                fns[label] = t.timed_decodes(lambda t=t: decode(kind, t, bundle.meta, cond, cfg))
            else:
                fns[label] = t.timed_decodes(lambda t=t, g=g: decode_fused(kind, t, entries[g], cond, cfg))
        warmup = 2
        samples = interleaved(fns, rounds, warmup=warmup)
        share = {k: t.breakdown(skip=warmup).host_overhead_share for k, t in timed.items()}
    finally:
        for t in timed.values():
            t.close()
    med = {k: float(np.median(v)) for k, v in samples.items()}
    base = med["ort fp32"]
    return {
        "threads": threads,
        "rounds": rounds,
        "batch": batch,
        "steps": cfg.steps,
        "median_ms": med,
        "speedup_vs_ort_fp32": {k: base / v for k, v in med.items()},
        "host_share": share,
    }


def nar_ar_engines(
    masked: Path, ar: Path, lengths: Sequence[int], threads: int, iters: int, cache: Path
) -> dict[str, Any]:
    """NAR (the bundle's K) vs AR decode ms at each length, architecture-only models in INT8
    (cpu-profile QDQ, no budget), on ORT and on OpenVINO (same ONNX files, cached in ``cache``);
    the crossover length per engine (``profiler.crossover``)."""
    from edgekit.probes.latency import MeasureConfig
    from edgekit.profile import ProfileConfig, crossover, graph_batch, length_sweep

    bundle, ar_bundle = Bundle.load(masked), Bundle.load(ar)
    steps = int(bundle.manifest.get("decode_defaults", {}).get("steps", 8))
    cfg = ProfileConfig(
        threads=threads,
        sweep_precision="int8",
        power="off",
        sweep_cache=cache,
        sweep_measure=MeasureConfig(warmup_iters=1, warmup_seconds=0.2, iters=iters, min_seconds=0.5),
    )
    out: dict[str, Any] = {"lengths": list(lengths), "nar_steps": steps, "threads": threads, "engines": {}}
    for engine in ("ort", "openvino"):
        sweep = length_sweep(bundle, ar_bundle, engine, steps, graph_batch(bundle), lengths, cfg)
        if not sweep.get("available"):
            out["engines"][engine] = {"available": False, "reason": sweep.get("reason")}
            continue
        points = sweep["points"]
        for p in points:
            p["speedup"] = p["ar_decode_ms"] / p["nar_decode_ms"]
        out["engines"][engine] = {
            "available": True,
            "points": points,
            "crossover": crossover(points, steps),
            "how": sweep["how"],
        }
    return out
