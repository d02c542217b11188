"""The check stage: decode one evaluation set with two variants of a bundle under identical
noise, measure how far the candidate strays from the reference, and judge it.

Decode settings (what was chosen, and why): both variants decode with the bundle's decode
defaults (plus ``decode`` overrides), batch ``i`` with seed ``seed + i`` exactly as
``edgekit run`` / ``pipeline.evaluate`` do, so both draw the *same* Gumbel noise (masked, ar) and
the same x0 (flow) and differ only through the network. Under sampling one near-tie flip
re-routes a row, so the gates lean on what sampling does not blur: teacher-forced logits KL /
top-1 agreement / velocity SNR (the candidate network run on the reference's own step inputs)
and the ground-truth quality drop; trajectory agreement is gated loosely. ``greedy=True`` sets
temperature 0 (masked, ar; flow is deterministic given x0) for argmax trajectories.
"""

from __future__ import annotations

import dataclasses
import math
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from edgekit.arithmetic import int8_host_warnings
from edgekit.bundle import Bundle, now_iso
from edgekit.check.aihub import check_on_aihub
from edgekit.check.junit import write_junit
from edgekit.check.strict import settle
from edgekit.decode.dispatch import decode_config
from edgekit.errors import EdgekitError, UsageError
from edgekit.evaluate import (
    check_rows,
    load_condition_data,
    score,
    stored_rows,
)
from edgekit.evaluate.gate import decode_pair
from edgekit.evaluate.metrics import load_metric_hook, near_tie_note, quality_drops, run_metric_hook
from edgekit.evaluate.thresholds import (
    QUALITY_PREFIX,
    check_comparable,
    load_baseline,
    load_thresholds,
    save_baseline,
)
from edgekit.evaluate.verdict import compare
from edgekit.limits import check_options
from edgekit.manifest_sections import BudgetEval
from edgekit.runtimes import PRECISIONS, open_runtime
from edgekit.runtimes.registry import backend, names
from edgekit.targets import load_target

SCHEMA = "edgekit.check/1"
DEFAULT_N = 16  # two batches of the demo's graph batch 8: seconds on a 2-core CPU, enough to gate


@dataclass(frozen=True)
class RuntimePrecision:
    """One way to run a bundle: a runtime and a precision (``ort:int8``, ``torch:fp32``)."""

    runtime: str
    precision: str

    def __str__(self) -> str:
        return f"{self.runtime}:{self.precision}"


def parse_variant(text: str, runtime: str = "ort", flag: str = "--candidate") -> RuntimePrecision:
    """``runtime:precision``, a bare precision (on ``runtime``) or a bare runtime (fp32)."""

    valid = (
        f"runtime:precision (runtimes {', '.join(names())}; precisions "
        f"{', '.join(PRECISIONS)}), e.g. ort:int8, torch:fp32, int8"
    )
    raw = text.strip().lower()
    if ":" in raw:
        rt, _, prec = raw.partition(":")
    elif raw in PRECISIONS:
        rt, prec = runtime, raw
    elif raw in names():
        rt, prec = raw, "fp32"
    else:
        raise UsageError(f"{flag} {text!r} is not a variant; valid: {valid}")
    if rt not in names() or prec not in PRECISIONS:
        raise UsageError(f"{flag} {text!r} is not a variant; valid: {valid}")
    runs = backend(rt).precisions
    if prec not in runs:
        raise UsageError(f"{flag} {text!r} is not a variant: {rt} runs {', '.join(runs)}; valid: {valid}")
    return RuntimePrecision(rt, prec)


