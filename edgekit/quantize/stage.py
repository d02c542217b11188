"""The quantize stage: one pipeline for every profile; a profile is its registry entry
(``registry.QuantizeProfile``: settings, the CPU scheme of ``arithmetic`` where it has
cpu_arithmetic, budgets, flags) and the hooks it makes for a run (``registry.ProfileHooks``):

    check options -> conditions (--cond, --cond-data rows, or the bundle's seeded rule) ->
    prepare the graph (hook) -> FP32 decode: record calibration trajectories, decode the held-out
    set -> calibrate (hook) -> search: quantize, decode the held-out set in INT8, fall back or
    promote until the budget holds (hook) -> INT8 vs FP32 per decode on this host -> summary ->
    artifact + manifest

The built-in entries (``profiles.py``): cpu and trt run ``cpu.fallback.FallbackProfile`` (ORT QDQ
on weighted ops, layers fall back to float); qnn runs ``qnn.profile.QnnProfile`` (every op QDQ,
sensitive tensors promoted to 16 bit, budget on the HTP).
"""

from __future__ import annotations

import contextlib
import dataclasses
import time
from collections.abc import Callable, Mapping
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any

from edgekit._lock import owned_tempdir, writes_bundle
from edgekit._sidefiles import model_bytes
from edgekit.bundle import Bundle
from edgekit.decode.dispatch import decode_config
from edgekit.probes.memory import give_back_freed
from edgekit.quantize.budget import decode_eval_set
from edgekit.quantize.calibrate import calibration_reader, record_trajectories
from edgekit.quantize.calibrator import histogram_forwards
from edgekit.quantize.conditions import condition_sets
from edgekit.quantize.config import QuantizeConfig
from edgekit.quantize.context import QuantizeRun
from edgekit.quantize.decodes import timed_share, tokens_per_row
from edgekit.quantize.hooks import PlanExtras, ProfileHooks
from edgekit.quantize.memory import activation_bytes, memory_record, peak_rss_bytes
from edgekit.quantize.plan import Eta, Plan
from edgekit.quantize.record import record_result, replaced_by_quantize
from edgekit.quantize.result import summary
from edgekit.quantize.scratch import calls_per_decode, quantize_needs
from edgekit.quantize.speed import SPEED_ROUNDS, decode_speed, run_speed_part
from edgekit.resources import preflight
from edgekit.runtimes.base import Runtime
from edgekit.runtimes.memo import MemoRuntime
from edgekit.runtimes.onnx_file import load_onnx
from edgekit.runtimes.ort import OrtOptions, OrtRuntime


@writes_bundle("quantize")
def quantize_bundle(
    path: Path | str,
    cfg: QuantizeConfig | None = None,
    progress: Callable[[str], None] | None = None,
    warn: Callable[[str], None] | None = None,
) -> dict[str, Any]:
    """Quantize the bundle's fp32 graph with ``cfg.profile``'s hooks, within the accuracy budget,
    write the ``int8`` artifact and record the summary in ``manifest["quantization"]``; returns it
    (``passed`` says whether the budget holds: the artifact is written either way)."""
    say = progress or (lambda message: None)
    cfg = (cfg or QuantizeConfig()).resolved()
    # The int8 graphs are what this run replaces: a missing or stale one must not stop it (the
    # error's own hint is to re-run quantize). Everything else, fp32 first, is verified.
    bundle = Bundle.load(path, verify=False)
    bundle.verify(skip=replaced_by_quantize)
    budget = cfg.budget_for(bundle.kind)
    decode_config(bundle.kind, bundle.decode_defaults, cfg.decode)  # bad options fail here
    cfg, samples = cfg.with_samples(bundle.kind, tokens_per_row(bundle, cfg.decode), bundle.batch)
    if samples:
        say(samples)
    load_onnx(bundle.path_of("fp32"), "artifact 'fp32'")  # a corrupt graph is one line, not a DecodeError 40 s in
    calib_rows, eval_rows, cond_doc = condition_sets(bundle, cfg)
    preflight("quantize", quantize_needs(bundle, cfg), warn or say)
    peak_before = peak_rss_bytes()
    with owned_tempdir("edgekit-quantize-") as tmp:  # a killed run's dir is swept by the next
        run = QuantizeRun(bundle, cfg, tmp, budget, say, warn or say, calib_rows, eval_rows, cond_doc)
        profile = cfg.entry.hooks(run)
        profile.check()
        # Release points: each step's sessions are closed before the next opens its own, and what
        # they freed is handed back (memory.give_back_freed), so no step's peak sits on the last's.
        with run.timed("prepare_s"):
            profile.prepare()
        give_back_freed()
        with fp32_answers(run) as run.fp32_rt:
            record_fp32(run, plan_extras(profile), calibration_taps(profile))  # FP32's session closes at its end
            give_back_freed()
            with run.timed("calibrate_s"):
                profile.calibrate()
            give_back_freed()
            with run.timed("quantize_and_budget_s"):
                result = profile.search()
            run.fp32_rt.release()
            give_back_freed()
            # What keeping the answers saved: FP32 calls answered from the reference decode, and the
            # candidates' calls asked twice (the budget's decode and check's gate) run once.
            result.extras["answers"] = {
                "fp32_calls_run": run.fp32_rt.misses,
                "fp32_calls_answered": run.fp32_rt.hits,
                "candidates": run.candidates,
                "candidate_calls_run": run.calls_run,
                "candidate_calls_answered": run.calls_answered,
            }
        result.extras["speed"] = decode_speed(run, profile, result)
        give_back_freed()
        if not result.int8_nodes:
            run.warn(
                f"no layer of {bundle.name} stayed INT8 within the "
                "budget: the int8 artifact computes in float and gains "
                "nothing over fp32; try more calibration (--calib-samples "
                f"{2 * run.n_calib}), --method percentile, "
                "or a looser --budget"
            )
        doc = summary(run, result)
        doc["plan"] = run.schedule.to_json(run.decode_s) if run.schedule is not None else None
        doc["memory"] = memory_record(peak_before, model_bytes(run.fp32_path), activation_bytes(run.fp32_path))
        record_result(
            bundle,
            result.model,
            result.cache or tmp / "no-calibration-cache.json",
            result.tensors,
            tmp,
            run.cfg,  # --method auto may have chosen other ranges (quantize/cpu/method.py)
            doc,
            run.clock,
            run.start,
            eval_rows,
            bucket_models=result.bucket_models,
        )
    q = bundle.quantization
    return (q.as_recorded if q is not None else {}) | {"bundle": str(bundle.root)}


