"""What `edgekit profile` measures: its config, the variants (runtime x precision x steps) a bundle
has, and the progress callback type."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from edgekit._deps import require
from edgekit.bundle import Bundle
from edgekit.errors import BundleError, UsageError, one_of
from edgekit.evaluate import conditions, load_condition_data, stored_rows
from edgekit.limits import check_options
from edgekit.probes.latency import MeasureConfig
from edgekit.probes.power import CHOICES as POWER_CHOICES
from edgekit.profile.frontier import Tolerance
from edgekit.runtimes.registry import backend, check_precisions, check_runtimes, names, runs

SCHEMA = "edgekit.profile/1"


# progress(label, done, total): total 0 = a stage of unknown length just started.
ProgressFn = Callable[[str, int, int], None]


# Ratio orientation: the deployment candidate over its reference (int8 over fp32, TensorRT over
# ORT over torch eager), so a latency ratio below 1 means the candidate is faster.
PRECISION_ORDER = ("int8", "fp16", "bf16", "fp32")


def candidate_order(axis: str) -> tuple[str, ...]:
    """Values of ``axis`` (runtime | precision), deployment candidates first: runtimes by their
    registry ``reference_rank`` (device runtimes, then ORT, then the torch reference)."""
    if axis == "precision":
        return PRECISION_ORDER
    return tuple(sorted(names(), key=lambda n: backend(n).reference_rank))


# A profile leaves out the runtime x precision pairs a runtime does not run (its registry
# precisions), and a precision no runtime of the profile runs is an error.


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
    # --cond-data FILE.npz|DIR: real condition rows; the first `batch` rows are decoded. Without
    # it: the held-out rows `edgekit quantize` stored, else demo conditions / seeded draws.
    cond_data: Path | None = None
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
    # fp32 | int8 | fp32,int8: precision(s) of the architecture-only sweep models. int8 quantizes
    # each with the cpu profile (no budget: random weights), calibrated on one recorded FP32 decode
    # of it. Both: one sweep (and crossover) per precision, side by side in one run.
    sweep_precision: str = "fp32"
    # Same seed on every variant: every runtime decodes the same noise and conditions.
    seed: int = 0
    # Runtime intra-op threads; 0 = the runtime's default.
    threads: int = 0
    # Keep per-decode samples and power samples in the document (the HTML plots need them).
    keep_samples: bool = True
    # With compare_ar: the masked step counts K of the quality-latency frontier (each decoded for
    # latency under ``measure`` and scored on the evaluation set); () = no frontier.
    frontier_steps: tuple[int, ...] = (1, 2, 4, 8, 16)
    # Conditions in the frontier's evaluation set (the same set for every K and for AR).
    frontier_n: int = 64
    # Quality metric the frontier ranks by; None = event_accuracy for the demo corpus, else the
    # first metric the --metric hook returns.
    frontier_metric: str | None = None
    # How far below AR's quality a K may be and count as reaching it: "10%" of |AR| or "0.02".
    frontier_tolerance: str = "10%"
    # module:function(output, cond) -> {name: float}, higher = better: quality for models without
    # a ground truth (RUNS USER CODE).
    metric_hook: str | None = None
    # --runtime aihub: the AI Hub devices (names, or Snapdragon targets standing for their first
    # device), one profile job each, submitted at once; () = the devices of the bundle's AI Hub engines.
    devices: tuple[str, ...] = ()
    # --runtime aihub: an op off the NPU (CPU/GPU fallback) fails the profile (exit 4), not only a warning.
    require_npu: bool = False
    # --runtime aihub: collect an earlier run's jobs (the bundle's aihub/jobs.json) instead of submitting.
    resume: bool = False
    # --target: each precision's engine built for this target (what `edgekit run --target` loads)
    # instead of --runtime's; ``rebuild``: build a missing or stale one instead of refusing.
    target: str | None = None
    rebuild: bool = False

    @property
    def sweep_precisions(self) -> tuple[str, ...]:
        """The precisions the length sweep runs in, in order (``sweep_precision`` split)."""
        return tuple(self.sweep_precision.split(","))

    def __post_init__(self) -> None:
        object.__setattr__(self, "runtimes", check_runtimes(tuple(self.runtimes)))
        object.__setattr__(self, "precisions", check_precisions(tuple(self.precisions)))
        object.__setattr__(self, "steps", tuple(self.steps))
        object.__setattr__(self, "sweep_lengths", tuple(self.sweep_lengths))
        # limits.OPTION_BOUNDS: every count checked before the first variant runs.
        check_options(
            {
                "--steps": self.steps,
                "--sweep": self.sweep_lengths,
                "--frontier-steps": tuple(self.frontier_steps),
                "--batch": self.batch,
                "--frontier-n": self.frontier_n,
                "--seed": self.seed,
                "--threads": self.threads,
            }
        )
        one_of("--power", self.power, POWER_CHOICES)
        if self.idle_seconds < 0:
            raise UsageError(f"idle_seconds={self.idle_seconds} is invalid; valid: >= 0")
        swept = tuple(p.strip() for p in str(self.sweep_precision).split(","))
        for p in swept:
            one_of("--sweep-precision", p, ("fp32", "int8"), also=" (or both: fp32,int8)")
        object.__setattr__(self, "sweep_precision", ",".join(dict.fromkeys(swept)))
        object.__setattr__(self, "frontier_steps", tuple(self.frontier_steps))
        Tolerance.parse(self.frontier_tolerance)
        object.__setattr__(self, "devices", tuple(self.devices))
        if self.target is not None and self.compare_ar:
            raise UsageError(
                "--compare-ar decodes the AR baseline on --runtime, not on a target's engines; "
                "drop --target (or --compare-ar)"
            )
        hosted = [r for r in self.runtimes if backend(r).hosted]
        if (self.devices or self.require_npu) and not hosted:
            clouds = [n for n in names() if backend(n).hosted]
            raise UsageError(
                f"{'--devices' if self.devices else '--require-npu'} is "
                f"for AI Hub's devices; add --runtime {' or '.join(clouds)}"
            )
        if self.target is not None and hosted:
            raise UsageError(f"--runtime {hosted[0]} profiles hosted devices, not a target's engines; drop --target")
        if self.target is None and self.rebuild:
            raise UsageError("--rebuild rebuilds a target's engine; add --target NAME (or drop --rebuild)")

    def to_json(self) -> dict[str, Any]:
        doc = dataclasses.asdict(self)
        doc["cond"] = dict(self.cond)
        doc["decode"] = dict(self.decode)
        for key in ("ar_bundle", "sweep_cache", "cond_data"):
            doc[key] = None if doc[key] is None else str(doc[key])
        return doc


@dataclass(frozen=True)
class Variant:
    runtime: str
    precision: str
    steps: int | None  # None = the bundle's default
    # --target: the engine the target loads (runtimes.engines.EngineChoice); None: --runtime's way.
    engine: Any = field(default=None, compare=False)

    def label(self, show_steps: bool) -> str:
        text = f"{self.runtime} {self.precision}"
        if self.engine is not None:
            text += f" ({self.engine.target.name})"
        return f"{text} K={self.steps}" if show_steps and self.steps is not None else text


@dataclass(frozen=True)
class DecodeModel:
    """What a decode needs from a bundle (or from an architecture-only spec in the sweep)."""

    kind: str
    meta: Mapping[str, Any]
    decode_defaults: Mapping[str, Any]

    @classmethod
    def of(cls, bundle: Bundle) -> DecodeModel:
        return cls(bundle.kind, bundle.meta, bundle.decode_defaults)


# ---- planning -----------------------------------------------------------------------------------
def has_artifact(bundle: Bundle, name: str) -> bool:
    return bundle.has(name)


def bundle_precisions(bundle: Bundle) -> tuple[str, ...]:
    """What is profiled without --precision: fp32, and int8 where the bundle has it."""
    return ("fp32", "int8") if has_artifact(bundle, "int8") else ("fp32",)


def check_steps(bundle: Bundle, cfg: ProfileConfig) -> tuple[int | None, ...]:
    """The step counts each variant runs (None: the bundle's default); --steps on an ar model is
    one line (one step per token)."""
    if cfg.steps and bundle.kind == "ar":
        raise UsageError("--steps does not apply to the ar model (one step per token)", hint="drop --steps")
    return cfg.steps or (None,)


def plan_variants(bundle: Bundle, cfg: ProfileConfig) -> list[Variant]:
    """The variants to measure, checked before anything runs (a missing int8 artifact or torch
    fails here, not after minutes of measuring)."""
    precisions = cfg.precisions or bundle_precisions(bundle)
    orphans = [p for p in precisions if not any(p in backend(r).precisions for r in cfg.runtimes)]
    if orphans:
        raise UsageError(
            f"--precision {orphans[0]} runs on none of --runtime {','.join(cfg.runtimes)}; "
            f"{orphans[0]} runs on {', '.join(runs(orphans[0]))}",
            hint="add a runtime that runs it (e.g. --runtime ort,openvino --precision fp32,int8,bf16)",
        )
    if "int8" in precisions and not has_artifact(bundle, "int8"):
        have = ", ".join(p for p in ("fp32", "int8") if has_artifact(bundle, p)) or "none"
        # The quantize profile whose int8 model a runtime loads (its registry entry's
        # ``quantize_profile``): the qnn runtime refuses a cpu-profile model, so the hint must say
        # so, and offers the float precision that runtime runs instead.
        wants = next((backend(r) for r in cfg.runtimes if backend(r).quantize_profile), None)
        prof = wants.quantize_profile if wants else None
        other = next((p for p in wants.precisions if p != "int8"), "fp32") if wants else "fp32"
        raise BundleError(
            f"--precision int8: bundle {bundle.root} has no int8 artifact (precisions it has: {have})",
            hint=(
                f"run `edgekit quantize {bundle.root}{f' --profile {prof}' if prof else ''}` "
                f"first, or profile --precision {other}"
            ),
        )
    for name in cfg.runtimes:
        b = backend(name)
        require(b.requires.module)  # a missing package fails here, not after minutes of measuring
        if b.engine is None or b.engine.runs_unbuilt:
            continue
        for p in (p for p in precisions if p in b.precisions):
            if bundle.engine_for(name, p) is None:
                raise BundleError(
                    f"--runtime {name}: bundle {bundle.root} has no {b.title} {p} engine",
                    hint=(
                        f"build one on the device with `edgekit build {bundle.root} --target TARGET --precision "
                        f"{p}` (targets: `edgekit targets`)"
                    ),
                )
    steps = check_steps(bundle, cfg)
    # torch runs fp32 only, ort fp32 and int8: each precision pairs with the runtimes that run it.
    return [Variant(r, p, s) for r in cfg.runtimes for p in precisions if p in backend(r).precisions for s in steps]


def bundle_conditions(
    bundle: Bundle, rows: int, seed: int, raw: Mapping[str, str] | None = None, data: Path | None = None
) -> dict[str, np.ndarray]:
    """Conditions [rows, ...]: ``--cond`` values, the first rows of ``--cond-data`` (or of the
    rows quantize stored), else the demo set / seeded draws in the declared ranges."""
    names = bundle.meta.get("conditioning") or {}
    raw = {k: v for k, v in (raw or {}).items() if k in names}
    real = None
    if data is not None:
        real = load_condition_data(bundle, data).arrays
    elif not raw:
        real = stored_rows(bundle)
    return conditions(bundle, raw, rows, seed, rows=real, draw=True)


def spec_conditions(spec: Any, known: Mapping[str, np.ndarray], rows: int) -> dict[str, np.ndarray]:
    """Conditions for an architecture-only spec: the bundle's arrays where name and shape match,
    else the input's lowest valid value (latency does not depend on which class is asked for)."""
    out = {}
    for name in spec.meta.get("conditioning") or {}:
        s = spec.inputs[name]
        shape = (rows, *s.shape[1:])
        arr = known.get(name)
        out[name] = arr if arr is not None and arr.shape == shape else np.full(shape, s.low or 0, dtype=s.dtype)
    return out