@dataclass(frozen=True)
class CheckConfig:
    reference: str = "fp32"  # the known-good variant; a bare precision runs on `runtime`, a bare runtime in fp32
    candidate: str = "int8"  # the variant under test: by default the model `edgekit quantize` made
    runtime: str = "ort"  # runtime of a variant given as a bare precision (--runtime)
    # Evaluation conditions (the last graph batch may be partly unused) and the seed (batch i
    # decodes with seed + i on both variants: identical noise, as `edgekit run`). None: what
    # `edgekit quantize` gated the int8 model on (manifest quantization.budget.eval), else 16 / 0.
    n: int | None = None
    seed: int | None = None
    greedy: bool = False  # temperature 0 (masked, ar): argmax trajectories; default samples like the bundle
    # Decode overrides for both variants; None: the settings quantize's budget decoded with, else {}.
    decode: Mapping[str, Any] | None = None
    # Extra overrides for the candidate only (e.g. {"steps": 6}: is 6 steps as good as 8?).
    candidate_decode: Mapping[str, Any] = field(default_factory=dict)
    cond: Mapping[str, str] = field(default_factory=dict)  # --cond NAME=VALUE for models without a demo evaluation set
    # --cond-data FILE.npz|DIR: real condition rows; check decodes its held-out rows (quantize's split).
    cond_data: Path | None = None
    thresholds: Path | None = None  # TOML overrides of the per-kind defaults
    baseline: Path | None = None  # fail on regressions vs this known-good run, not only on thresholds
    save_baseline: Path | None = None  # write this run's metrics as a baseline (even if it fails)
    junit: Path | None = None  # write JUnit XML, one test case per metric
    metric_hook: str | None = None  # module:function quality metric for non-demo models (RUNS USER CODE)
    threads: int = 0  # runtime intra-op threads; 0 = runtime default
    # A variant on one of this target's runtimes loads its built engine (e.g. qnn:int8 with a
    # Snapdragon target: the precompiled context, with the target's SoC options); None = plain.
    target: str | None = None
    # A candidate on aihub: the AI Hub device (a name, or a Snapdragon target for its first
    # device); None = --target's, else the device of the bundle's one AI Hub engine.
    device: str | None = None
    # aihub: collect an earlier run's inference jobs (the bundle's aihub/jobs.json) instead of submitting.
    resume: bool = False
    strict: bool = False  # every warning fails the check (a "warnings" row; exit 4 as a failed metric)

    def __post_init__(self) -> None:
        check_options({"--n": self.n, "--seed": self.seed, "--threads": self.threads})

    def resolved(self, bundle: Bundle) -> CheckConfig:
        """n, seed and decode filled in: what ``edgekit quantize`` recorded for its budget (so a
        default check judges the very set quantize gated), else 16 rows, seed 0, no overrides."""
        q = bundle.quantization
        gated = q.budget_eval if q is not None else BudgetEval()
        return dataclasses.replace(
            self,
            n=self.n if self.n is not None else (gated.samples if gated.samples is not None else DEFAULT_N),
            seed=self.seed if self.seed is not None else (gated.seed if gated.seed is not None else 0),
            decode=self.decode if self.decode is not None else gated.decode,
        )


def _open(bundle: Bundle, variant: RuntimePrecision, threads: int, target: str | None = None):
    if target is not None and variant.runtime in load_target(target).runtimes:
        return open_runtime(bundle, variant.runtime, variant.precision, threads=threads, target=target)
    return open_runtime(bundle, variant.runtime, variant.precision, threads=threads)


def _settings(
    bundle: Bundle, cfg: CheckConfig, ref: RuntimePrecision, cand: RuntimePrecision
) -> tuple[dict, dict, dict]:
    """(document settings, reference overrides, candidate overrides)."""
    overrides = dict(cfg.decode)
    if cfg.greedy and bundle.kind != "flow":
        overrides["temperature"] = 0.0
    cand_overrides = overrides | dict(cfg.candidate_decode)
    defaults = bundle.decode_defaults
    decode_ref = {k: v for k, v in vars(decode_config(bundle.kind, defaults, overrides)).items() if k != "seed"}
    decode_cand = {k: v for k, v in vars(decode_config(bundle.kind, defaults, cand_overrides)).items() if k != "seed"}
    settings = {
        "model": bundle.name,
        "kind": bundle.kind,
        "reference": str(ref),
        "candidate": str(cand),
        "n": cfg.n,
        "seed": cfg.seed,
        "greedy": cfg.greedy,
        "decode": decode_ref,
        "candidate_decode": decode_cand,
    }
    return settings, overrides, cand_overrides


