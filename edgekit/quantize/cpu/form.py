"""The form of the cpu profile's budget fallbacks: plain FP32 layers, or weight-only ones (INT8
weight + DequantizeLinear, float compute: a quarter of the FP32 weight bytes on disk and in the
session, but the weight is dequantized at every call). ``choose_form`` times
both side by side on the budget runtime (``time_forms``), then:

    under FORM_MIN_SHARE of the FLOPs and of the weights  -> FP32, not timed (``not_worth_timing``)
    weight-only surely slower                             -> FP32 (not measured further)
    surely faster by more than FORM_MARGIN                -> weight-only, where the budget holds
    as fast (within noise, or faster by under the margin) -> weight-only, the smaller, where the
                                                             budget holds (and it is smaller)
    the budget missed with weight-only                    -> weight-only with the search's next
                                                             ranked layer(s) too (``widen``), where
                                                             that holds the budget and runs no slower
                                                             than FP32; else FP32, the more accurate form

Why a tie goes to weight-only: on aMUSEd-256 the forms timed within noise, and its 4 FP32
fallbacks ([2816, 1024] each, 44 MiB) made the INT8 file 0.273x the FP32 one; as INT8 weights
it would be 0.259x (docs/large-models.md).

Why one more fallback can pay: on OpenVINO a weight-only layer runs as an int8 kernel, FP32 ones as
f32 GEMMs. On the masked demo (``--target intel-cpu``, int8 attention scores) the search's four FP32
fallbacks met the 0.99 lockstep budget at 0.9901 and their weight-only form missed it; with
``blocks.0.mlp.fc`` weight-only too it held at 0.9913 and ran 6 % faster (docs/openvino.md).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from edgekit.probes.speed import FASTER, SLOWER, Decision, HostProbe, decide
from edgekit.quantize.config import WEIGHTED_OPS
from edgekit.quantize.context import QuantizeRun
from edgekit.quantize.cpu.search import BudgetOutcome, ranked_why
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
# Fallbacks under this share of the weighted FLOPs and whose weight-only form saves under this share
# of the weight bytes are not timed nor decoded in that form: weight-only computes the same float
# product, so it cannot move a forward by FORM_MARGIN through layers with a third of that share of
# the work, nor the file by more than this share. FP32 (the more accurate, already-verified form)
# stays. Sana-600M's one fallback (the caption projection: 0.3 % of the FLOPs, 3.8 MiB of 570 MiB)
# spent 232 s timing the two forms and 170 s decoding weight-only: ~30 FP32 decodes for nothing.
FORM_MIN_SHARE = 0.01
# Where weight-only misses the budget, at most this many of the search's next ranked layers join it,
# one at a time (each one more candidate decode, ``Plan.form_extra``): the masked demo needed one.
FORM_EXTRA = 2


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


def not_worth_timing(flop_share: float | None, sizes: Mapping[str, int]) -> str | None:
    """Why the fallbacks' form is not timed (FP32 stays), or None where it is: ``flop_share``,
    their share of the weighted FLOPs (None: unknown); ``sizes`` as ``form_sizes``."""
    saved = sizes["float"] - sizes["weight-only"]
    if flop_share is None or flop_share >= FORM_MIN_SHARE or saved >= FORM_MIN_SHARE * sizes["float"]:
        return None
    return (
        f"the fallbacks are {flop_share:.1%} of the weighted FLOPs and weight-only would save "
        f"{saved / (1 << 20):.1f} MiB ({saved / max(sizes['float'], 1):.1%} of the weights): neither form "
        f"can change speed or size measurably (under {FORM_MIN_SHARE:.0%} each); FP32, the more accurate "
        "form, kept without timing"
    )


def untimed_record(why: str, sizes: Mapping[str, int]) -> dict[str, Any]:
    """The ``fallback_form`` record where the forms were not timed (``not_worth_timing``)."""
    return {"chosen": "float", "verdict": "not timed", "weight_bytes": dict(sizes), "why": why}


def next_fallbacks(next_up: Sequence[str], have: int, max_fallback: int | None) -> list[str]:
    """The layers the fallback form may add to the search's ``have`` fallbacks: the first
    ``FORM_EXTRA`` of ``next_up`` (the search's own ranking), never past ``max_fallback``."""
    room = FORM_EXTRA if max_fallback is None else max(0, min(FORM_EXTRA, max_fallback - have))
    return list(next_up[:room])


@dataclass
class Wider:
    """Weight-only fallbacks with more layers than the search's set S. ``record``: what was tried
    (``tried``: each set's extra layers and budget verdict; the timing of the one that held it;
    ``why``). ``model``, ``extra``, ``metrics``, ``checks``: the kept one, None where FP32-S stays."""

    record: dict[str, Any]
    model: Path | None = None
    extra: list[str] = field(default_factory=list)
    metrics: dict[str, Any] | None = None
    checks: list[Any] | None = None
    decision: Decision | None = None


def widen(
    extra: Sequence[str],
    quantized: Sequence[str],
    build: Callable[[list[str]], Path],
    measure: Callable[[Path], dict[str, Any]],
    judge: Callable[[dict[str, Any]], tuple[bool, list[Any]]],
    timed: Callable[[Path], Decision],
    sizes: Callable[[Path], dict[str, int]],
    say: Callable[[str], None],
    labels: Mapping[str, str] | None = None,
) -> Wider:
    """Weight-only with S plus the next ranked layers ``extra``, one more at a time: each set's
    model (``build(int8 nodes)``: every other selected node weight-only) decoded against the budget
    (``measure``, ``judge``); the first that holds it is timed against FP32-S (``timed``: a
    ``time_forms`` decision, weight-only against float) and kept unless surely slower, or as fast
    and no smaller (``sizes(model)``: {"float": FP32-S's weight bytes, "weight-only": model's}).
    Only the first set that holds the budget is timed: one more weight-only layer is one INT8 layer
    fewer, no faster."""
    labels = labels or {}
    tried: list[dict[str, Any]] = []
    record: dict[str, Any] = {"tried": tried}
    for k in range(1, len(extra) + 1):
        added = list(extra[:k])
        names = [labels.get(n, n) for n in added]
        say(f"fallback form: weight-only missed the budget; trying weight-only with {k} more: {', '.join(names)}")
        model = build([n for n in quantized if n not in added])
        metrics = measure(model)
        passed, checks = judge(metrics)
        tried.append({"extra": added, "labels": names, "budget": "met" if passed else "missed", "checks": checks})
        if not passed:
            continue
        decision = timed(model)
        weights = sizes(model)
        record |= {
            "forward_ms": {name: t.median_ms for name, t in decision.timings.items()},
            "verdict": decision.verdict,
            "timing": decision.to_json(),
            "weight_bytes": weights,
        }
        with_them = f"weight-only with {', '.join(names)} held the budget"
        if decision.verdict == SLOWER:
            record["why"] = f"{with_them} but ran {decision.ratio:.2f}x FP32-S's time per forward: FP32-S"
            return Wider(record, decision=decision)
        saved = (weights["float"] - weights["weight-only"]) / (1 << 20)
        if _faster(decision):
            why = f"{with_them} and ran faster here ({decision.ratio:.2f}x FP32-S's time per forward)"
        elif saved > 0:
            why = f"{with_them}, {_as_fast(decision)} and {saved:.1f} MiB smaller"
        else:
            record["why"] = f"{with_them}, {_as_fast(decision)}, and is no smaller: FP32-S"
            return Wider(record, decision=decision)
        say(f"fallback form: {why}")
        return Wider(record | {"why": why}, model, added, metrics, checks, decision)
    record["why"] = f"weight-only missed the budget with up to {len(extra)} more layer(s) too: FP32-S"
    return Wider(record)


def _faster(decision: Decision) -> bool:
    """Weight-only surely faster than float by more than FORM_MARGIN: a speed win."""
    return decision.verdict == FASTER and (decision.ratio or 1.0) < 1 - FORM_MARGIN


def _as_fast(decision: Decision) -> str:
    """Why two forms tie: the timing cannot tell them apart, or weight-only wins by under the margin."""
    if not decision.sure:
        return f"as fast within noise ({decision.why()})"
    return f"as fast within {FORM_MARGIN:.0%} (weight-only {decision.ratio:.2f}x FP32's time per forward)"


def form_record(
    decision: Decision,
    wo_model: Path,
    outcome: BudgetOutcome,
    run: QuantizeRun,
    measure: Callable[[Path], dict[str, Any]],
    runtime: str = "ort",
    sizes: Mapping[str, int] | None = None,
    wider: Callable[[], Wider] | None = None,
) -> dict[str, Any]:
    """The ``fallback_form`` record of ``decision`` (weight-only against float per forward, on
    ``runtime``): chosen, forward_ms, measured_on, verdict, timing, weight_bytes (``sizes``, where
    given), why, budget and checks (weight-only's verdict, where it was measured); and ``model``
    (= ``wo_model``) where weight-only is chosen, its held-out metrics then in ``outcome``.
    ``measure``: the held-out decode of a candidate (``run.judge`` reads it); ``run.warn``: the one
    warning where a timing could not tell. ``wider``: where weight-only was chosen on speed or size
    but missed the budget, weight-only with more layers (``widen``): its record under ``wider``;
    where it kept one, that model, and ``outcome`` gets its extra fallbacks (``outcome.ranking``'s
    scores), INT8 nodes and metrics."""
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
    faster = _faster(decision)
    # As fast: the timing cannot tell them apart, or weight-only wins by less than the margin.
    # Then the smaller form is worth having (file and session memory), where the budget holds.
    as_fast = _as_fast(decision)
    saved = None if sizes is None else (sizes["float"] - sizes["weight-only"]) / (1 << 20)
    smaller = "smaller" if saved is None else f"{saved:.1f} MiB smaller"
    wide: Wider | None = None
    if not faster and saved is not None and saved <= 0:  # nothing to gain: the more accurate form
        doc["why"] = f"{as_fast}, and weight-only is no smaller: FP32, the more accurate form"
        kept = "kept FP32 fallbacks (weight-only is no smaller)"
    else:
        metrics = measure(wo_model)
        passed, checks = run.judge(metrics)
        doc |= {"budget": "met" if passed else "missed", "checks": checks}
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
            missed = (
                "weight-only fallbacks ran faster here but missed the budget"
                if faster
                else f"{as_fast}, but weight-only missed the budget"
            )
            wide = wider() if wider is not None else None
            kept = _missed(doc, missed, outcome, wide)
    if not decision.sure:  # the timing could not tell: said once, with what decided instead
        _warn_unsure(run, decision, "weight-only", kept)
    if wide is not None and wide.decision is not None and not wide.decision.sure:
        _warn_unsure(run, wide.decision, f"weight-only with {len(wide.record['tried'][-1]['extra'])} more", kept)
    return doc


def _missed(doc: dict[str, Any], missed: str, outcome: BudgetOutcome, wide: Wider | None) -> str:
    """``doc`` where weight-only with S missed the budget (``missed``: why it was tried): FP32-S,
    or the weight-only set ``wide`` kept (``outcome`` then gets its fallbacks). Returns what was
    kept, for the warning."""
    if wide is None:
        doc["why"] = f"{missed}: FP32, the more accurate form"
        return "kept FP32 fallbacks (weight-only missed the budget)"
    doc |= {"wider": wide.record, "why": f"{missed}; {wide.record['why']}"}
    if wide.model is None:
        return "kept FP32 fallbacks (weight-only missed the budget or was not worth it with more layers)"
    doc |= {"chosen": "weight-only", "model": wide.model}
    _add_fallbacks(outcome, wide)
    return f"kept weight-only fallbacks with {len(wide.extra)} more (budget met)"


def _warn_unsure(run: QuantizeRun, decision: Decision, what: str, kept: str) -> None:
    """The one warning where a form's timing could not tell, with what decided instead."""
    shown = "not measured against" if decision.speedup is None else f"{decision.speedup:.2f}x"
    run.warn(
        f"fallback form: {what} ran {shown} FP32 fallbacks per forward, within noise "
        f"after {decision.rounds} rounds ({decision.why()}); {kept}"
    )


def _add_fallbacks(outcome: BudgetOutcome, wide: Wider) -> None:
    """``outcome`` with ``wide``'s extra layers as budget fallbacks after the search's own (named
    and scored as the search names them), their INT8 nodes gone, and ``wide``'s metrics."""
    have = len(outcome.fallback)
    for i, (name, label) in enumerate(zip(wide.extra, wide.record["tried"][-1]["labels"], strict=True)):
        score = outcome.ranking.get(name, {})
        why = (
            f"budget fallback #{have + i + 1}: {ranked_why(score)}; added by the fallback form "
            "(weight-only with it holds the budget)"
        )
        outcome.fallback.append({"node": name, "label": label, "reason": why, **dict(score)})
    outcome.quantized = [n for n in outcome.quantized if n not in wide.extra]
    outcome.next_up = [n for n in outcome.next_up if n not in wide.extra]
    outcome.metrics, outcome.checks = wide.metrics or {}, wide.checks or []


def choose_form(profile: Any, model: Path, outcome: BudgetOutcome) -> dict[str, Any]:
    """Time this host's forward with the fallbacks in FP32 (``model``) and weight-only, and return
    the ``fallback_form`` record of ``form_record``: weight-only (its model under ``model``) unless
    it is surely slower or misses the budget; where it misses, weight-only with the search's next
    ranked layers too (``widen``), timed against ``model``. Not timed where neither form can
    matter (``not_worth_timing``). ``profile``: the run's ``cpu.fallback.FallbackProfile``."""
    run = profile.run
    wo_model = profile.build(outcome.quantized, weight_only_fallback=True)  # first graphs timed: buckets run alike
    sizes = form_sizes(model, wo_model)
    total = run.plan.matmul_flops(ops=WEIGHTED_OPS)
    fallbacks = [f["node"] for f in outcome.fallback]
    if why := not_worth_timing(run.plan.matmul_flops(fallbacks, ops=WEIGHTED_OPS) / total if total else None, sizes):
        run.say(f"fallback form: {why}")
        return untimed_record(why, sizes)
    feed = run.traj.feeds[len(run.traj.feeds) // 2]

    def timed(candidate: Path) -> Decision:
        # Timed on the budget runtime, as it is decoded: OpenVINO runs weight-only layers as int8
        # kernels with dynamically quantized activations (faster than f32 there; on ORT, slower).
        # No spin between runs: TIMED_SPIN (quantize/speed.py).
        with profile.budget_runtime(model, spin=False) as fp, profile.budget_runtime(candidate, spin=False) as wo:
            return time_forms(fp, wo, feed, run.say)

    extra = next_fallbacks(outcome.next_up, len(outcome.fallback), run.cfg.max_fallback)

    def wider() -> Wider:
        labels = {n.name: n.label for n in run.plan.nodes}
        return widen(
            extra,
            outcome.quantized,
            lambda nodes: profile.build(nodes, weight_only_fallback=True),
            profile.measure,
            run.judge,
            timed,
            lambda candidate: form_sizes(model, candidate),
            run.say,
            labels,
        )

    return form_record(
        timed(wo_model), wo_model, outcome, run, profile.measure, run.cfg.runtime, sizes, wider if extra else None
    )
