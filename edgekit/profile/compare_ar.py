"""NAR vs AR: decode the AR baseline at the same length as the masked model, the speedup, the
crossover length fitted from per-length decode times, and the quality-latency frontier."""

from __future__ import annotations

import math
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

from edgekit.bundle import Bundle
from edgekit.errors import BundleError, EdgekitError, UsageError
from edgekit.profile.config import (
    ProfileConfig,
    ProgressFn,
    Variant,
    bundle_conditions,
    has_artifact,
)
from edgekit.profile.frontier_points import measure_frontier
from edgekit.profile.measure import PowerProbe, profile_variant
from edgekit.profile.ratios import latency_verdict, safe_ratio
from edgekit.profile.sweep import length_sweep
from edgekit.runtimes.registry import backend


def default_ar_bundle(masked_root: Path) -> Path:
    """Where `edgekit demo` puts the AR baseline: a sibling `ar` of the masked bundle."""
    return Path(masked_root).resolve().parent / "ar"


# ---- NAR vs AR ----------------------------------------------------------------------------------
def crossover(points: Sequence[Mapping[str, float]], nar_steps: int) -> dict[str, Any]:
    """The length N where the NAR decode (``nar_steps`` calls over N tokens) becomes faster than
    the AR decode (N calls of one token), from measured decode times at several lengths.

    points: [{"length": N, "nar_decode_ms": ..., "ar_decode_ms": ...}], any order.
    ``measured``: interpolated (in log N) between the two measured lengths that bracket the
    sign change, or a bound when NAR wins (or loses) at every length.
    ``model``: per-step costs fitted linearly in N (c(N) = c0 + c1·N for a NAR step, τ(N) =
    t0 + t1·N for an AR token) and K·c(N) = N·τ(N) solved for N.
    """
    pts = sorted(points, key=lambda p: p["length"])
    measured: dict[str, Any] = {"n": None, "bound": None}
    if pts:
        lengths = [float(p["length"]) for p in pts]
        gain = [p["ar_decode_ms"] - p["nar_decode_ms"] for p in pts]  # > 0: NAR faster
        for (n1, g1), (n2, g2) in zip(zip(lengths, gain), zip(lengths[1:], gain[1:])):
            if g1 <= 0 < g2:
                frac = -g1 / (g2 - g1)
                measured["n"] = math.exp(math.log(n1) + frac * (math.log(n2) - math.log(n1)))
                break
        else:
            if all(g > 0 for g in gain):
                measured["bound"] = f"< {lengths[0]:g} (NAR faster at every measured length)"
            elif all(g <= 0 for g in gain):
                measured["bound"] = f"> {lengths[-1]:g} (AR faster at every measured length)"
            else:
                measured["bound"] = (
                    "not bracketed: NAR does not go from slower to faster as N grows over the measured lengths"
                )
    model: dict[str, Any] = {"n": None, "c_fit_ms": None, "tau_fit_ms": None}
    if len(pts) >= 2:
        n = np.asarray([p["length"] for p in pts], dtype=np.float64)
        c = np.asarray([p["nar_decode_ms"] for p in pts]) / nar_steps
        tau = np.asarray([p["ar_decode_ms"] for p in pts]) / n
        c1, c0 = _line_fit(n, c)
        t1, t0 = _line_fit(n, tau)
        model["c_fit_ms"], model["tau_fit_ms"] = [float(c0), float(c1)], [float(t0), float(t1)]
        # gain(N) = N·τ(N) − K·c(N) = t1·N² + (t0 − K·c1)·N − K·c0: the crossover is the smallest
        # positive root where the gain turns positive (NAR starts to win), not one where it ends.
        gain_poly = np.poly1d([t1, t0 - nar_steps * c1, -nar_steps * c0])
        rising = sorted(
            float(r.real)
            for r in np.atleast_1d(gain_poly.roots)
            if abs(r.imag) < 1e-9 and r.real > 0 and gain_poly.deriv()(r.real) > 0
        )
        model["n"] = rising[0] if rising else None
        if model["n"] is None:
            model["reason"] = "the fitted costs never make NAR overtake AR as N grows"
        elif not lengths[0] <= model["n"] <= lengths[-1]:
            model["extrapolated"] = True  # outside the measured lengths: a linear cost model's guess
    return {"measured": measured, "model": model}


def _line_fit(n: np.ndarray, y: np.ndarray) -> tuple[float, float]:
    """(slope, intercept) of the least-squares line through (n, y), with a slope that changes the
    fitted values by less than 1e-9 of their size over the measured lengths set to exactly 0.

    Why: a cost that does not depend on N (an AR token's τ at every length) fits a slope of
    ~1e-18 in floating point, with a sign that depends on the BLAS kernel (it differed between
    AVX2 and AVX-512 hosts); as the leading coefficient of the gain quadratic that rounding noise
    put a "crossover" at N ~ 1e19 on one machine and none on another."""
    slope, intercept = np.polyfit(n, y, 1)
    scale = max(float(np.max(np.abs(y))), abs(float(intercept)), np.finfo(float).tiny)
    if abs(slope) * float(np.max(n) - np.min(n)) < 1e-9 * scale:
        slope = 0.0
    return float(slope), float(intercept)