def check_bundle(
    path: Path | str, cfg: CheckConfig = CheckConfig(), progress: Callable[[str], None] | None = None
) -> dict[str, Any]:
    """Compare ``cfg.candidate`` with ``cfg.reference`` on ``path``'s model.

    Returns the ``edgekit.check/1`` document: settings, ``metrics`` {name: float}, per-step
    ``curves``, ground-truth ``quality`` of both, ``rows`` (one verdict per metric) and
    ``passed``. Writes the baseline / JUnit files ``cfg`` names. Raises EdgekitError on bad
    input; a failed check is ``passed: False``, not an exception. ``progress(message)`` is told
    what it is doing (opening a torch reference and decoding take minutes on a small CPU).
    """
    start = time.perf_counter()
    say = progress or (lambda message: None)
    cand_v = parse_variant(cfg.candidate, cfg.runtime, "--candidate")
    if cand_v.runtime == "aihub":  # the candidate on an AI Hub device, the reference on this host (ort by default)
        ref_v = parse_variant(cfg.reference, "ort" if cfg.runtime == "aihub" else cfg.runtime, "--reference")
        return _finish(check_on_aihub(path, cfg, ref_v, cand_v, say, _settings, eval_rows), cfg, start)
    if cfg.device is not None:
        raise UsageError("--device names an AI Hub device: add --runtime aihub (or --candidate aihub:int8)")

    bundle = Bundle.load(path)
    cfg = cfg.resolved(bundle)
    check_rows(bundle, cfg.n, "--n")  # before rows are read or a single batch decodes
    rows, cond_source = eval_rows(bundle, cfg)
    if rows is not None:  # fewer real rows than asked: judge the rows there are
        cfg = dataclasses.replace(cfg, n=min(cfg.n, len(next(iter(rows.values())))))
    ref_v = parse_variant(cfg.reference, cfg.runtime, "--reference")
    cand_v = parse_variant(cfg.candidate, cfg.runtime, "--candidate")
    if ref_v == cand_v and not cfg.candidate_decode:
        raise UsageError(
            f"--reference and --candidate are both {ref_v}: nothing to compare",
            hint="e.g. --reference fp32 --candidate int8, or --reference torch --candidate ort:fp32",
        )
    thresholds = load_thresholds(bundle.kind, cfg.thresholds)
    settings, overrides, cand_overrides = _settings(bundle, cfg, ref_v, cand_v)
    baseline = load_baseline(cfg.baseline) if cfg.baseline else None
    if baseline is not None:
        check_comparable(baseline, settings)  # before minutes of decoding, not after
    hook = load_metric_hook(cfg.metric_hook) if cfg.metric_hook else None

    say(
        f"opening {ref_v} and {cand_v}"
        + (" (torch rebuilds the model from its source)" if "torch" in (ref_v.runtime, cand_v.runtime) else "")
    )
    with (
        _open(bundle, ref_v, cfg.threads, cfg.target) as ref_rt,
        _open(bundle, cand_v, cfg.threads, cfg.target) as cand_rt,
    ):
        devices = {"reference": ref_rt.device, "candidate": cand_rt.device}
        warnings = int8_host_warnings(bundle.quantization, [ref_v.precision, cand_v.precision], str(bundle.root))
        warnings += [*ref_rt.warnings, *cand_rt.warnings]
        scalars, curves, out, cond_all = decode_pair(
            bundle, ref_rt, cand_rt, cfg.n, cfg.seed, overrides, cand_overrides, rows, cfg.cond, say
        )
    settings["conditions"] = cond_source

    quality: dict[str, dict[str, float]] = {}
    for side in ("reference", "candidate"):
        q = dict(score(bundle, out[side], cond_all) or {})
        if hook is not None:
            q |= run_metric_hook(hook, cfg.metric_hook, out[side], cond_all)
        quality[side] = q
    drops = quality_drops(quality["reference"], quality["candidate"])
    unused = [m for m in thresholds.explicit if m.startswith(QUALITY_PREFIX) and m[len(QUALITY_PREFIX) :] not in drops]
    if unused:
        valid = ", ".join(drops) or "none (this model has no ground truth; pass --metric module:function)"
        raise EdgekitError(
            f"thresholds file {thresholds.source}: {bundle.kind}.{unused[0]} "
            f"names no quality metric of {bundle.name}; valid: {valid}"
        )
    metrics = {**scalars, **{QUALITY_PREFIX + k: v for k, v in drops.items()}}
    verdict = compare(metrics, thresholds, baseline)
    note = near_tie_note(metrics) if "top1_agreement" in verdict.failed else None
    if note is not None:
        warnings.append(note)

    doc: dict[str, Any] = {
        "schema": SCHEMA,
        "created": now_iso(),
        "bundle": str(bundle.root),
        **settings,
        "devices": devices,
        "thresholds": thresholds.source,
        "metrics": metrics,
        "curves": curves,
        "quality": {**quality, "drop": drops, "ground_truth": bundle.ground_truth, "metric_hook": cfg.metric_hook},
        "rows": [row.to_json() for row in verdict.rows],
        "passed": verdict.passed,
        "failed": verdict.failed,
        "baseline": baseline.path if baseline else None,
        "warnings": warnings,
    }
    settle(doc, bundle, [ref_v.precision, cand_v.precision], cfg.strict)
    return _finish(doc, cfg, start)


