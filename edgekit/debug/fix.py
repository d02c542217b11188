"""``edgekit debug --fix``: the smallest change at the op where the error entered, proven with
``check``'s gate, written into the bundle.

Fixes, smallest first, by the bundle's quantize profile:

- qnn: the op's tensor to 16 bit (``{"tensor": T, "action": "int16"}``): the quantized tensor
  the cause names first (its output on the HTP, its activation input, then its MatMul weight);
- cpu / trt: the op weight-only (INT8 weights, float activations: not when the weights are the
  cause), then fully float (``{"node": N, "action": "weight-only" | "float"}``);
- step-bucket: more step buckets (``quantize --step-buckets``, issue #27: activation scales per
  step range), tried first where the op's error depends on the step (its SQNR spreads over
  ``attribute.STEP_DEPENDENT_DB`` across the steps), last otherwise; not available where the model has
  ``auto`` (or the most) buckets already.

Each fix re-quantizes a scratch copy of the bundle with the bundle's recorded quantize config plus
the override (``quantize_bundle``) and runs ``check``'s gate on it (same rows, seed and decode
settings as quantize judged); the first that passes wins. The winner is written as the
``quantize-overrides`` artifact (``edgekit.quantize-overrides/1``, what ``quantize --overrides``
reads; provenance in its manifest entry) and the bundle is re-quantized with it.
"""

from __future__ import annotations

import dataclasses
import json
import shutil
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from edgekit._lock import writes_bundle
from edgekit.bundle import MANIFEST, Bundle
from edgekit.debug.topology import Entry
from edgekit.errors import BundleError, EdgekitError, UsageError
from edgekit.host import ISA_CLASSES
from edgekit.output import jsonable
from edgekit.quantize import (
    MAX_BUCKETS,
    QuantizeConfig,
    overrides_document,
    quantize_bundle,
    quantize_profile,
)

ARTIFACT = "quantize-overrides"
MAX_TRIALS = 4  # quantize + gate each: seconds on small models, minutes on big ones
# Artifacts a scratch copy keeps: what quantize reads (the rest is rebuilt or irrelevant).
SCRATCH_KEEPS = ("fp32", "conditions")

Gate = Callable[[Path], dict[str, Any]]  # bundle dir -> gate_runtimes' {"passed", "failed", "margin", "metrics"}


@dataclass(frozen=True)
class Fix:
    kind: str  # int16 | weight-only | float | step-bucket
    overrides: tuple[Mapping[str, Any], ...]  # the new override(s)
    what: str  # for people: "fc2 weight-only"
    config: Mapping[str, Any] = dataclasses.field(default_factory=dict)  # other QuantizeConfig changes (step buckets)


def recorded_config(bundle: Bundle) -> QuantizeConfig:
    """The QuantizeConfig ``edgekit quantize`` recorded for the bundle's int8 model. The manifest
    schema checked its types when the bundle loaded; a value QuantizeConfig refuses is one line
    naming the manifest field (the user passed no --isa or --profile: the manifest holds it)."""
    q = bundle.quantization
    doc = q.config if q is not None else {}
    if not doc:
        raise UsageError(
            f"bundle {bundle.root} records no quantize config: --fix re-quantizes with it",
            hint=f"quantize first: `edgekit quantize {bundle.root}`",
        )
    names = {f.name for f in dataclasses.fields(QuantizeConfig)}
    kw = {k: v for k, v in doc.items() if k in names}
    fields = {k: f"quantization.config.{k}" for k in kw}
    for key in ("exclude", "op_types"):
        kw[key] = tuple(kw.get(key) or ())
    kw["overrides"] = tuple(dict(o) for o in kw.get("overrides") or ())
    # "host" meant the machine that quantized: the trials and the reproduce line quantize for the
    # CPU class the int8 model was made for, wherever debug runs (another class picks another scheme).
    made_for = q.arithmetic.isa if q is not None and q.arithmetic is not None else None
    if kw.get("isa", "host") == "host" and made_for in ISA_CLASSES:
        kw["isa"], fields["isa"] = made_for, "quantization.arithmetic.isa"
    try:
        cfg = QuantizeConfig(**kw)
        cfg.budget_for(bundle.kind)  # a budget key of another kind: now, not in the first trial
        return cfg
    except UsageError as exc:
        # QuantizeConfig speaks in options ("--isa 'zz9' is unknown"): say which field holds the value.
        flag, _, rest = exc.message.partition(" ")
        name = flag.lstrip("-").replace("-", "_")
        name = {"seed": "eval_seed"}.get(name, name)
        where = fields.get(name, "quantization.config")
        detail = rest if name in fields else exc.message
        raise BundleError(
            f"manifest {bundle.root / MANIFEST} field {where}: {detail}",
            hint=f"re-quantize with `edgekit quantize {bundle.root}` (it records the config --fix uses)",
        ) from None