def seed_crossover(c_ms: float, tau_ms: float) -> dict[str, Any]:
    """The seed formula N > 1 + c/τ (c: NAR per-step cost, τ: AR per-token cost)."""
    return {
        "formula": "N > 1 + c/tau",
        "c_ms": c_ms,
        "tau_ms": tau_ms,
        "n": 1.0 + c_ms / tau_ms if tau_ms > 0 else None,
    }


def resolve_ar_bundle(bundle: Bundle, cfg: ProfileConfig) -> Bundle:
    if bundle.kind != "masked":
        raise UsageError(
            (
                f"--compare-ar compares a masked (NAR) bundle with its AR baseline; {bundle.root} holds the "
                f"{bundle.kind} model {bundle.name}"
            ),
            hint="profile the masked bundle (e.g. edgekit-demo/masked) with --compare-ar",
        )
    path = Path(cfg.ar_bundle) if cfg.ar_bundle is not None else default_ar_bundle(bundle.root)
    try:
        ar = Bundle.load(path)
    except BundleError as exc:
        raise BundleError(
            f"--compare-ar: no AR bundle at {path} ({exc.message})",
            hint="pass --ar-bundle PATH, or export one with `edgekit export ar-demo -o " + str(path) + "`",
        ) from None
    if ar.kind != "ar":
        raise UsageError(f"--ar-bundle {path} holds the {ar.kind} model {ar.name}; valid: a bundle of kind ar")
    length = int(bundle.meta["seq_len"])
    if int(ar.meta["max_len"]) < length:
        raise UsageError(
            f"--ar-bundle {path} decodes at most {ar.meta['max_len']} tokens; the masked model makes {length}",
            hint=f"export the AR baseline with max_len >= {length}",
        )
    return ar