def _finish(doc: dict[str, Any], cfg: CheckConfig, start: float) -> dict[str, Any]:
    """The check's wall time and the baseline / JUnit files ``cfg`` names, whichever way it ran
    (on this host or on an AI Hub device)."""
    doc["wall_s"] = time.perf_counter() - start
    if cfg.save_baseline is not None:
        doc["saved_baseline"] = str(save_baseline(cfg.save_baseline, doc))
    if cfg.junit is not None:
        doc["junit"] = str(write_junit(cfg.junit, doc))
    return doc


def eval_rows(bundle: Bundle, cfg: CheckConfig) -> tuple[dict[str, np.ndarray] | None, str]:
    """(condition rows [n, ...] or None for the seeded rule, where they come from): the held-out
    rows of ``--cond-data`` (quantize's split), else the rows quantize stored in the bundle when
    no ``--cond`` is given, else None (demo held-out set / seeded draws in the declared ranges)."""
    if cfg.cond_data is not None:
        data = load_condition_data(bundle, cfg.cond_data)
        (_, _), (lo, hi) = data.split(calib=data.rows, heldout=cfg.n)
        return data.take(lo, hi), f"--cond-data {data.source} rows {lo}..{hi - 1} (sha256 {data.sha256[:12]})"
    stored = None if cfg.cond else stored_rows(bundle)
    if stored is not None:
        have = len(next(iter(stored.values())))
        if cfg.n > have:
            raise UsageError(
                f"--n {cfg.n}: bundle {bundle.root} stores {have} held-out condition rows (from `edgekit quantize`)",
                hint=f"use --n {have} or give the rows with --cond-data FILE.npz",
            )
        return stored, f"the {have} held-out rows `edgekit quantize` gated on (artifact 'conditions')"
    if bundle.ground_truth:
        return None, "the demo model's held-out set (seed + batch index)"
    sampler = bundle.condition_sampler
    rule = (
        f"the model's condition sampler {sampler}"
        if sampler
        else "seeded draws within the inputs' declared [low, high)"
    )
    return None, rule + (" and --cond" if cfg.cond else "")


def demo_check(bundles: Mapping[str, Any] | Iterable[Any], n: int = DEFAULT_N, seed: int = 0) -> dict[str, Any]:
    """The demo's check stage: per bundle, INT8 vs FP32 on ORT over ``n`` conditions when the
    bundle has an int8 model, else ORT FP32 vs the PyTorch module over one graph batch.
    ``bundles``: Bundle objects or paths (a dict's values are used). Returns {"passed",
    "models": {name: {reference, candidate, n, passed, failed, metrics}}}; the full check
    documents are under "documents"."""
    items = bundles.values() if isinstance(bundles, Mapping) else bundles
    report: dict[str, Any] = {"schema": "edgekit.demo-check/1", "n": n, "seed": seed, "models": {}, "documents": {}}
    for item in items:
        root = item.root if isinstance(item, Bundle) else Path(item)
        b = Bundle.load(root)  # from disk: an earlier stage may have added the int8 model since
        rows = n
        if b.has("int8"):
            ref, cand = "ort:fp32", "ort:int8"
        else:
            # The export check again, on whole decodes: one graph batch is enough (torch is slow).
            ref, cand = "torch:fp32", "ort:fp32"
            rows = min(n, next(iter(b.inputs.values())).shape[0])
        doc = check_bundle(root, CheckConfig(reference=ref, candidate=cand, n=rows, seed=seed))
        report["documents"][b.name] = doc
        report["models"][b.name] = {
            "reference": ref,
            "candidate": cand,
            "n": rows,
            "passed": doc["passed"],
            "failed": doc["failed"],
            "metrics": {k: v for k, v in doc["metrics"].items() if v is not None and not _nan(v)},
        }
    report["passed"] = all(m["passed"] for m in report["models"].values())
    return report


def _nan(v: float) -> bool:
    return isinstance(v, float) and math.isnan(v)