def candidates(profile: str, entry: Entry, attribution: Mapping[str, Any], source: str) -> list[Fix]:
    """The fixes to try for ``entry``, smallest first."""
    label = f"{entry.shown.label} ({entry.shown.op_type})"
    reason = (
        f"step {entry.step + 1}: {label} adds noise at {entry.own_db:.1f} dB "
        f"({attribution.get('cause', 'unknown cause')})"
    )

    def item(**kw: Any) -> dict[str, Any]:
        return kw | {"reason": reason, "source": source}

    if quantize_profile(profile).overrides == "tensor":  # qnn: no float fallback, tensors go to 16 bit
        tensors = [
            a["tensor"]
            for a in sorted(attribution.get("activation", []), key=lambda a: a.get("output_sqnr_db", a["sqnr_db"]))
        ]
        weight = (attribution.get("weights") or {}).get("tensor")
        if weight:
            tensors.append(weight.removesuffix("_quantized"))
        return [Fix("int16", (item(tensor=t, action="int16"),), f"{t} at 16 bit") for t in dict.fromkeys(tensors)]
    node = entry.shown.name
    fixes = (
        []
        if attribution.get("cause") == "weights"
        else [Fix("weight-only", (item(node=node, action="weight-only"),), f"{label} weight-only")]
    )
    return fixes + [Fix("float", (item(node=node, action="float"),), f"{label} in float")]


def step_bucket(base: QuantizeConfig) -> Fix | dict[str, Any]:
    """More step buckets (``quantize --step-buckets``: activation scales per step range, boundaries
    from the range drift), or why not. Not an override: the file cannot carry it, so the winner's
    ``reproduce`` command names it."""
    now = base.step_buckets
    if now == "auto" or (isinstance(now, int) and now >= MAX_BUCKETS):
        return {"kind": "step-bucket", "available": False, "why": f"the int8 model already has --step-buckets {now}"}
    value: int | str = "auto" if now in (None, 1) else int(now) + 1
    return Fix("step-bucket", (), f"--step-buckets {value} (activation scales per step range)", {"step_buckets": value})


def ordered(op_fixes: list[Fix], bucket: Fix | dict[str, Any], step_dependent: bool) -> list[Fix]:
    """The step-bucket fix first where the error depends on the step (it keeps every op INT8),
    last otherwise."""
    if not isinstance(bucket, Fix):
        return op_fixes
    return [bucket, *op_fixes] if step_dependent else [*op_fixes, bucket]


def reproduce(path: Path, artifact: str, cfg: QuantizeConfig) -> str:
    """The ``edgekit quantize`` line that makes the fixed int8 model again from the fp32 one."""
    flags = [f"--overrides {path / artifact}"]
    default = QuantizeConfig()
    for name, flag in (
        ("profile", "--profile"),
        ("method", "--method"),
        ("calib_samples", "--calib-samples"),
        ("eval_samples", "--eval-samples"),
        ("eval_seed", "--seed"),
        ("target", "--target"),
        ("step_buckets", "--step-buckets"),
        ("cond_data", "--cond-data"),
        ("isa", "--isa"),
        ("scheme", "--scheme"),
    ):
        value = getattr(cfg, name, None)
        if value is not None and value != getattr(default, name, None):
            flags.append(f"{flag} {value}")
    flags += [f"--exclude {e}" for e in cfg.exclude] + ([] if cfg.fallback else ["--no-fallback"])
    return f"edgekit quantize {path} " + " ".join(flags)