def compare_ar(
    bundle: Bundle,
    variants: Sequence[Mapping[str, Any]],
    cfg: ProfileConfig,
    power: PowerProbe,
    progress: ProgressFn | None,
) -> dict[str, Any]:
    ar = resolve_ar_bundle(bundle, cfg)
    length = int(bundle.meta["seq_len"])
    rows = variants[0]["decode"]["rows"]
    cond = bundle_conditions(ar, rows, cfg.seed, cfg.cond)
    ar_docs: dict[tuple[str, str], dict[str, Any]] = {}
    for v in variants:
        key = (v["runtime"], v["precision"])
        if key in ar_docs or not v.get("available", True):
            continue
        label = f"AR {v['runtime']} {v['precision']}"
        artifact = backend(v["runtime"]).artifacts.get(v["precision"])  # None: the module or a built engine
        if artifact is not None and not has_artifact(ar, artifact):
            ar_docs[key] = {
                "id": label,
                "available": False,
                "runtime": v["runtime"],
                "precision": v["precision"],
                "reason": f"AR bundle {ar.root} has no {v['precision']} artifact (run `edgekit quantize {ar.root}`)",
            }
            continue
        try:
            ar_docs[key] = profile_variant(
                ar, Variant(*key, None), label, cond, cfg, power, progress, {"length": length}
            )
        except EdgekitError as exc:  # one variant that cannot run is a row saying why; the rest is reported
            ar_docs[key] = {
                "id": label,
                "available": False,
                "runtime": v["runtime"],
                "precision": v["precision"],
                "reason": f"AR bundle {ar.root}: {exc}",
            }
    note_batch = []
    if ar.batch != bundle.batch:
        calls = -(-rows // ar.batch)
        note_batch.append(
            f"the AR graph batch ({ar.batch}) differs from the masked one ({bundle.batch}); both decode {rows} rows"
            + (f" (AR: {calls} calls of {ar.batch} rows per decode)" if calls > 1 else "")
        )
    speedups = []
    variants = [v for v in variants if v.get("available", True)]
    for v in variants:
        a = ar_docs[(v["runtime"], v["precision"])]
        if not a["available"]:
            speedups.append({"nar": v["id"], "ar": a["id"], "speedup": None, "reason": a["reason"]})
            continue
        speedups.append(
            {
                "nar": v["id"],
                "ar": a["id"],
                "nar_median_ms": v["latency"]["median_ms"],
                "ar_median_ms": a["latency"]["median_ms"],
                "speedup": safe_ratio(a["latency"]["median_ms"], v["latency"]["median_ms"]),
                "throughput_ratio": safe_ratio(v["throughput"]["items_per_s"], a["throughput"]["items_per_s"]),
            }
            | latency_verdict(v, a)  # NAR's decode against AR's: faster, slower or within noise
        )
    result: dict[str, Any] = {
        "ar_bundle": str(ar.root),
        "length": length,
        "variants": list(ar_docs.values()),
        "speedups": speedups,
        "notes": note_batch,
    }
    if cfg.frontier_steps:
        result["frontier"] = measure_frontier(bundle, ar, variants, ar_docs, rows, cfg, progress)
    # Per-step costs and the crossover per runtime (engine), each on its first variant with an
    # available AR twin (in the sweep's precision when there is one): engines differ in where
    # the NAR decode overtakes the AR one.
    # With --sweep-precision fp32,int8: one crossover per (engine, precision), side by side.
    crossovers = []
    # One export cache for every sweep of this run: the int8 sweep quantizes the fp32 sweep's exports.
    with tempfile.TemporaryDirectory(prefix="edgekit-sweep-") as tmp:
        shared = cfg if cfg.sweep_cache is not None else replace(cfg, sweep_cache=Path(tmp))
        for runtime in dict.fromkeys(v["runtime"] for v in variants):
            mine = [v for v in variants if v["runtime"] == runtime and ar_docs[(runtime, v["precision"])]["available"]]
            if not mine:
                continue
            for precision in cfg.sweep_precisions:
                # The bundle's own point in the sweep's precision where this run profiled it (else the
                # first variant, and the sweep's notes say the points mix precisions).
                base = next((v for v in mine if v["precision"] == precision), mine[0])
                one = replace(shared, sweep_precision=precision)
                at = _frontier_k(result.get("frontier"), runtime, base["precision"])
                crossovers.append(
                    _crossover_for(
                        bundle, ar, base, ar_docs[(runtime, base["precision"])], length, rows, one, progress, at
                    )
                )
    if not crossovers:
        result["crossover"] = {"available": False, "reason": "no AR variant could be measured"}
        return result
    result["crossover"] = crossovers[0]
    result["crossovers"] = crossovers
    return result


def _frontier_k(doc: Mapping[str, Any] | None, runtime: str, precision: str) -> Mapping[str, Any] | None:
    """The frontier's smallest K within tolerance of AR's quality in ``precision`` on ``runtime``
    ({"steps", "latency_ms", ...}), or None when the frontier was not measured there or no K
    reached AR's quality: the crossover then uses the bundle's decode default."""
    if not doc or not doc.get("available") or doc.get("runtime") != runtime:
        return None
    hit = next((e for e in doc.get("smallest_k", []) if e.get("precision") == precision), None)
    if hit is None or not hit.get("steps") or not hit.get("latency_ms"):
        return None
    return {**hit, "metric": doc.get("metric"), "tolerance": (doc.get("tolerance") or {}).get("text")}


def _crossover_for(
    bundle: Bundle,
    ar: Bundle,
    base: Mapping[str, Any],
    a: Mapping[str, Any],
    length: int,
    rows: int,
    cfg: ProfileConfig,
    progress: ProgressFn | None,
    at: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """The crossover of one NAR variant ``base`` and its AR twin ``a``: seed formula, the length
    sweep on ``base``'s runtime, the measured and fitted crossover lengths.

    ``at``: the frontier's smallest K within tolerance of AR's quality (``_frontier_k``). NAR's
    decode time grows with K, so the length where NAR pays is the one at the K a user would
    deploy: that K is swept, and its frontier latency is the bundle-length point. None: the
    variant's own K (the decode default or --steps)."""
    k = int(at["steps"]) if at else base["decode"]["steps"]
    nar_ms = float(at["latency_ms"]) if at else base["latency"]["median_ms"]
    c_ms = nar_ms / k
    tau_ms = a["latency"]["median_ms"] / length
    own = {"length": length, "source": "bundle", "nar_decode_ms": nar_ms, "ar_decode_ms": a["latency"]["median_ms"]}
    lengths = [n for n in cfg.sweep_lengths if n != length]
    sweep = length_sweep(bundle, ar, base["runtime"], k, rows, lengths, cfg, progress)
    if sweep.get("available") and base["precision"] != cfg.sweep_precision:
        sweep["notes"].append(
            f"swept in {cfg.sweep_precision} (--sweep-precision); the L={length} point is {base['precision']}"
        )
    points = sorted([own] + sweep.get("points", []), key=lambda p: p["length"])
    for p in points:
        p["c_ms"] = p["nar_decode_ms"] / k
        p["tau_ms"] = p["ar_decode_ms"] / p["length"]
        p["speedup"] = safe_ratio(p["ar_decode_ms"], p["nar_decode_ms"])
    cross = crossover(points, k) if len(points) > 1 else {"measured": {"n": None, "bound": None}, "model": {"n": None}}
    return {
        "available": True,
        "runtime": base["runtime"],
        "precision": base["precision"],
        "sweep_precision": cfg.sweep_precision,
        "nar_steps": k,
        "nar_steps_from": (
            f"the frontier's smallest K with {at['metric']} within {at['tolerance']} of AR's "
            f"({at['quality']:.3g}, bar {at['threshold']:.3g})"
            if at
            else "the variant's decode steps"
        ),
        "seed_formula": seed_crossover(c_ms, tau_ms),
        "k_steps_estimate": {
            "formula": "N > K*c/tau (all K steps of a decode, c and tau at the bundle length)",
            "n": k * c_ms / tau_ms if tau_ms > 0 else None,
        },
        **cross,
        "points": points,
        "sweep": {key: val for key, val in sweep.items() if key != "points"},
    }
