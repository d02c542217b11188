"""INT8 against FP32 per decode on this host, the last step of quantize: interleaved decodes of
one graph batch (``probes.speed.decide``: timed again while the timings cannot tell), recorded with
how they were measured (samples, spread, load, CPU class) for ``build --precision auto``."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from edgekit.host import HostFacts
from edgekit.probes.speed import SLOWER, Decision, HostProbe, decide
from edgekit.quantize.budget import decode_eval_set
from edgekit.quantize.context import QuantizeRun
from edgekit.quantize.decodes import SpeedPart, speed_part, timed_share, warm_up
from edgekit.quantize.hooks import ProfileHooks, SearchResult
from edgekit.quantize.plan import Eta, counting
from edgekit.runtimes.ort import OrtOptions, OrtRuntime

# Interleaved whole decodes of one graph batch when timing INT8 against FP32 on this host.
SPEED_ROUNDS = 5


def run_speed_part(run: QuantizeRun) -> SpeedPart | None:
    """What the speed timing will decode (``decodes.speed_part``), by the first decode's clock."""
    cfg = run.cfg
    return speed_part(run.bundle, cfg.decode, run.decode_s, bucketed=cfg.step_buckets is not None)


# TIMED_SPIN: sessions timed side by side spin inside their runs only. ORT's threads otherwise
# keep spinning for tens of ms after each run, and interleaved with another session that spin takes
# the cores the other one is using. Measured (benchmarks/step_buckets.py, AVX2 EPYC, 2 threads, per
# decode): an INT8 session right after a spinning FP32 one 105 ms, the same INT8 model after a
# non-spinning one 71 ms (flow demo; masked 117 vs 85): the contention, not INT8, made INT8 look
# slower than FP32. Spinning inside runs keeps each run as fast as a deployment's (threads that
# never spin pay a wake-up per parallel section: 1.08x per decode), and stops when the run returns.
def decode_speed(run: QuantizeRun, profile: ProfileHooks, result: SearchResult) -> dict[str, Any]:
    """INT8 against FP32 per decode on this host: whole decodes of one graph batch on the budget's
    runtime (INT8) and ORT (FP32), interleaved, median, timed again while the timings cannot tell
    (``probes.speed.decide``); one warning line where INT8 is slower or it stays within noise.
    Not measured for an emulated device (its time is the emulator's, not the device's)."""
    cfg = run.cfg
    host = HostFacts.detect()
    if cfg.entry.emulated:
        return {"measured": False, "reason": cfg.entry.emulated_why}
    part = run_speed_part(run)
    options = dict(cfg.decode) if part is None else {**cfg.decode, part.option: part.timed}
    run.say(
        "time INT8 against FP32 per decode on this host"
        + ("" if part is None else f" ({part.timed} of {part.of} {part.unit}, scaled: {part.why()})")
    )
    batch = run.bundle.inputs[next(iter(run.bundle.inputs))].shape[0]
    rows = None if run.eval_rows is None else {k: v[:batch] for k, v in run.eval_rows.items()}
    fp32_opts = OrtOptions(intra_op_threads=cfg.threads, spin_between_runs=False)
    with (
        run.timed("speed_s"),
        profile.open_candidate(result.model, spin=False) as int8_rt,
        OrtRuntime(run.fp32_path, fp32_opts) as fp32_rt,
    ):

        def decode(rt: Any) -> Callable[[], Any]:
            return lambda: decode_eval_set(run.bundle, rt, batch, cfg.eval_seed, options, rows=rows)

        # One recorded call warms each fresh session (its first run sets up its buffers; every
        # later call of a decode runs warm alike), where a whole decode each as the warm-up cost
        # Sana-600M 19 s. Without a recorded call, a whole decode each.
        warm = run.traj.feeds[0] if run.traj.feeds else None
        if warm is not None:
            warm_up([fp32_rt, int8_rt], warm)
        eta = Eta("time INT8 against FP32: decode", 2 * (SPEED_ROUNDS + (warm is None)), run.say)
        decision = decide(
            counting({"fp32": decode(fp32_rt), "int8": decode(int8_rt)}, eta),
            SPEED_ROUNDS,
            pair=lambda timings: ("int8", "fp32"),
            warmup=int(warm is None),
            probe=HostProbe(cpu_class=host.isa_class),
            early=True,  # whole decodes: a clear difference after 3 rounds needs no more
        )
    doc, warning = speed_record(decision, cfg.runtime, host, batch, len(result.fallback), part)
    if warning:
        run.warn(warning)
    return doc


def speed_record(
    decision: Decision,
    runtime: str,
    host: HostFacts,
    rows: int,
    fallbacks: int,
    part: SpeedPart | None = None,
) -> tuple[dict[str, Any], str | None]:
    """The ``speed`` summary of INT8 (``decision.a``) against FP32 per decode, with how it was
    measured (``timing``: samples, spread, load, CPU class), and the one warning line it calls for:
    INT8 slower, or the timings could not tell after re-measuring (``build --precision auto``
    then ships FP32, the safe choice). ``part``: the share of a decode timed where the decodes timed
    were shorter (``decodes.speed_part``): the ms per decode are scaled to a whole one."""
    int8, fp32 = decision.timings["int8"], decision.timings["fp32"]
    scale = 1 / timed_share(part)
    doc = {
        "measured": True,
        "runtime": runtime,
        "fp32_reference": "ort",
        "isa": host.isa_class,
        "cpu": host.cpu,
        "rows_per_decode": rows,
        "fp32_ms_per_decode": fp32.median_ms * scale,
        "int8_ms_per_decode": int8.median_ms * scale,
        "int8_speedup": decision.speedup,
        "verdict": decision.verdict,
        "unsure": list(decision.unsure),
        "timing": decision.to_json(),
    }
    if part is not None:  # "timed_tokens" (AR) or "timed_steps" (masked, flow)
        doc[f"timed_{part.unit}"] = {
            part.unit: part.timed,
            "of": part.of,
            "scaled": f"ms per decode = the {part.timed}-{part.unit[:-1]} decodes' x {scale:g} ({part.why()})",
        }
    speedup = decision.speedup
    where = f"on this host ({host.isa_class}, {runtime})"
    if not decision.sure:
        shown = f"{speedup:.2f}x" if speedup is not None else "not measured against"
        return doc, (
            f"INT8 ran {shown} FP32 per decode {where}, within noise after {decision.rounds} rounds "
            f"({decision.why()}): `edgekit build --precision auto` ships FP32; re-run quantize on a quieter host"
        )
    if decision.verdict == SLOWER:
        return doc, (
            f"INT8 is {speedup:.2f}x FP32 per decode {where}: slower; `edgekit build BUNDLE --precision auto` "
            f"ships FP32 here, or fewer fallbacks ({fallbacks} now: relax --budget) make INT8 pay"
        )
    return doc, None