def fp32_answers(run: QuantizeRun) -> MemoRuntime:
    """The FP32 network as every budget measurement asks it: each INT8 candidate is judged on the
    same held-out decodes, and the FP32 side of each (the lock-step trajectory, check's shadowed
    reference) asks the questions the reference decode asked, so they are answered from what it
    kept (``runtimes.memo``), in memory and then in the run's scratch folder. The session opens
    on a miss and is released once the reference is kept: a model over 2 GB is not held in
    memory beside the quantizer and the candidates."""
    cfg = run.cfg
    return MemoRuntime(
        opener=lambda: OrtRuntime(run.fp32_path, OrtOptions(intra_op_threads=cfg.threads)),
        inputs=run.bundle.inputs,
        outputs=run.bundle.outputs,
        folder=run.tmp / "fp32-answers",
        name="fp32",
    )


def plan_extras(profile: ProfileHooks) -> PlanExtras:
    """What the profile's search may add to the plan; none for hooks written before
    ``ProfileHooks.plan_extras`` existed (a registered profile keeps working)."""
    return profile.plan_extras() if hasattr(profile, "plan_extras") else PlanExtras()


def record_fp32(run: QuantizeRun, extras: PlanExtras, taps: AbstractContextManager[Any] | None = None) -> None:
    """FP32 decodes: every network call of the calibration decodes (on the session itself: those
    questions are never asked again), and the held-out reference (kept by ``run.fp32_rt``). The
    first decode's time turns the run's plan into minutes (``plan.Plan``), said before the rest;
    ``extras``: what the profile's search may add to it (``ProfileHooks.plan_extras``). ``taps``
    (``calibration_taps``): the calibration decodes run on that runtime instead, which keeps the
    minmax ranges as they run (``ranges.LiveRanges``: ``run.live_ranges`` where it saw every
    recorded call)."""
    cfg = run.cfg
    batch = run.bundle.batch
    run.schedule = schedule = Plan(
        calibration=-(-run.n_calib // batch),
        heldout=-(-run.n_eval // batch),
        per_candidate=2 * -(-run.n_eval // batch),
        speed=0 if cfg.entry.emulated else 2 * SPEED_ROUNDS * timed_share(run_speed_part(run)),
        emulated=cfg.entry.emulated_why if cfg.entry.emulated else None,
        form_extra=extras.form,
        method_alternative=extras.method_alternative,
        histogram_forwards=(
            histogram_forwards(
                run.prepared,
                cfg.op_types,
                quantized_outputs=cfg.settings.quantized_outputs,
                calls=-(-run.n_calib // batch)
                * calls_per_decode(run.bundle.kind, run.bundle.meta, run.bundle.decode_defaults, cfg.decode),
            )
            if extras.method_alternative and extras.percentile_pass
            else float(extras.percentile_pass)  # 0: cut from what the calibration decodes keep
        ),
    )
    run.say(f"FP32 decode: {run.n_calib} calibration + {run.n_eval} held-out sequences ({run.cond_doc['source']})")
    # The session opens before the clock starts: the plan prices a decode, and loading a 2 GiB
    # model's weights (15 s of aMUSEd-256's first 35 s) is paid once, not once per decode.
    with taps if taps is not None else contextlib.nullcontext(None) as live:
        _calibration_decodes(run, schedule, live if live is not None else run.fp32_rt.runtime())
        if live is not None and run.traj.every == 1 and live.calls_run == len(run.traj.feeds):
            run.live_ranges = live.ranges()
    give_back_freed()  # the tapped graph's weights, before the FP32 session's
    eta, starts = Eta("held-out FP32 decode", schedule.heldout, run.say), []

    def each(i: int) -> None:  # each decode's time too: a steadier unit than 3 timed ones (record.fp32_decodes)
        starts.append(time.perf_counter())
        eta(i)

    with run.timed("fp32_decode_s"):
        run.reference = decode_eval_set(
            run.bundle, run.fp32_rt, run.n_eval, cfg.eval_seed, cfg.decode, rows=run.eval_rows, each_batch=each
        )
    run.heldout_s = [end - start for start, end in zip(starts, [*starts[1:], time.perf_counter()])]
    run.fp32_rt.release()
    run.reader = calibration_reader(run.traj.feeds, run.bundle.inputs)


def calibration_taps(profile: ProfileHooks) -> AbstractContextManager[Any] | None:
    """The runtime the profile's calibration decodes run on (``ProfileHooks.calibration_runtime``,
    optional: None, the FP32 model's own session)."""
    return profile.calibration_runtime() if hasattr(profile, "calibration_runtime") else None


def _calibration_decodes(run: QuantizeRun, schedule: Plan, fp32: Runtime) -> None:
    """The calibration decodes on ``fp32``, every call recorded (``run.traj``); the first one's
    time gives the plan its clock."""
    cfg = run.cfg
    start = time.perf_counter()
    calib = Eta("FP32 calibration decode", schedule.calibration, run.say)

    def each(i: int) -> None:
        if i == 1 and run.decode_s is None:  # the first decode is done: now the plan has a clock
            _clock(run, time.perf_counter() - start)
        calib(i)

    with run.timed("fp32_decode_s"):
        run.traj = record_trajectories(
            run.bundle,
            fp32,
            run.n_calib,
            cfg.calib_seed,
            cfg.decode,
            rows=run.calib_rows,
            each_batch=each,
            spill=run.tmp / "recorded-calls",  # the calls wait on disk: an AR step's hold its KV cache
        )
        if run.decode_s is None:  # one decode only
            _clock(run, time.perf_counter() - start)


def _clock(run: QuantizeRun, decode_s: float) -> None:
    """The first FP32 decode took ``decode_s``: the plan gets its clock (and the speed timing's
    share, which may now be part of a decode) and is said."""
    run.decode_s = decode_s
    if run.schedule is not None and run.schedule.speed:
        run.schedule = dataclasses.replace(run.schedule, speed=2 * SPEED_ROUNDS * timed_share(run_speed_part(run)))
    if run.schedule is not None:
        run.say(run.schedule.describe(decode_s))


# The flow decoder's activation ranges follow the ODE time t: scales per step range keep more of it
# INT8 (flow demo at batch 2, AVX2 host: 6 fallbacks and 55 % of weighted FLOPs INT8 with one scale,
# 5 and 68 % with buckets; benchmarks/step_buckets.py). The masked model's decisions did not move.
DEMO_STEP_BUCKETS: dict[str, int | str] = {"flow": "auto"}


def demo_quantize(
    bundles: Mapping[str, Bundle], n: int = 16, seed: int = 0, progress: Callable[[str], None] | None = None
) -> dict[str, Any]:
    """The demo's quantize stage: ``quantize_bundle`` on each demo bundle (cpu profile, default
    budgets, ``n`` held-out sequences from ``seed``) and the FP32-vs-INT8 numbers side by side:
    {kind: {"passed", "measured", "quality_fp32", "quality_int8", "sizes", "fallback", ...}}."""
    say = progress or (lambda message: None)
    out: dict[str, Any] = {}
    for kind, bundle in bundles.items():
        buckets = DEMO_STEP_BUCKETS.get(kind)
        say(f"quantize {bundle.name} (INT8, cpu profile{', step buckets ' + str(buckets) if buckets else ''})")
        t0 = time.perf_counter()
        s = quantize_bundle(
            bundle.root, QuantizeConfig(eval_samples=n, eval_seed=seed, step_buckets=buckets), progress=None
        )
        measured = s["measured"]
        out[kind] = {
            "bundle": s["bundle"],
            "passed": s["passed"],
            "budget": s["budget"]["checks"],
            "measured": {k: v for k, v in measured.items() if not k.startswith("quality")},
            "quality_fp32": measured.get("quality_fp32"),
            "quality_int8": measured.get("quality_int8"),
            "sizes": s["sizes"],
            "int8_flop_share": s["int8_flop_share"],
            "fallback": [f["label"] for f in s["fallback"]],
            "step_buckets": (s.get("step_buckets") or {}).get("n", 1),
            "speed": s.get("speed"),
            "arithmetic": s.get("arithmetic"),
            "seconds": time.perf_counter() - t0,
        }
    return out
