"""The profile stage: decode a bundle's model on several variants (runtime x precision x steps)
side by side in one run, with latency, per-step, memory, power and system-state probes around
each, ratios between the variants, and optionally the autoregressive baseline and the NAR-vs-AR
crossover length.

Every figure comes from ``edgekit.probes``; where a probe cannot measure (no power sensor, no
torch for the length sweep, no int8 artifact for the AR baseline) the document says
``unavailable`` with the reason instead of a number.
"""

from __future__ import annotations

import dataclasses
import hashlib
import math
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator, Mapping, Sequence

import numpy as np

from edgekit.bundle import Bundle, now_iso
from edgekit.decode.dispatch import decode, decode_config
from edgekit.errors import BundleError, EdgekitError, UsageError
from edgekit.probes.latency import MeasureConfig, TimedRuntime, measure
from edgekit.probes.memory import RssTracker, file_sizes
from edgekit.probes.power import CHOICES as POWER_CHOICES
from edgekit.probes.power import PowerSampler, Unavailable, detect, energy_per_decode_mj, measure_idle
from edgekit.probes.system import compare_states, system_state
from edgekit.runtimes import PRECISIONS, RUNTIMES, open_runtime
from edgekit.runtimes.base import Runtime

SCHEMA = "edgekit.profile/1"

# progress(label, done, total): total 0 = a stage of unknown length just started.
ProgressFn = Callable[[str, int, int], None]

# Ratio orientation: the deployment candidate over its reference (int8 over fp32, TensorRT over
# ORT over torch eager), so a latency ratio below 1 means the candidate is faster.
_CANDIDATE_ORDER = {"runtime": ("trt", "ort", "torch"), "precision": ("int8", "fp16", "fp32")}
# Built-in architectures the crossover sweep can rebuild at other lengths (random init: latency
# does not depend on the weights).
SWEEPABLE = {"masked-demo": "masked", "ar-demo": "ar"}


@dataclass(frozen=True)
class ProfileConfig:
    # Runtimes to measure side by side; ort is the device default, torch the eager baseline.
    runtimes: tuple[str, ...] = ("ort",)
    # () = fp32 plus int8 when the bundle has an int8 artifact; int8 named explicitly without one
    # is an error that says to run `edgekit quantize`.
    precisions: tuple[str, ...] = ()
    # Decode steps per variant (masked K, flow solver steps); () = the bundle's decode default.
    steps: tuple[int, ...] = ()
    # Decode rows; None = the graph's static batch (as `edgekit run`).
    batch: int | None = None
    # --cond NAME=VALUE for models without demo conditions (as `edgekit run`); the AR baseline
    # gets the names it has.
    cond: Mapping[str, str] = field(default_factory=dict)
    # Warm-up and measurement rule per variant (count and minimum time, see probes.latency).
    measure: MeasureConfig = field(default_factory=MeasureConfig)
    # off | auto | a probe name (probes.power.CHOICES).
    power: str = "auto"
    # sysfs root for the power probes: "/" on a device, a fixture tree in tests.
    power_root: str = "/"
    # Idle baseline measured once before the variants, reported beside energy per decode.
    idle_seconds: float = 1.0
    # Also decode the AR baseline on the same runtimes/precisions for the same length.
    compare_ar: bool = False
    # The AR bundle; None = the sibling `ar` next to the masked bundle (edgekit demo's layout).
    ar_bundle: Path | None = None
    # Decode option overrides for every variant of the bundle (as `edgekit run` takes them, e.g.
    # {"solver": "rk4"}; `--steps` still sets the step count per variant). The AR baseline keeps its own.
    decode: Mapping[str, Any] = field(default_factory=dict)
    # Extra lengths for the crossover sweep (architecture-only models, needs torch); the bundle's
    # own length is always a point. () = no sweep: the crossover comes from the seed formula only.
    sweep_lengths: tuple[int, ...] = (16, 32, 128)
    # Lighter rule per sweep point: the sweep ranks lengths, it does not quote tail latencies.
    sweep_measure: MeasureConfig = field(
        default_factory=lambda: MeasureConfig(warmup_iters=1, warmup_seconds=0.05, iters=5, min_seconds=0.2)
    )
    # Where the sweep keeps its exported ONNX files between runs; None = a temp dir removed after.
    sweep_cache: Path | None = None
    # fp32 | int8: precision of the architecture-only sweep models on ort. int8 quantizes each with
    # the cpu profile (no budget: random weights), calibrated on one recorded FP32 decode of it.
    sweep_precision: str = "fp32"
    # Same seed on every variant: every runtime decodes the same noise and conditions.
    seed: int = 0
    # Runtime intra-op threads; 0 = the runtime's default.
    threads: int = 0
    # Keep per-decode samples and power samples in the document (the HTML plots need them).
    keep_samples: bool = True

    def __post_init__(self) -> None:
        for name, values, valid in (("--runtime", self.runtimes, RUNTIMES), ("--precision", self.precisions, PRECISIONS)):
            object.__setattr__(self, "runtimes" if name == "--runtime" else "precisions", tuple(values))
            bad = [v for v in values if v not in valid]
            if bad:
                raise UsageError(f"{name} {bad[0]!r} is unknown; valid: {', '.join(valid)}")
        if not self.runtimes:
            raise UsageError(f"--runtime is empty; valid: {', '.join(RUNTIMES)}")
        object.__setattr__(self, "steps", tuple(self.steps))
        object.__setattr__(self, "sweep_lengths", tuple(self.sweep_lengths))
        if any(not isinstance(s, int) or s < 1 for s in self.steps):
            raise UsageError(f"--steps {list(self.steps)} is invalid; valid: integers >= 1")
        if self.batch is not None and self.batch < 1:
            raise UsageError(f"--batch {self.batch} is invalid; valid: an integer >= 1")
        if self.power not in POWER_CHOICES:
            raise UsageError(f"--power {self.power!r} is unknown; valid: {', '.join(POWER_CHOICES)}")
        if self.idle_seconds < 0:
            raise UsageError(f"idle_seconds={self.idle_seconds} is invalid; valid: >= 0")
        if any(not isinstance(n, int) or n < 2 for n in self.sweep_lengths):
            raise UsageError(f"--sweep {list(self.sweep_lengths)} is invalid; valid: lengths >= 2")
        if self.sweep_precision not in ("fp32", "int8"):
            raise UsageError(f"--sweep-precision {self.sweep_precision!r} is unknown; valid: fp32, int8")

    def to_json(self) -> dict[str, Any]:
        doc = dataclasses.asdict(self)
        doc["cond"] = dict(self.cond)
        doc["decode"] = dict(self.decode)
        for key in ("ar_bundle", "sweep_cache"):
            doc[key] = None if doc[key] is None else str(doc[key])
        return doc


