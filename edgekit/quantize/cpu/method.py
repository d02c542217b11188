"""``--method auto`` (the default) for the cpu and trt profiles: which calibration ranges the search
starts from.

The minmax ranges come first (calibrated already: one pass over the recorded calls, which also
keeps each tensor's range over them). Where the all-INT8 model made with them misses the budget,
the percentile ranges (``AUTO_ALTERNATIVE``) are computed too and their all-INT8 model judged on
the same held-out decodes. Those ranges cost no pass over the calls where the calibration decodes
kept each tensor's largest |x| beside its range (``tails_for``; ``calibrator.percentile_from_tails``:
Sana-600M's histogram pass was 238 s, 18 FP32 decodes' worth), else one pass (each call's
histograms within the kept ranges). The
fallback search goes on from the one with the better worst margin, and its first candidate is the
one judged here (``fallback_until_within_budget(first=...)``). Not tried where the miss is at
FP32's own near-ties (``budget.budget_notes``: ranges cannot decide a coin the model tosses), with
step buckets (each bucket calibrates its own ranges) or with the search off. On matcha-tts's
decoder at 400 frames (random weights, this host): minmax all-INT8 check margin -0.23, percentile
-0.20; the budget then held with 14 layers in float instead of 44.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

from edgekit.quantize.budget import budget_notes, check, worst_margin
from edgekit.quantize.calibrator import tails_suffice, write_calibration_cache
from edgekit.quantize.config import AUTO_ALTERNATIVE, AUTO_METHOD
from edgekit.quantize.cpu.ptq import calibrate
from edgekit.quantize.early_stop import EARLY_MIN_ROWS, compare_on_common_rows
from edgekit.quantize.plan import Eta
from edgekit.quantize.ranges import min_max_data
from edgekit.quantize.scratch import calls_per_decode


def keeps_tails(cfg: Any) -> bool:
    """Whether a run with ``cfg`` (a ``QuantizeConfig``) keeps each tensor's largest |x| as its
    calibration decodes run, for percentile ranges: --method percentile, or auto where it may try
    them (then no pass over the calls computes them)."""
    return cfg.calibrator == "percentile" or (
        cfg.calibrator == "minmax"
        and AUTO_ALTERNATIVE == "percentile"
        and alternative_skipped(cfg, buckets=cfg.step_buckets not in (None, 1)) is None
    )


def tails_for(run: Any) -> tuple[int, float] | None:
    """(calls planned, percentile) where the calibration decodes keep each tensor's largest |x|
    (``keeps_tails``; ``ranges.Tails``), else None. ``run``: the ``QuantizeRun``."""
    cfg = run.cfg
    if not keeps_tails(cfg):
        return None
    b = run.bundle
    decodes = -(-run.n_calib // b.batch)
    return decodes * calls_per_decode(b.kind, b.meta, b.decode_defaults, cfg.decode), cfg.percentile


def calibrate_live(run: Any, cache: Path) -> None:
    """The ``cache`` of ``run.cfg.calibrator``'s ranges from what the calibration decodes kept as
    they ran (``run.live_ranges``): minmax as is; percentile cut from the tensors' largest |x|, or,
    where those cannot decide the cut, one histogram pass over the recorded calls within the kept
    ranges."""
    live, n = run.live_ranges, len(run.traj.feeds)
    run.call_ranges = live
    if run.cfg.calibrator == "minmax":
        run.say(f"calibrate (minmax): the ranges of {n} network calls, kept as the decodes ran")
        write_calibration_cache(min_max_data(live.signed), cache)
        return
    if tails_suffice(live, run.cfg.percentile):
        run.say(f"calibrate ({run.cfg.calibrator}): cut from the largest |x| of {n} calls, kept as the decodes ran")
    else:
        run.say(f"calibrate ({run.cfg.calibrator}) on {n} recorded network calls, in the ranges the decodes kept")
    eta = Eta(f"calibrate ({run.cfg.calibrator}): recorded call", n, run.say)
    calibrate(run.prepared, run.reader, run.cfg, cache, None, each=eta, known=live)


def _tried(method: str, metrics: dict[str, Any], budget: dict[str, float], passed: bool) -> dict[str, Any]:
    stopped = {k: metrics[k] for k in ("rows_judged", "stopped_early") if k in metrics}
    return (
        {"method": method, "passed": passed, "worst_margin": worst_margin(metrics, budget)}
        | {k: metrics.get(k) for k in budget}
        | stopped
    )


def _second_is_better(
    tried: tuple[dict[str, Any], dict[str, Any]],
    metrics: tuple[dict[str, Any], dict[str, Any]],
    budget: dict[str, float],
) -> tuple[bool, str]:
    """(the second ranges are better, what was compared), from the two ``_tried`` records and their
    metrics. Where a held-out decode stopped early (``early_stop``) the two compare by ``snr_db`` on
    the rows both decoded; else by the worst margin of the budget keys (a passing candidate's is
    never under a failing one's)."""
    first, second = tried
    common = compare_on_common_rows(*metrics)
    if common is not None and first["passed"] == second["passed"]:
        a, b, rows = common
        return b > a, f"snr_db {b:.4g} against {a:.4g} on the {rows} held-out rows both decoded (one stopped early)"
    missed = [k for k in budget if first.get(k) is not None and second.get(k) is not None]
    compared = ", ".join(f"{k} {second[k]:.4g} against {first[k]:.4g}" for k in missed)
    if first["passed"] != second["passed"]:
        return second["passed"], compared
    return second["worst_margin"] > first["worst_margin"], compared


def _use_ranges(profile: Any, cfg: Any, cache: Path) -> None:
    """Every later candidate of ``profile`` calibrated with ``cfg.calibrator``'s ranges in ``cache``."""
    profile.run.cfg, profile.writer.cfg, profile.cache = cfg, cfg, cache


def alternative_skipped(cfg: Any, buckets: bool) -> str | None:
    """Why a run with ``cfg`` (a ``QuantizeConfig``) judges no second set of ranges; None where
    --method auto may (if the first misses). ``buckets``: the run decodes step buckets. The one
    rule for both ``choose_method`` and the plan quantize states before it starts."""
    if cfg.method != AUTO_METHOD:
        return f"--method {cfg.method}"
    if buckets:
        return "step buckets calibrate their own ranges"
    if not cfg.fallback:
        return "--no-fallback: no search"
    return None


def choose_method(profile: Any) -> tuple[tuple[Path, dict[str, Any]] | None, dict[str, Any] | None]:
    """((all-INT8 model, its metrics) for the search to start from, the ``method_choice`` record),
    or (None, None) where the method is the user's (or auto cannot try another here).
    ``profile``: the run's ``FallbackProfile`` (its build, measure, writer and cache)."""
    run = profile.run
    cfg = run.cfg
    if cfg.method != AUTO_METHOD:
        return None, None
    record: dict[str, Any] = {"auto": True, "tried": [], "chosen": cfg.calibrator, "why": ""}
    skipped = alternative_skipped(cfg, profile.buckets.current is not None)
    if skipped:
        record["why"] = skipped
        return None, record
    model = profile.build(profile.selected)
    # A hopeless all-INT8 candidate stops its held-out decode early (``early_stop``): both are then
    # compared on the rows both decoded, the second decoding at least as many as the first.
    metrics = profile.measure(model, watch=run.snr_watch())
    passed, rows = check(metrics, run.budget)
    record["tried"].append(_tried(cfg.calibrator, metrics, run.budget, passed))
    if passed:
        record["why"] = f"{cfg.calibrator} met the budget"
        return (model, metrics), record
    if budget_notes(rows, metrics):
        record["why"] = "missed at FP32's own near-ties: other ranges cannot decide them"
        return (model, metrics), record
    run.say(
        f"all-INT8 with {cfg.calibrator} ranges misses the budget: calibrating {AUTO_ALTERNATIVE} ranges "
        "to compare (--method minmax skips this)"
    )
    alt = dataclasses.replace(cfg, method=AUTO_ALTERNATIVE)
    cache = run.tmp / f"calibration-{AUTO_ALTERNATIVE}.json"
    # The minmax pass kept each tensor's range over the calls: the histograms need one pass, not two.
    known = run.call_ranges if run.call_ranges is not None and run.call_ranges.signed is not None else None
    record["alternative_ranges_from"] = "a pass over the recorded calls"
    if known is not None and tails_suffice(known, alt.percentile):
        record["alternative_ranges_from"] = "each tensor's largest |x|, kept as the calibration decodes ran"
        run.say(f"{AUTO_ALTERNATIVE} ranges: cut from {record['alternative_ranges_from']} (no pass over the calls)")
    eta = Eta(f"calibrate ({AUTO_ALTERNATIVE}): recorded call", (1 if known else 2) * len(run.traj.feeds), run.say)
    calibrate(run.prepared, run.reader, alt, cache, None, each=eta, known=known)
    kept = (run.cfg, profile.cache)
    _use_ranges(profile, alt, cache)  # the writer keeps each calibrator's all-INT8 base apart
    alt_model = profile.build(profile.selected)
    alt_metrics = profile.measure(alt_model, watch=run.snr_watch(metrics.get("rows_judged", EARLY_MIN_ROWS)))
    record["tried"].append(_tried(AUTO_ALTERNATIVE, alt_metrics, run.budget, check(alt_metrics, run.budget)[0]))
    first, second = record["tried"]
    better, compared = _second_is_better((first, second), (metrics, alt_metrics), run.budget)
    if better:
        record["chosen"] = AUTO_ALTERNATIVE
        record["why"] = f"better: {compared}"
        run.say(f"{AUTO_ALTERNATIVE} ranges: {record['why']}; the search goes on with them")
        return (alt_model, alt_metrics), record
    _use_ranges(profile, *kept)
    record["why"] = f"no better: {compared}"
    run.say(f"{AUTO_ALTERNATIVE} ranges: {record['why']}; the search goes on with {first['method']}")
    return (model, metrics), record
