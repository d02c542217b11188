"""The form of the cpu profile's budget fallbacks: plain FP32 layers, or weight-only ones (INT8
weight + DequantizeLinear, float compute: a quarter of the FP32 weight bytes on disk and in the
session, but the weight is dequantized at every call). ``cpu.fallback.choose_fallback_form`` times
both side by side on the budget runtime (``time_forms``), then:

    weight-only surely slower                             -> FP32 (not measured further)
    surely faster by more than FORM_MARGIN                -> weight-only, where the budget holds
    as fast (within noise, or faster by under the margin) -> weight-only, the smaller, where the
                                                             budget holds (and it is smaller)
    the budget missed with weight-only                    -> FP32, the more accurate form

Why a tie goes to weight-only: on aMUSEd-256 the forms timed within noise, and its 4 FP32
fallbacks ([2816, 1024] each, 44 MiB) made the INT8 file 0.273x the FP32 one; as INT8 weights
it would be 0.259x (docs/large-models.md).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from edgekit.probes.speed import FASTER, SLOWER, Decision, HostProbe, decide
from edgekit.quantize.context import QuantizeRun
from edgekit.quantize.cpu.search import BudgetOutcome
from edgekit.quantize.plan import Eta, counting
from edgekit.runtimes.base import Runtime
from edgekit.runtimes.onnx_file import load_onnx, weight_bytes

# Interleaved rounds when timing the two fallback forms (one forward each): enough for a stable
# median on a loaded 2-core machine at the demo's sizes (a few ms per forward).
FORM_ROUNDS = 15
# Weight-only faster than FP32 fallbacks by more than this share is a speed win; below it the
# medians differ by noise (masked demo on an AVX2 host: 57.99 vs 58.04 ms) and the forms tie, so
# the smaller one (weight-only) is kept where the budget holds with it.
FORM_MARGIN = 0.03


def time_forms(fp: Runtime, wo: Runtime, feed: Mapping[str, Any], say: Callable[[str], None]) -> Decision:
    """Weight-only (``wo``) against FP32 fallbacks (``fp``) on one recorded call's ``feed``, one
    forward each, round-robin (``probes.speed.decide``: timed again while the timings cannot tell)."""
    eta = Eta("fallback form, weight-only against float: forward", 2 * (2 + FORM_ROUNDS), say)
    return decide(
        counting({"float": lambda: fp.run(feed), "weight-only": lambda: wo.run(feed)}, eta),
        FORM_ROUNDS,
        pair=lambda timings: ("weight-only", "float"),
        warmup=2,
        probe=HostProbe(),
        early=True,
    )


def form_sizes(fp_model: Path, wo_model: Path) -> dict[str, int]:
    """Each form's weight bytes, counted from its graph's initializers: a candidate names the side
    files of the graphs it was derived from, whole (``cpu/derive.py``), and the recorded file copies
    only what it reads. The first graph of each (step buckets share one weights file when recorded)."""
    return {"float": weight_bytes(load_onnx(fp_model)), "weight-only": weight_bytes(load_onnx(wo_model))}


def form_record(
    decision: Decision,
    wo_model: Path,
    outcome: BudgetOutcome,
    run: QuantizeRun,
    measure: Callable[[Path], dict[str, Any]],
    runtime: str = "ort",
    sizes: Mapping[str, int] | None = None,
) -> dict[str, Any]:
    """The ``fallback_form`` record of ``decision`` (weight-only against float per forward, on
    ``runtime``): chosen, forward_ms, measured_on, verdict, timing, weight_bytes (``sizes``, where
    given), why; and ``model`` (= ``wo_model``) where weight-only is chosen, its held-out metrics
    then in ``outcome``. ``measure``: the held-out decode of a candidate (``run.judge`` reads it);
    ``run.warn``: the one warning where the timing could not tell."""
    med = {name: t.median_ms for name, t in decision.timings.items()}
    doc: dict[str, Any] = {
        "chosen": "float",
        "forward_ms": med,
        "measured_on": f"{runtime} (this host)",
        "verdict": decision.verdict,
        "timing": decision.to_json(),
    }
    if sizes is not None:
        doc["weight_bytes"] = dict(sizes)
    if decision.verdict == SLOWER:
        doc["why"] = (
            f"FP32 fallbacks ran faster here (weight-only {decision.ratio:.2f}x their time per forward: "
            "a weight-only layer dequantizes its weight at every call)"
        )
        return doc
    faster = decision.verdict == FASTER and (decision.ratio or 1.0) < 1 - FORM_MARGIN
    # As fast: the timing cannot tell them apart, or weight-only wins by less than the margin.
    # Then the smaller form is worth having (file and session memory), where the budget holds.
    as_fast = (
        f"as fast within noise ({decision.why()})"
        if not decision.sure
        else f"as fast within {FORM_MARGIN:.0%} (weight-only {decision.ratio:.2f}x FP32's time per forward)"
    )
    saved = None if sizes is None else (sizes["float"] - sizes["weight-only"]) / (1 << 20)
    smaller = "smaller" if saved is None else f"{saved:.1f} MiB smaller"
    if not faster and saved is not None and saved <= 0:  # nothing to gain: the more accurate form
        doc["why"] = f"{as_fast}, and weight-only is no smaller: FP32, the more accurate form"
        kept = "kept FP32 fallbacks (weight-only is no smaller)"
    else:
        metrics = measure(wo_model)
        passed, checks = run.judge(metrics)
        if passed:
            doc |= {
                "chosen": "weight-only",
                "model": wo_model,
                "why": "weight-only fallbacks ran faster here and kept the budget"
                if faster
                else f"{as_fast} and {smaller}; kept the budget",
            }
            outcome.metrics, outcome.checks = metrics, checks
            kept = f"kept weight-only fallbacks ({smaller}, budget met)"
        else:
            doc["why"] = (
                "weight-only fallbacks ran faster here but missed the budget"
                if faster
                else f"{as_fast}, but weight-only missed the budget: FP32, the more accurate form"
            )
            kept = "kept FP32 fallbacks (weight-only missed the budget)"
    if not decision.sure:  # the timing could not tell: said once, with what decided instead
        shown = "not measured against" if decision.speedup is None else f"{decision.speedup:.2f}x"
        run.warn(
            f"fallback form: weight-only ran {shown} FP32 fallbacks per forward, within noise "
            f"after {decision.rounds} rounds ({decision.why()}); {kept}"
        )
    return doc