def scratch_copy(bundle: Bundle, dest: Path) -> Path:
    """A bundle at ``dest`` with only what quantize reads (fp32 model, stored conditions)."""
    dest.mkdir(parents=True)
    keep = [name for name in bundle.artifact_names if name in SCRATCH_KEEPS]
    for rel in [f for name in keep for f in bundle.artifact(name).files]:
        (dest / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(bundle.root / rel, dest / rel)
    # No engines, no fused graphs: built from the int8/fp32 graphs a trial replaces or does not need.
    (dest / MANIFEST).write_text(json.dumps(bundle.subset(keep, None, fused=False), indent=1))
    return dest


def configured(base: QuantizeConfig, fix: Fix) -> QuantizeConfig:
    """``base`` with the fix's overrides added (and its other settings)."""
    return dataclasses.replace(base, overrides=tuple(base.overrides) + tuple(fix.overrides), **dict(fix.config))


def trial(
    bundle: Bundle, fix: Fix, base: QuantizeConfig, gate: Gate, scratch: Path, say: Callable[[str], None]
) -> dict[str, Any]:
    """Re-quantize a scratch copy (at ``scratch``) with ``fix`` and judge it with the gate."""
    start = time.perf_counter()
    say(f"try {fix.what}: re-quantize a scratch copy and run check's gate")
    scratch_copy(bundle, scratch)
    doc: dict[str, Any] = {"kind": fix.kind, "what": fix.what, "overrides": [dict(o) for o in fix.overrides]}
    try:
        summary = quantize_bundle(scratch, configured(base, fix), progress=None, warn=lambda m: None)
    except (EdgekitError, TypeError) as exc:  # an override this graph rejects: that fix is out, not the run
        return doc | {"passed": False, "error": str(exc), "seconds": time.perf_counter() - start}
    verdict = gate(scratch)
    shutil.rmtree(scratch, ignore_errors=True)
    return doc | {
        "passed": verdict["passed"],
        "margin": verdict["margin"],
        "failed": verdict["failed"],
        "quantize_budget_passed": summary["passed"],
        "seconds": time.perf_counter() - start,
    }


def search(
    bundle: Bundle, fixes: list[Fix], base: QuantizeConfig, gate: Gate, tmp: Path, say: Callable[[str], None]
) -> tuple[Fix | None, list[dict[str, Any]]]:
    """(the first fix that passes, every trial's document)."""
    trials = []
    for i, fix in enumerate(fixes[:MAX_TRIALS]):
        doc = trial(bundle, fix, base, gate, tmp / f"trial-{i}", say)
        trials.append(doc)
        if doc["passed"]:
            return fix, trials
    return None, trials


def commit(
    path: Path, fix: Fix, base: QuantizeConfig, provenance: Mapping[str, Any], gate: Gate, say: Callable[[str], None]
) -> dict[str, Any]:
    """Re-quantize the bundle with the winner, judge it, and record the overrides file."""
    cfg = configured(base, fix)
    say(f"re-quantize {path} with {fix.what}")
    quantize_bundle(path, cfg, progress=None, warn=lambda m: None)
    after = gate(path)
    artifact = record_overrides(
        path,
        cfg,
        dict(provenance) | {"fix": fix.kind, "what": fix.what, "gate_after": after, "config": dict(fix.config)},
    )
    return {
        "artifact": artifact,
        "after": after,
        "config": dict(fix.config),
        "reproduce": reproduce(Path(path), artifact, cfg),
    }


@writes_bundle("debug")
def record_overrides(path: Path, cfg: QuantizeConfig, provenance: Mapping[str, Any]) -> str:
    """Write ``cfg.overrides`` as the ``quantize-overrides`` artifact; its path in the bundle."""
    bundle = Bundle.load(path)
    staged = bundle.staging_path(f"{ARTIFACT}.json")
    try:
        staged.write_text(json.dumps(overrides_document(cfg.overrides), indent=1) + "\n")
        art = bundle.add_artifact(ARTIFACT, staged, made_by="debug", config=jsonable(provenance), suffix=".json")
        bundle.save()
    finally:
        staged.unlink(missing_ok=True)
    return art.path
