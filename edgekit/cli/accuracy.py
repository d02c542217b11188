"""The INT8 commands: `quantize` and the CI accuracy gate `check`."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Literal, Optional

import typer

from edgekit._lock import LOCK_WAIT
from edgekit.cli.app import (
    BundleArg,
    CondDataOpt,
    CondOpt,
    JsonOpt,
    SeedOpt,
    command,
    configure_logging,
    parse_cond,
    WaitOpt,
)
from edgekit.output import Output


@command(
    epilog="Examples:\n\n  edgekit quantize bundles/masked\n\n"
    "  edgekit quantize bundles/flow --profile trt --method percentile --calib-samples 16 --decode guidance=2\n\n"
    "  edgekit quantize bundles/masked --exclude head --exclude blocks.3.mlp --budget lockstep_token_agreement=0.98 --json\n\n"
    "  edgekit quantize bundles/masked --target intel-cpu   # budget measured on OpenVINO, the target's runtime\n\n"
    "  edgekit quantize bundles/masked --profile qnn --eval-samples 4   (Hexagon NPU: full integer, budget on the HTP backend)\n\n"
    "  edgekit quantize bundles/mine --cond-data conditions.npz      (real conditions: first rows calibrate, last rows held out)"
)
def quantize(
    bundle: BundleArg,
    profile: Annotated[Literal["cpu", "trt", "qnn"], typer.Option(help="cpu: fastest on ONNX Runtime CPU (u8 activations, s8 per-channel weights, int32 bias) | trt: TensorRT QDQ rules (int8 symmetric, zero points 0, float bias) | qnn: Qualcomm Hexagon NPU, every op quantized, sensitive activations promoted to 16 bit, budget measured on the HTP backend (needs edgekit[qnn]).")] = "cpu",
    method: Annotated[Literal["minmax", "entropy", "percentile"], typer.Option(help="Calibration method.")] = "minmax",
    calib_samples: Annotated[int, typer.Option("--calib-samples", min=1, help="Calibration sequences decoded in FP32; every network call of their loops is recorded.")] = 8,
    eval_samples: Annotated[int, typer.Option("--eval-samples", min=1, help="Held-out sequences decoded in FP32 and INT8 to check the budget.")] = 16,
    exclude: Annotated[Optional[list[str]], typer.Option("--exclude", help="Keep in float: a node name, an op type (LayerNormalization) or a module path (blocks.0.mlp); repeatable.")] = None,
    budget: Annotated[Optional[list[str]], typer.Option("--budget", help="KEY=VALUE overriding the model kind's default: lockstep_token_agreement (decisions made like FP32 on its own step inputs; token_agreement is accepted for it), top1_agreement, final_token_agreement, event_accuracy_drop (masked/ar), snr_db, gt_snr_drop_db (flow); repeatable.")] = None,
    decode: Annotated[Optional[list[str]], typer.Option("--decode", help="KEY=VALUE decode option for calibration and evaluation, as `edgekit run` takes them (guidance=2 calibrates the CFG rows too); repeatable.")] = None,
    fallback: Annotated[bool, typer.Option("--fallback/--no-fallback", help="Move the most sensitive nodes back to float until the budget holds.")] = True,
    preprocess: Annotated[bool, typer.Option("--preprocess/--no-preprocess", help="Run onnxruntime's quant_pre_process first (falls back to none, with a warning, when it fails on the graph).")] = True,
    cond: CondOpt = None,
    cond_data: CondDataOpt = None,
    seed: SeedOpt = 0,
    threads: Annotated[int, typer.Option(min=0, help="ONNX Runtime threads for calibration and evaluation (0 = ORT default).")] = 0,
    wait: WaitOpt = False,
    runtime: Annotated[Optional[str], typer.Option("--runtime", help="Runtime the INT8 model is decoded on for the budget: ort | openvino (default: the --target's, else ort).")] = None,
    target: Annotated[Optional[str], typer.Option("--target", "-t", help="Quantize for this target: its quantization profile, and its runtime measures the budget (intel-cpu: openvino).")] = None,
    json_out: JsonOpt = False,
) -> None:
    """INT8-quantize a bundle (QDQ), calibrated on its FP32 decode loop, within an accuracy budget."""
    configure_logging()
    from edgekit.errors import CheckFailed
    from edgekit.quantize import (
        QuantizeConfig,
        parse_budget,
        parse_decode,
        quantize_bundle,
    )
    from edgekit.quantize.render import print_quantize

    o = Output(json_out)
    if target is not None:
        from edgekit.host import module_available
        from edgekit.targets import load_target

        t = load_target(target)
        profile = t.quantization_profile
        if runtime is None:
            runtime = "openvino" if t.uses_openvino and module_available("openvino") else "ort"
    cfg = QuantizeConfig(
        runtime=runtime or "ort", profile=profile, method=method, calib_samples=calib_samples, eval_samples=eval_samples, eval_seed=seed,
        exclude=tuple(exclude or ()), budget=parse_budget(budget), decode=parse_decode(decode), fallback=fallback, threads=threads,
        preprocess=preprocess, cond=parse_cond(cond), cond_data=None if cond_data is None else str(cond_data), target=target,
    )
    LOCK_WAIT.set(wait)
    s = quantize_bundle(bundle, cfg, progress=lambda msg: o.info(f"· {msg}"), warn=o.warn)
    o.document(s)
    print_quantize(o, s)
    if not s["passed"]:
        failed = ", ".join(f"{c['key']} {c['value']:.4g} (limit {c['op']} {c['limit']:g})" for c in s["budget"]["checks"] if c["passed"] is False)
        gates = s["measured"].get("check_failed") or []
        if gates:
            failed += f" (check would fail on {', '.join(gates)})"
        raise CheckFailed(
            f"INT8 model of {s['model']} misses the accuracy budget: {failed}; it was written and recorded as failed",
            hint=f"relax it (--budget KEY=VALUE), keep layers float (--exclude), or try --method percentile / --calib-samples {2 * calib_samples}",
        )


@command(
    epilog="Exit codes: 0 pass · 4 a metric failed · 1 error.\n\n"
    "Examples:\n\n  edgekit check bundles/masked                     (ort:int8 vs ort:fp32, default thresholds)\n\n"
    "  edgekit check bundles/flow --reference torch --candidate ort:fp32 --n 32\n\n"
    "  edgekit check bundles/masked --candidate openvino:int8 --reference ort:fp32\n\n"
    "  edgekit check bundles/masked --thresholds ci/thresholds.toml --baseline ci/masked.json --junit report.xml\n\n"
    "  edgekit check bundles/masked --save-baseline ci/masked.json\n\n"
    "  edgekit check bundles/mine --metric mypkg.metrics:score --cond speaker=0.5\n\n"
    "  edgekit check bundles/masked --candidate qnn:int8 --reference ort:fp32 --target snapdragon-8-gen-3\n\n"
    "  edgekit check bundles/mine --cond-data conditions.npz       (its held-out rows, as quantize split them)"
)
def check(
    bundle: BundleArg,
    reference: Annotated[str, typer.Option("--reference", help="Known-good variant: runtime:precision (ort:fp32, torch:fp32, trt:fp16), a precision (on --runtime) or a runtime (fp32).")] = "fp32",
    candidate: Annotated[str, typer.Option("--candidate", help="Variant under test, same forms; int8 = the model `edgekit quantize` made.")] = "int8",
    runtime: Annotated[str, typer.Option("--runtime", help="Runtime of a variant given as a bare precision: ort | torch | trt | openvino | qnn.")] = "ort",
    n: Annotated[Optional[int], typer.Option("--n", min=1, help="Evaluation conditions (graph batch i decodes with seed + i); default: the rows `edgekit quantize` gated on, else 16.")] = None,
    seed: Annotated[Optional[int], typer.Option("--seed", help="Seed of all decode noise; default: the seed `edgekit quantize` gated with, else 0.")] = None,
    greedy: Annotated[bool, typer.Option("--greedy", help="masked/ar: temperature 0 (argmax trajectories) instead of the bundle's sampling.")] = False,
    thresholds: Annotated[Optional[Path], typer.Option("--thresholds", help="TOML file overriding the per-kind default thresholds.")] = None,
    baseline: Annotated[Optional[Path], typer.Option("--baseline", help="Also fail a metric that regressed beyond its tolerance vs this baseline file.")] = None,
    save_baseline: Annotated[Optional[Path], typer.Option("--save-baseline", help="Write this run's metrics as a baseline file (JSON).")] = None,
    junit: Annotated[Optional[Path], typer.Option("--junit", help="Write JUnit XML for CI: one test case per metric.")] = None,
    metric: Annotated[Optional[str], typer.Option("--metric", help="Quality metric module:function(output, cond) -> {name: float}, higher = better. RUNS THAT CODE.")] = None,
    cond: CondOpt = None,
    cond_data: CondDataOpt = None,
    threads: Annotated[int, typer.Option(min=0, help="Runtime threads (0 = runtime default).")] = 0,
    target: Annotated[Optional[str], typer.Option("--target", "-t", help="A variant on this target's runtime loads the engine built for it (qnn:int8 + a Snapdragon target: its precompiled context).")] = None,
    json_out: JsonOpt = False,
) -> None:
    """Compare two variants of a bundle (default INT8 vs FP32) on whole decodes under identical noise; exit 4 when a metric fails."""
    configure_logging()
    from edgekit.check import CheckConfig, check_bundle
    from edgekit.check.render import print_check
    from edgekit.errors import CheckFailed

    o = Output(json_out)
    raw_cond = parse_cond(cond)
    cfg = CheckConfig(
        reference=reference, candidate=candidate, runtime=runtime, n=n, seed=seed, greedy=greedy, cond=raw_cond, cond_data=cond_data,
        thresholds=thresholds, baseline=baseline, save_baseline=save_baseline, junit=junit, metric_hook=metric, threads=threads,
        target=target,
    )
    o.info(f"checking {bundle}: {candidate} vs {reference} …")
    doc = check_bundle(bundle, cfg, progress=lambda msg: o.info(f"· {msg}"))
    for w in doc["warnings"]:
        o.warn(w)
    o.document(doc)
    print_check(o, doc)
    if not doc["passed"]:
        failed = ", ".join(doc["failed"])
        raise CheckFailed(
            f"check failed: {failed} ({doc['candidate']} vs {doc['reference']} on {doc['model']})",
            hint="the table shows each value against its threshold; a deliberate change needs a new --save-baseline or --thresholds",
        )