@dataclass(frozen=True)
class Variant:
    runtime: str
    precision: str
    steps: int | None  # None = the bundle's default

    def label(self, show_steps: bool) -> str:
        text = f"{self.runtime} {self.precision}"
        return f"{text} K={self.steps}" if show_steps and self.steps is not None else text


@dataclass(frozen=True)
class _Model:
    """What a decode needs from a bundle (or from an architecture-only spec in the sweep)."""

    kind: str
    meta: Mapping[str, Any]
    decode_defaults: Mapping[str, Any]

    @classmethod
    def of(cls, bundle: Bundle) -> "_Model":
        return cls(bundle.kind, bundle.meta, bundle.manifest.get("decode_defaults") or {})


# ---- planning -----------------------------------------------------------------------------------
def has_artifact(bundle: Bundle, name: str) -> bool:
    return name in (bundle.manifest.get("artifacts") or {})


def plan_variants(bundle: Bundle, cfg: ProfileConfig) -> list[Variant]:
    """The variants to measure, checked before anything runs (a missing int8 artifact or torch
    fails here, not after minutes of measuring)."""
    if cfg.precisions:
        precisions = cfg.precisions
    else:
        precisions = ("fp32", "int8") if has_artifact(bundle, "int8") else ("fp32",)
    if "int8" in precisions and not has_artifact(bundle, "int8"):
        have = ", ".join(p for p in ("fp32", "int8") if has_artifact(bundle, p)) or "none"
        raise BundleError(
            f"--precision int8: bundle {bundle.root} has no int8 artifact (precisions it has: {have})",
            hint=f"run `edgekit quantize {bundle.root}` first, or profile --precision fp32",
        )
    if "torch" in cfg.runtimes:
        from edgekit._deps import require

        require("torch")
        if cfg.precisions and set(cfg.runtimes) == {"torch"} and any(p != "fp32" for p in precisions):
            raise UsageError(
                f"--runtime torch runs fp32 only, not {[p for p in precisions if p != 'fp32']}",
                hint="add --runtime ort to profile int8, or use --precision fp32",
            )
    if "trt" in cfg.runtimes:
        engines = (bundle.manifest.get("engines") or {}).values()
        for p in precisions:
            if not any(e.get("runtime") == "trt" and e.get("precision") == p for e in engines):
                raise BundleError(
                    f"--runtime trt: bundle {bundle.root} has no TensorRT {p} engine",
                    hint=f"build one on the device with `edgekit build {bundle.root} --target nvidia-gpu --precision {p}`",
                )
    steps: tuple[int | None, ...] = cfg.steps or (None,)
    if cfg.steps and bundle.kind == "ar":
        raise UsageError("--steps does not apply to an ar bundle (one step per token)", hint="drop --steps")
    # torch runs fp32 only: int8 pairs with the runtimes that can run it.
    return [
        Variant(r, p, s)
        for r in cfg.runtimes
        for p in precisions
        if not (r == "torch" and p != "fp32")
        for s in steps
    ]


def default_ar_bundle(masked_root: Path) -> Path:
    """Where `edgekit demo` puts the AR baseline: a sibling `ar` of the masked bundle."""
    return Path(masked_root).resolve().parent / "ar"


