"""Measuring the quality-latency frontier: the masked model at every K of ``--frontier-steps``
and the AR baseline, each timed per decode and scored on one evaluation set; ``frontier`` then
marks the Pareto-optimal points and finds the smallest K within tolerance of AR's quality."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from edgekit.bundle import Bundle
from edgekit.decode.dispatch import decode_config, decode_rows
from edgekit.errors import UsageError
from edgekit.evaluate import HIGHER_IS_BETTER, load_metric_hook, pad_rows, run_metric_hook, score
from edgekit.profile.config import DecodeModel, ProfileConfig, ProgressFn, bundle_conditions
from edgekit.profile.frontier import AR, NAR, FrontierPoint, Tolerance, frontier
from edgekit.profile.measure import time_decodes
from edgekit.runtimes import open_runtime
from edgekit.runtimes.base import Runtime

# The metric the frontier ranks by when --frontier-metric is not given, per ground-truth task:
# event accuracy moves with every K, while whole-sequence validity stays 0 until a model is good.
DEFAULT_METRIC = {"corpus-tokens": "event_accuracy"}


def check_frontier_metric(bundle: Bundle, cfg: ProfileConfig) -> None:
    """Before measuring: the --metric hook imports, and --frontier-metric names a ground-truth
    metric (a hook's metric names are only known once it has run)."""
    if cfg.metric_hook:
        load_metric_hook(cfg.metric_hook)
        return
    if cfg.frontier_metric is None or not bundle.ground_truth:
        return
    cond = bundle_conditions(bundle, 1, cfg.seed, cfg.cond)
    probe = np.zeros((1, int(bundle.meta["seq_len"])), dtype=np.int64)  # any token sequence has every score
    names = list(score(bundle, probe, cond) or {})
    if cfg.frontier_metric not in names:
        raise UsageError(
            f"--frontier-metric {cfg.frontier_metric!r} is not a "
            f"quality metric of {bundle.name}; valid: {', '.join(names)}"
        )


def measure_frontier(
    bundle: Bundle,
    ar: Bundle,
    variants: Sequence[Mapping[str, Any]],
    ar_docs: Mapping[tuple[str, str], Mapping[str, Any]],
    rows: int,
    cfg: ProfileConfig,
    progress: ProgressFn | None,
) -> dict[str, Any]:
    """Latency per decode and quality on one evaluation set for the masked model at every K of
    ``cfg.frontier_steps`` and for the AR baseline, per precision, on the first runtime.

    Latency: median per decode of ``rows`` rows under ``cfg.measure`` (a variant already
    measured at that K is reused; AR's comes from ``ar_docs``). Quality: ``cfg.frontier_n``
    conditions decoded in chunks of ``rows`` with seed ``cfg.seed + chunk``, scored against the
    ground truth and/or the hook. Returns the JSON-ready frontier (``available`` False + reason
    when nothing can score the outputs)."""
    hook = load_metric_hook(cfg.metric_hook) if cfg.metric_hook else None
    if not bundle.ground_truth and hook is None:
        return {
            "available": False,
            "reason": f"{bundle.name} has no ground truth to score; pass --metric module:function",
        }
    runtime = variants[0]["runtime"]
    length = int(bundle.meta["seq_len"])
    masked, baseline = DecodeModel.of(bundle), DecodeModel.of(ar)
    # One evaluation set: the demo's held-out class ids (the same for both models) or --cond.
    eval_cond = {
        NAR: bundle_conditions(bundle, cfg.frontier_n, cfg.seed, cfg.cond),
        AR: bundle_conditions(ar, cfg.frontier_n, cfg.seed, cfg.cond),
    }
    timing_cond = bundle_conditions(bundle, rows, cfg.seed, cfg.cond)

    def quality(
        b: Bundle, model: DecodeModel, rt: Runtime, cond: Mapping[str, np.ndarray], overrides: Mapping[str, Any]
    ) -> dict[str, float]:
        outputs = []
        for i in range(-(-cfg.frontier_n // rows)):
            chunk = {k: pad_rows(v[i * rows : (i + 1) * rows], rows) for k, v in cond.items()}
            dcfg = decode_config(model.kind, model.decode_defaults, overrides, seed=cfg.seed + i)
            # decode_rows: an AR baseline exported at a smaller batch decodes the rows in several calls
            outputs.append(
                decode_rows(model.kind, rt, model.meta, chunk, dcfg).output[: cfg.frontier_n - i * rows].copy()
            )
        output = np.concatenate(outputs)
        q = dict(score(b, output, cond) or {})
        if hook is not None:
            q |= run_metric_hook(hook, cfg.metric_hook, output, cond)
        return q

    def tell(label: str) -> None:
        if progress:
            progress(label, 0, 0)

    chunks = -(-cfg.frontier_n // rows)
    # ms per masked step of one decode of ``rows`` rows, from the variants measured so far: each
    # K's timing and quality pass is announced with what it should take (a sweep took 7-15 min
    # on a loaded 2-core host with no word of how long).
    per_step = [v["latency"]["median_ms"] / v["steps"] for v in variants if v["runtime"] == runtime and v.get("steps")]
    points: list[FrontierPoint] = []
    notes: list[str] = []
    for precision in dict.fromkeys(v["precision"] for v in variants if v["runtime"] == runtime):
        with open_runtime(bundle, runtime, precision, threads=cfg.threads) as rt:
            for i, k in enumerate(cfg.frontier_steps):
                label = f"frontier {runtime} {precision} K={k} ({i + 1} of {len(cfg.frontier_steps)})"
                overrides = {**cfg.decode, "steps": k}
                done = next(
                    (v for v in variants if (v["runtime"], v["precision"], v["steps"]) == (runtime, precision, k)), None
                )
                if done is not None:
                    latency = done["latency"]["median_ms"]
                else:
                    guess = _estimate(
                        per_step, k, cfg.measure.warmup_iters + cfg.measure.iters, cfg.measure.min_seconds
                    )
                    tell(f"{label}: timing{guess}")
                    dcfg = decode_config(masked.kind, masked.decode_defaults, overrides, seed=cfg.seed)
                    timed = time_decodes(masked, rt, timing_cond, dcfg, cfg.measure, label, progress)
                    latency = timed["latency"]["median_ms"]
                per_step.append(latency / k)
                tell(f"{label}: quality on {cfg.frontier_n} conditions (~{_seconds(latency * chunks / 1e3)})")
                points.append(
                    FrontierPoint(NAR, precision, k, latency, quality(bundle, masked, rt, eval_cond[NAR], overrides))
                )
        a = ar_docs.get((runtime, precision))
        if a is None or not a.get("available"):
            notes.append(f"{precision}: no AR baseline ({(a or {}).get('reason', 'not measured')})")
            continue
        tell(
            f"frontier AR {runtime} {precision}: quality on {cfg.frontier_n} conditions "
            f"(~{_seconds(a['latency']['median_ms'] * chunks / 1e3)})"
        )
        with open_runtime(ar, runtime, precision, threads=cfg.threads) as rt:
            q = quality(ar, baseline, rt, eval_cond[AR], {"length": length})
        points.append(FrontierPoint(AR, precision, length, a["latency"]["median_ms"], q))
    metric = cfg.frontier_metric or DEFAULT_METRIC.get(bundle.ground_truth or "") or next(iter(points[0].quality))
    doc = frontier(points, metric, Tolerance.parse(cfg.frontier_tolerance), HIGHER_IS_BETTER.get(metric, True))
    sources = ([f"ground truth ({bundle.ground_truth})"] if bundle.ground_truth else []) + (
        [f"--metric {cfg.metric_hook}"] if hook else []
    )
    held_out = "held-out " if bundle.ground_truth and not cfg.cond else ""
    return {
        "available": True,
        "runtime": runtime,
        "rows": rows,
        "n": cfg.frontier_n,
        "seed": cfg.seed,
        "quality_from": " + ".join(sources),
        "how": (
            f"latency: median per decode of {rows} rows ({runtime}); quality: {cfg.frontier_n} "
            f"{held_out}conditions, the same "
            f"for every point, decoded with each model's decode defaults (masked: K steps; AR: {length} tokens)"
        ),
        "notes": notes,
        **doc,
    }


def _seconds(s: float) -> str:
    return f"{s:.0f} s" if s < 120 else f"{s / 60:.1f} min"


def _estimate(per_step_ms: Sequence[float], k: int, decodes: int, min_seconds: float) -> str:
    """ " (~N s)" for timing ``decodes`` decodes of K steps (at least ``min_seconds``), from the
    median measured ms per step; "" before anything was measured."""
    if not per_step_ms:
        return ""
    return f" (~{_seconds(max(float(np.median(per_step_ms)) * k * decodes / 1e3, min_seconds))})"