# ---- one variant --------------------------------------------------------------------------------
@dataclass
class _Power:
    sampler: PowerSampler | None
    unavailable: Unavailable | None
    idle: Any = None  # PowerTrace of the idle baseline


def _measure_decodes(
    model: _Model,
    runtime: Runtime,
    cond: Mapping[str, np.ndarray],
    decode_cfg: Any,
    mcfg: MeasureConfig,
    *,
    power: _Power | None,
    rss: RssTracker | None,
    progress: Callable[[int, int], None] | None,
    keep_samples: bool,
) -> dict[str, Any]:
    """Warm up, then measure decodes of ``runtime`` with the breakdown, power and RSS probes
    around the measured phase only. Returns the variant's figures (JSON-ready)."""
    timed = TimedRuntime(runtime)
    last: dict[str, Any] = {}

    def one_decode() -> None:
        last["decoded"] = decode(model.kind, timed, model.meta, cond, decode_cfg)

    fn = timed.timed_decodes(one_decode)
    # Warm-up as its own measure() call so the power window and RSS growth cover steady state
    # only; its one measured call is discarded with the warm-up.
    warm = measure(fn, MeasureConfig(mcfg.warmup_iters, mcfg.warmup_seconds, iters=1, min_seconds=0.0))
    timed.reset()
    if rss is not None:
        rss.after_warmup()
    steady = MeasureConfig(0, 0.0, mcfg.iters, mcfg.min_seconds, mcfg.max_iters)
    sampler = power.sampler if power is not None else None
    trace = None
    if sampler is not None:
        sampler.start()
    try:
        m = measure(fn, steady, progress)
    finally:
        if sampler is not None:
            trace = sampler.stop()
    decoded = last["decoded"]
    breakdown = timed.breakdown()
    n = m.stats.n
    rows = int(decoded.output.shape[0])
    items = rows * int(decoded.output.shape[1])  # tokens [B, L] or frames [B, T, C]
    total_s = sum(m.samples_ns) / 1e9
    decodes_per_s = n / total_s if total_s > 0 else float("nan")
    host_ms = [d.host_ns / 1e6 for d in timed.decodes]
    doc: dict[str, Any] = {
        "device": getattr(runtime, "device", "unknown"),
        "runtime_warnings": list(getattr(runtime, "warnings", [])),
        "decode": {"steps": decoded.steps, "nfe": decoded.nfe, "runtime_calls": decoded.runtime_calls, "rows": rows},
        "latency": m.stats.to_json(),
        "measurement": {
            "warmup_iters": warm.warmup_iters + 1,  # + the discarded call of the warm-up measure()
            "warmup_s": (warm.warmup_ns + warm.wall_ns) / 1e9,
            "wall_s": m.wall_ns / 1e9,
            "capped_at_max_iters": m.capped,
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
    doc["energy"], doc["power_trace"] = _energy(power, trace, n, keep_samples)
    return doc


def _per_call_medians(decodes: Sequence[Any]) -> list[float]:
    """Median duration (ms) of the i-th Runtime.run call over decodes, for the calls every
    decode made (a decode that stops early has fewer)."""
    if not decodes:
        return []
    calls = min(d.calls for d in decodes)
    steps = np.asarray([d.step_ns[:calls] for d in decodes], dtype=np.float64) / 1e6  # (decodes, calls)
    return [float(v) for v in np.median(steps, axis=0)] if calls else []


def _energy(power: _Power | None, trace: Any, n: int, keep_samples: bool) -> tuple[dict[str, Any], Any]:
    if power is None or trace is None:
        reason = power.unavailable.reason if power is not None and power.unavailable else "power not measured"
        probe = power.unavailable.probe if power is not None and power.unavailable else "off"
        return {"available": False, "probe": probe, "reason": reason}, None
    per = energy_per_decode_mj(trace, n, power.idle)
    doc = {"available": per.gross_mj is not None, "probe": trace.probe} | per.to_json()
    if per.gross_mj is None:
        doc["reason"] = per.reason or "the trace has no energy"
    return doc, trace.to_json(samples=keep_samples)


def _model_files(bundle: Bundle, variant: Variant) -> list[Path]:
    if variant.runtime == "ort":
        path = bundle.path_of(variant.precision)
        side = path.with_name(path.name + ".data")  # external weights, when the export split them
        return [path] + ([side] if side.is_file() else [])
    if variant.runtime == "trt":
        engines = (bundle.manifest.get("engines") or {}).values()
        return [bundle.root / e["path"] for e in engines if e.get("runtime") == "trt" and e.get("precision") == variant.precision]
    return []  # torch runs the in-memory module rebuilt from the model source


def _profile_variant(
    bundle: Bundle,
    variant: Variant,
    label: str,
    cond: Mapping[str, np.ndarray],
    cfg: ProfileConfig,
    power: _Power,
    progress: ProgressFn | None,
    overrides: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    model = _Model.of(bundle)
    opts = dict(overrides or {})
    if variant.steps is not None:
        opts["steps"] = variant.steps
    decode_cfg = decode_config(model.kind, model.decode_defaults, opts, seed=cfg.seed)
    if progress:
        progress(label, 0, 0)
    before = system_state()
    rss = RssTracker()
    rss.start()
    with open_runtime(bundle, variant.runtime, variant.precision, threads=cfg.threads) as rt:
        rss.mark("loaded")
        tick = (lambda done, total: progress(label, done, total)) if progress else None
        doc = _measure_decodes(
            model, rt, cond, decode_cfg, cfg.measure, power=power, rss=rss, progress=tick, keep_samples=cfg.keep_samples
        )
        report = rss.stop()
    after = system_state()
    files = file_sizes(_model_files(bundle, variant))
    memory = report.to_json()
    memory.pop("points", None)
    memory["model_files_bytes"] = files
    memory["model_bytes"] = sum(files.values()) if files else None
    return {
        "id": label,
        "available": True,
        "runtime": variant.runtime,
        "precision": variant.precision,
        "steps": doc["decode"]["steps"],
        "decode_config": {k: v for k, v in dataclasses.asdict(decode_cfg).items()},
        **doc,
        "memory": memory,
        "system": {"before": before, "after": after, "warnings": compare_states(before, after)},
    }


# ---- ratios -------------------------------------------------------------------------------------
def _ratio(a: float | None, b: float | None) -> float | None:
    if a is None or b is None or not (isinstance(a, (int, float)) and isinstance(b, (int, float))) or b == 0:
        return None
    return float(a) / float(b)


def ratio(num: Mapping[str, Any], den: Mapping[str, Any], name: str) -> dict[str, Any]:
    """Figures of variant ``num`` over variant ``den`` (both measured in this run)."""
    med = _ratio(num["latency"]["median_ms"], den["latency"]["median_ms"])
    return {
        "name": name,
        "numerator": num["id"],
        "denominator": den["id"],
        "median_latency": med,
        "p99_latency": _ratio(num["latency"]["p99_ms"], den["latency"]["p99_ms"]),
        "speedup": (1.0 / med) if med else None,
        "throughput": _ratio(num["throughput"]["items_per_s"], den["throughput"]["items_per_s"]),
        "energy_per_decode": _ratio(num["energy"].get("gross_mj"), den["energy"].get("gross_mj")),
        "host_overhead_share": _ratio(
            num["breakdown"]["host_overhead_share"], den["breakdown"]["host_overhead_share"]
        ),
        "peak_rss": _ratio(num["memory"].get("peak_rss_bytes"), den["memory"].get("peak_rss_bytes")),
        "model_bytes": _ratio(num["memory"].get("model_bytes"), den["memory"].get("model_bytes")),
    }


def variant_ratios(variants: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Ratios between every two variants that differ in exactly one of runtime, precision and
    steps, oriented candidate / reference (int8/fp32, trt/ort/torch, fewer/more steps)."""
    out = []
    for i, a in enumerate(variants):
        for b in variants[i + 1 :]:
            diff = [k for k in ("runtime", "precision", "steps") if a[k] != b[k]]
            if len(diff) != 1:
                continue
            axis = diff[0]
            if axis == "steps":
                num, den = (a, b) if a["steps"] < b["steps"] else (b, a)
                name = f"K={num['steps']}/K={den['steps']} ({a['runtime']} {a['precision']})"
            else:
                order = _CANDIDATE_ORDER[axis]
                num, den = (a, b) if order.index(a[axis]) < order.index(b[axis]) else (b, a)
                same = a["precision"] if axis == "runtime" else a["runtime"]
                name = f"{num[axis]}/{den[axis]} ({same}" + (f", K={a['steps']})" if _multi_steps(variants) else ")")
            out.append(ratio(num, den, name))
    return out


def _multi_steps(variants: Sequence[Mapping[str, Any]]) -> bool:
    return len({v["steps"] for v in variants}) > 1


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
                measured["bound"] = "not bracketed: NAR does not go from slower to faster as N grows over the measured lengths"
    model: dict[str, Any] = {"n": None, "c_fit_ms": None, "tau_fit_ms": None}
    if len(pts) >= 2:
        n = np.asarray([p["length"] for p in pts], dtype=np.float64)
        c = np.asarray([p["nar_decode_ms"] for p in pts]) / nar_steps
        tau = np.asarray([p["ar_decode_ms"] for p in pts]) / n
        c1, c0 = np.polyfit(n, c, 1)
        t1, t0 = np.polyfit(n, tau, 1)
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


def seed_crossover(c_ms: float, tau_ms: float) -> dict[str, Any]:
    """The seed formula N > 1 + c/τ (c: NAR per-step cost, τ: AR per-token cost)."""
    return {"formula": "N > 1 + c/tau", "c_ms": c_ms, "tau_ms": tau_ms, "n": 1.0 + c_ms / tau_ms if tau_ms > 0 else None}


def _resolve_ar_bundle(bundle: Bundle, cfg: ProfileConfig) -> Bundle:
    if bundle.kind != "masked":
        raise UsageError(
            f"--compare-ar compares a masked (NAR) bundle with its AR baseline; {bundle.root} holds a {bundle.kind} model",
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
        raise UsageError(f"--ar-bundle {path} holds a {ar.kind} model; valid: a bundle of kind ar")
    length = int(bundle.meta["seq_len"])
    if int(ar.meta["max_len"]) < length:
        raise UsageError(
            f"--ar-bundle {path} decodes at most {ar.meta['max_len']} tokens; the masked model makes {length}",
            hint=f"export the AR baseline with max_len >= {length}",
        )
    return ar


def _compare_ar(
    bundle: Bundle,
    variants: Sequence[Mapping[str, Any]],
    cfg: ProfileConfig,
    power: _Power,
    progress: ProgressFn | None,
) -> dict[str, Any]:
    ar = _resolve_ar_bundle(bundle, cfg)
    length = int(bundle.meta["seq_len"])
    rows = variants[0]["decode"]["rows"]
    cond = _conditions(ar, rows, cfg.seed, cfg.cond)
    ar_docs: dict[tuple[str, str], dict[str, Any]] = {}
    for v in variants:
        key = (v["runtime"], v["precision"])
        if key in ar_docs:
            continue
        label = f"AR {v['runtime']} {v['precision']}"
        if v["runtime"] == "ort" and not has_artifact(ar, v["precision"]):
            ar_docs[key] = {
                "id": label, "available": False, "runtime": v["runtime"], "precision": v["precision"],
                "reason": f"AR bundle {ar.root} has no {v['precision']} artifact (run `edgekit quantize {ar.root}`)",
            }
            continue
        ar_docs[key] = _profile_variant(ar, Variant(*key, None), label, cond, cfg, power, progress, {"length": length})
    note_batch = []
    if graph_batch(ar) != graph_batch(bundle):
        note_batch.append(
            f"the AR graph batch ({graph_batch(ar)}) differs from the masked one ({graph_batch(bundle)}); both decode {rows} rows"
        )
    speedups = []
    for v in variants:
        a = ar_docs[(v["runtime"], v["precision"])]
        if not a["available"]:
            speedups.append({"nar": v["id"], "ar": a["id"], "speedup": None, "reason": a["reason"]})
            continue
        speedups.append({
            "nar": v["id"],
            "ar": a["id"],
            "nar_median_ms": v["latency"]["median_ms"],
            "ar_median_ms": a["latency"]["median_ms"],
            "speedup": _ratio(a["latency"]["median_ms"], v["latency"]["median_ms"]),
            "throughput_ratio": _ratio(v["throughput"]["items_per_s"], a["throughput"]["items_per_s"]),
        })
    # Per-step costs and the crossover on the first variant with an available AR twin.
    base = next((v for v in variants if ar_docs[(v["runtime"], v["precision"])]["available"]), None)
    result: dict[str, Any] = {
        "ar_bundle": str(ar.root),
        "length": length,
        "variants": list(ar_docs.values()),
        "speedups": speedups,
        "notes": note_batch,
    }
    if base is None:
        result["crossover"] = {"available": False, "reason": "no AR variant could be measured"}
        return result
    a = ar_docs[(base["runtime"], base["precision"])]
    k = base["decode"]["steps"]
    c_ms = base["latency"]["median_ms"] / k
    tau_ms = a["latency"]["median_ms"] / length
    own = {"length": length, "source": "bundle", "nar_decode_ms": base["latency"]["median_ms"], "ar_decode_ms": a["latency"]["median_ms"]}
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
        p["speedup"] = _ratio(p["ar_decode_ms"], p["nar_decode_ms"])
    cross = crossover(points, k) if len(points) > 1 else {"measured": {"n": None, "bound": None}, "model": {"n": None}}
    result["crossover"] = {
        "available": True,
        "runtime": base["runtime"],
        "precision": base["precision"],
        "nar_steps": k,
        "seed_formula": seed_crossover(c_ms, tau_ms),
        "k_steps_estimate": {
            "formula": "N > K*c/tau (all K steps of a decode, c and tau at the bundle length)",
            "n": k * c_ms / tau_ms if tau_ms > 0 else None,
        },
        **cross,
        "points": points,
        "sweep": {key: val for key, val in sweep.items() if key != "points"},
    }
    return result


def graph_batch(bundle: Bundle) -> int:
    return next(iter(bundle.inputs.values())).shape[0]


def _conditions(bundle: Bundle, rows: int, seed: int, raw: Mapping[str, str] | None = None) -> dict[str, np.ndarray]:
    from edgekit.pipeline import conditions

    names = bundle.meta.get("conditioning") or {}
    return conditions(bundle, {k: v for k, v in (raw or {}).items() if k in names}, rows, seed)


def _spec_conditions(spec: Any, known: Mapping[str, np.ndarray], rows: int) -> dict[str, np.ndarray]:
    """Conditions for an architecture-only spec: the bundle's arrays where name and shape match,
    else the input's lowest valid value (latency does not depend on which class is asked for)."""
    out = {}
    for name in spec.meta.get("conditioning") or {}:
        s = spec.inputs[name]
        shape = (rows, *s.shape[1:])
        arr = known.get(name)
        out[name] = arr if arr is not None and arr.shape == shape else np.full(shape, s.low or 0, dtype=s.dtype)
    return out


# ---- the length sweep ---------------------------------------------------------------------------
def length_variant_spec(source: str, length: int, batch: int) -> Any:
    """An architecture-only (random-init) ``ModelSpec`` of built-in ``source`` at sequence length
    ``length`` (masked: seq_len; ar: max_len) with graph batch ``batch``. Latency does not depend
    on the weights, so these time the architecture at lengths the trained model was not made for."""
    from edgekit.models import load_spec
    from edgekit.spec import TensorSpec

    if source not in SWEEPABLE:
        raise UsageError(f"cannot rebuild model {source!r} at other lengths; valid: {', '.join(SWEEPABLE)}")
    spec = load_spec(source, batch=batch)
    if SWEEPABLE[source] == "masked":
        from edgekit.models.masked import MaskedTransformer

        mcfg = dataclasses.replace(spec.module.cfg, seq_len=length)
        v = mcfg.vocab_size
        return dataclasses.replace(
            spec,
            name=f"{spec.name}@L{length}",
            module=MaskedTransformer(mcfg).eval(),
            inputs={**spec.inputs, "tokens": TensorSpec((batch, length), "int64", 0, v + 1)},
            outputs={"logits": TensorSpec((batch, length, v), "float32")},
            meta=dict(spec.meta, seq_len=length),
            ground_truth=None,
        )
    from edgekit.models.ar import ARStep, CausalTransformer

    acfg = dataclasses.replace(spec.module.model.cfg, max_len=length)
    cache = TensorSpec((acfg.depth, batch, acfg.heads, length, acfg.head_dim), "float32", -1.0, 1.0)
    return dataclasses.replace(
        spec,
        name=f"{spec.name}@L{length}",
        module=ARStep(CausalTransformer(acfg)).eval(),
        inputs={**spec.inputs, "pos": TensorSpec((1,), "int64", 0, length), "k_cache": cache, "v_cache": cache},
        outputs={**spec.outputs, "k_cache_out": cache, "v_cache_out": cache},
        meta=dict(spec.meta, max_len=length),
        ground_truth=None,
    )


def _open_spec(spec: Any, runtime: str, cache: Path, threads: int, precision: str = "fp32", calibrate: Any = None) -> Runtime:
    """A runtime for an architecture-only spec: its ONNX export (cached by name and batch) on
    ort, the module itself on torch. ``precision`` int8 (ort only): the export quantized by
    ``quantize_unbudgeted``, calibrated on the feeds ``calibrate(fp32 runtime)`` records."""
    if runtime == "torch":
        from edgekit.runtimes.torch_ref import TorchRuntime

        return TorchRuntime(spec.module, spec.inputs, spec.outputs)
    if runtime != "ort":
        raise UsageError(f"the length sweep runs on ort or torch, not {runtime!r}")
    from edgekit.export import ExportConfig
    from edgekit.export.onnx_export import export_onnx
    from edgekit.runtimes.ort import OrtOptions, OrtRuntime

    # Keyed by the architecture (module repr lists every layer and size) and the IO: a cache kept
    # between runs never serves a graph of an older model definition.
    key = hashlib.sha256((repr(spec.module) + repr(sorted(spec.inputs.items()))).encode()).hexdigest()[:10]
    path = cache / f"{spec.name}-b{spec.batch}-{key}.onnx"
    if not path.is_file():
        staged = path.with_name(f".staging-{path.name}")
        export_onnx(spec, staged, ExportConfig())
        staged.replace(path)
    if precision == "int8":
        from edgekit.quantize.ptq import quantize_unbudgeted

        int8 = path.with_name(path.stem + "-int8.onnx")
        if not int8.is_file():
            with OrtRuntime(path, OrtOptions(intra_op_threads=threads)) as fp32:
                feeds = calibrate(fp32)
            staged = int8.with_name(f".staging-{int8.name}")
            quantize_unbudgeted(path, staged, feeds)
            staged.replace(int8)
        path = int8
    return OrtRuntime(path, OrtOptions(intra_op_threads=threads))


def length_sweep(
    bundle: Bundle,
    ar: Bundle,
    runtime: str,
    nar_steps: int,
    rows: int,
    lengths: Sequence[int],
    cfg: ProfileConfig,
    progress: ProgressFn | None = None,
) -> dict[str, Any]:
    """Median decode times of the NAR model (``nar_steps`` steps over N tokens) and the AR model
    (N tokens) at each length N of ``lengths``, from architecture-only fp32 models of the two
    bundles' built-in architectures on ``runtime`` (ort: exported to ONNX; torch: eager).

    Returns {"available", "points": [{"length", "nar_decode_ms", "ar_decode_ms", ...}], "how",
    "notes"} or {"available": False, "reason"} when the sweep cannot run here."""
    lengths = sorted(set(lengths))
    if not lengths:
        return {"available": False, "reason": "no sweep lengths besides the bundle's own", "points": []}
    sources = (bundle.manifest["model"].get("source"), ar.manifest["model"].get("source"))
    if sources[0] not in SWEEPABLE or sources[1] not in SWEEPABLE:
        return {
            "available": False,
            "reason": f"the sweep rebuilds the built-in architectures ({', '.join(SWEEPABLE)}) only; "
            f"these bundles come from {list(sources)}",
            "points": [],
        }
    if runtime not in ("ort", "torch"):
        return {"available": False, "reason": f"the sweep runs on ort or torch, not {runtime}", "points": []}
    if cfg.sweep_precision == "int8" and runtime != "ort":
        return {"available": False, "reason": f"--sweep-precision int8 quantizes for ort; the sweep here runs on {runtime}", "points": []}
    try:
        from edgekit._deps import require

        require("torch")
        if runtime == "ort":
            require("onnxscript")
    except EdgekitError as exc:
        return {"available": False, "reason": f"the sweep builds models with torch: {exc}", "points": []}
    how = (
        "architecture-only models (random weights: latency does not depend on them) of the bundles' "
        f"architectures at each length, {'exported to ONNX and ' if runtime == 'ort' else ''}decoded on "
        f"{runtime} {cfg.sweep_precision} with K={nar_steps} NAR steps and N AR tokens"
        + (" (int8: cpu-profile QDQ of every weighted node, no budget, calibrated on one recorded fp32 decode)"
           if cfg.sweep_precision == "int8" else "")
    )
    known = {**_conditions(bundle, rows, cfg.seed, cfg.cond), **_conditions(ar, rows, cfg.seed, cfg.cond)}
    points = []
    with _cache_dir(cfg.sweep_cache) as cache:
        for n in lengths:
            point: dict[str, Any] = {"length": n, "source": "architecture-only"}
            for role, b in (("nar", bundle), ("ar", ar)):
                label = f"sweep L={n} {role.upper()}"
                if progress:
                    progress(label, 0, 0)
                spec = length_variant_spec(b.manifest["model"]["source"], n, graph_batch(b))
                model = _Model(b.kind, dict(spec.meta), b.manifest.get("decode_defaults") or {})
                opts = {"steps": nar_steps} if role == "nar" else {"length": n}
                dcfg = decode_config(b.kind, model.decode_defaults, opts, seed=cfg.seed)
                spec_cond = _spec_conditions(spec, known, rows)

                def record(fp32: Runtime, model=model, spec_cond=spec_cond, dcfg=dcfg) -> list[dict[str, np.ndarray]]:
                    from edgekit.quantize.calibrate import RecordingRuntime

                    recorder = RecordingRuntime(fp32, model.kind, model.meta)
                    decode(model.kind, recorder, model.meta, spec_cond, dcfg)
                    return recorder.feeds

                with _open_spec(spec, runtime, cache, cfg.threads, cfg.sweep_precision, record) as rt:
                    tick = (lambda done, total, label=label: progress(label, done, total)) if progress else None
                    doc = _measure_decodes(
                        model, rt, spec_cond, dcfg, cfg.sweep_measure,
                        power=None, rss=None, progress=tick, keep_samples=False,
                    )
                point[f"{role}_decode_ms"] = doc["latency"]["median_ms"]
                point[f"{role}_latency"] = doc["latency"]
            points.append(point)
    return {"available": True, "how": how, "lengths": lengths, "notes": [], "points": points}


class _cache_dir:
    """``path`` (created) or a temp dir removed on exit."""

    def __init__(self, path: Path | None):
        self.path, self.tmp = path, None

    def __enter__(self) -> Path:
        if self.path is not None:
            Path(self.path).mkdir(parents=True, exist_ok=True)
            return Path(self.path)
        self.tmp = Path(tempfile.mkdtemp(prefix="edgekit-sweep-"))
        return self.tmp

    def __exit__(self, *exc: object) -> None:
        if self.tmp is not None:
            shutil.rmtree(self.tmp, ignore_errors=True)


# ---- the stage ----------------------------------------------------------------------------------
def _open_power(cfg: ProfileConfig, progress: ProgressFn | None) -> _Power:
    found = detect(cfg.power, cfg.power_root)
    if isinstance(found, Unavailable):
        return _Power(None, found)
    idle = None
    if cfg.idle_seconds > 0:
        if progress:
            progress(f"idle power baseline ({cfg.idle_seconds:g} s)", 0, 0)
        idle = measure_idle(found, cfg.idle_seconds)
    return _Power(found, None, idle)


def profile_bundle(path: Path | str, cfg: ProfileConfig = ProfileConfig(), progress: ProgressFn | None = None) -> dict[str, Any]:
    """Measure ``path``'s model on every variant of ``cfg`` in this process, one after the other,
    with the same seed, conditions and decode options. Returns the ``edgekit.profile/1`` document
    (JSON-ready; ``variants`` in measuring order, ``ratios`` between them, ``compare_ar`` when
    asked). ``progress(label, done, total)`` is called outside timed regions."""
    bundle = Bundle.load(path)
    decode_config(bundle.kind, bundle.manifest.get("decode_defaults") or {}, dict(cfg.decode))  # bad options fail here
    variants_plan = plan_variants(bundle, cfg)
    if cfg.compare_ar:
        _resolve_ar_bundle(bundle, cfg)  # fail before measuring anything
    show_steps = len(cfg.steps) > 1
    rows = cfg.batch or graph_batch(bundle)
    cond = _conditions(bundle, rows, cfg.seed, cfg.cond)
    power = _open_power(cfg, progress)
    start_state = system_state()
    variants = [
        _profile_variant(bundle, v, v.label(show_steps), cond, cfg, power, progress, cfg.decode) for v in variants_plan
    ]
    doc: dict[str, Any] = {
        "schema": SCHEMA,
        "created": now_iso(),
        "bundle": str(bundle.root),
        "model": bundle.name,
        "kind": bundle.kind,
        "item_unit": "frames" if bundle.kind == "flow" else "tokens",
        "rows": rows,
        "config": cfg.to_json(),
        "power": _power_doc(power),
        "variants": variants,
        "ratios": variant_ratios(variants),
        "compare_ar": _compare_ar(bundle, variants, cfg, power, progress) if cfg.compare_ar else None,
    }
    end_state = system_state()
    doc["system"] = {"before": start_state, "after": end_state, "warnings": compare_states(start_state, end_state)}
    doc["warnings"] = list(_warnings(doc))
    return doc


def _power_doc(power: _Power) -> dict[str, Any]:
    if power.sampler is None:
        return power.unavailable.to_json() if power.unavailable else {"available": False, "reason": "not measured"}
    doc: dict[str, Any] = {"probe": power.sampler.probe, "available": True, "notes": list(power.sampler.notes())}
    if power.idle is not None:
        doc["idle"] = power.idle.to_json(samples=False)
        doc["idle_mw"] = power.idle.total_average_mw
    return doc


def _warnings(doc: Mapping[str, Any]) -> Iterator[str]:
    """Everything that makes a figure suspect, prefixed with the variant it concerns."""
    every = list(doc["variants"])
    if doc.get("compare_ar"):
        every += [v for v in doc["compare_ar"]["variants"] if v.get("available")]
    for v in every:
        for w in v["latency"]["warnings"] + v["system"]["warnings"] + v["runtime_warnings"]:
            yield f"{v['id']}: {w}"
        if v["measurement"]["capped_at_max_iters"]:
            yield f"{v['id']}: stopped at max_iters before min_seconds"
    yield from doc["system"]["warnings"]


# ---- the demo stage -----------------------------------------------------------------------------
# Small enough for < 30 s on two shared cores: fp32 (+ int8) masked and AR decodes, and one extra
# sweep length (two exports) so the crossover is measured, not only estimated.
# One warm-up decode is 8+ runtime calls: ORT has allocated and picked kernels after the first.
DEMO_MEASURE = MeasureConfig(warmup_iters=0, warmup_seconds=0.0, iters=5, min_seconds=0.2)
DEMO_SWEEP = MeasureConfig(warmup_iters=0, warmup_seconds=0.0, iters=3, min_seconds=0.1)
DEMO_SWEEP_LENGTHS = (32,)


def demo_profile(bundles: Mapping[str, Any], out_dir: Path | str, progress: ProgressFn | None = None) -> dict[str, Any]:
    """The demo's profile stage: the masked bundle on ort fp32 (and int8 when quantized), against
    the AR baseline, with a short length sweep; writes ``out_dir/report/profile.html`` and
    ``profile.json``. ``bundles``: {kind: Bundle or bundle path} with ``masked`` and ``ar``.
    Returns the stage summary the demo prints (and keeps in its JSON)."""
    from edgekit.report import summary_rows, write_report

    masked = bundles["masked"]
    ar = bundles["ar"]
    root = lambda b: b.root if isinstance(b, Bundle) else Path(b)  # noqa: E731
    cfg = ProfileConfig(
        runtimes=("ort",),
        measure=DEMO_MEASURE,
        power="auto",
        idle_seconds=0.5,
        compare_ar=True,
        ar_bundle=root(ar),
        sweep_lengths=DEMO_SWEEP_LENGTHS,
        sweep_measure=DEMO_SWEEP,
        sweep_cache=Path(out_dir) / "report" / ".sweep",
    )
    doc = profile_bundle(root(masked), cfg, progress)
    paths = write_report(doc, Path(out_dir) / "report")
    cross = (doc["compare_ar"] or {}).get("crossover") or {}
    return {
        "html": str(paths["html"]),
        "json": str(paths["json"]),
        "table": summary_rows(doc),
        "speedups": (doc["compare_ar"] or {}).get("speedups", []),
        "crossover": {k: cross.get(k) for k in ("seed_formula", "measured", "model")},
        "power": doc["power"],
        "warnings": doc["warnings"],
    }
