"""`edgekit quantize`: INT8 within an accuracy budget."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Literal

import typer

import edgekit.cli.options as opt
from edgekit.arithmetic import SCHEMES
from edgekit.cli.app import command, parse_cond
from edgekit.output import Output


@command(
    epilog="Examples:\n\n  edgekit quantize bundles/masked\n\n"
    "  edgekit quantize bundles/flow --profile trt --method percentile --calib-samples 16 --decode guidance=2\n\n"
    "  edgekit quantize bundles/masked --exclude head --exclude blocks.3.mlp --budget "
    "lockstep_token_agreement=0.98 --json\n\n"
    "  edgekit quantize bundles/masked --target intel-cpu   # budget measured on OpenVINO, the target's runtime\n\n"
    "  edgekit quantize bundles/masked --profile qnn --eval-samples 4   "
    "(Hexagon NPU: full integer, budget on the HTP backend)\n\n"
    "  edgekit quantize bundles/mine --cond-data conditions.npz      "
    "(real conditions: first rows calibrate, last rows held out)"
)
def quantize(
    bundle: opt.Bundle,
    profile: Annotated[str, opt.profile_option("How the model is quantized, for which target family")] = "cpu",
    method: Annotated[
        Literal["auto", "minmax", "entropy", "percentile"],
        typer.Option(
            help="Calibration method. auto: minmax, and where its all-INT8 model misses the budget, percentile "
            "ranges judged too; the search goes on with the better (cpu and trt profiles)."
        ),
    ] = "auto",
    calib_samples: Annotated[
        int | None,
        opt.bounded_option(
            "--calib-samples",
            "Calibration sequences decoded in FP32; every network call of their loops is recorded. Default: 8, "
            "fewer (at least 4) where a row holds over 64 tokens.",
        ),
    ] = None,
    eval_samples: Annotated[
        int | None,
        opt.bounded_option(
            "--eval-samples",
            "Held-out sequences decoded in FP32 and INT8 to check the budget. Default: 16, fewer (at least 4) "
            "where a row holds over 64 token decisions (1,024 decisions in all).",
        ),
    ] = None,
    exclude: Annotated[
        list[str] | None,
        opt.repeatable_option(
            "--exclude",
            "Keep in float: a node name (of the FP32 graph or the prepared one), an op type (LayerNormalization) or a "
            "torch module path (blocks.0.mlp: every layer under it)",
        ),
    ] = None,
    budget: Annotated[
        list[str] | None,
        opt.repeatable_option(
            "--budget",
            "KEY=VALUE overriding the model kind's default: lockstep_token_agreement (decisions made like FP32 on its "
            "own step inputs; token_agreement is accepted for it), top1_agreement, final_token_agreement, "
            "event_accuracy_drop (masked/ar), snr_db, gt_snr_drop_db (flow)",
        ),
    ] = None,
    decode: Annotated[
        list[str] | None,
        opt.repeatable_option(
            "--decode",
            "KEY=VALUE decode option for calibration and evaluation, as `edgekit run` takes them (guidance=2 "
            "calibrates the CFG rows too)",
        ),
    ] = None,
    fallback: Annotated[
        bool,
        typer.Option(
            "--fallback/--no-fallback", help="Move the most sensitive nodes back to float until the budget holds."
        ),
    ] = True,
    max_fallback: Annotated[
        int | None,
        opt.bounded_option(
            "--max-fallback",
            (
                "At most this many nodes moved back to float (each costs one candidate's held-out INT8 decodes): "
                "bounds the search's time on a large model; the verdict says when the budget still fails. Default: as "
                "many as the budget needs."
            ),
        ),
    ] = None,
    preprocess: Annotated[
        bool,
        typer.Option(
            "--preprocess/--no-preprocess",
            help=(
                "Run onnxruntime's quant_pre_process first (falls back to none, with a warning, when it fails on the "
                "graph)."
            ),
        ),
    ] = True,
    cond: opt.Cond = None,
    cond_data: opt.CondData = None,
    seed: opt.Seed = 0,
    threads: Annotated[
        int, opt.threads_option("ONNX Runtime threads for calibration and evaluation (0 = ORT default).")
    ] = 0,
    wait: opt.Wait = False,
    runtime: Annotated[
        str | None,
        opt.runtime_option(
            "Runtime the INT8 model is decoded on for the budget, one that measures it "
            "(ort, openvino; default: the --target's, else ort)"
        ),
    ] = None,
    target: Annotated[
        str | None,
        opt.target_option(
            "Quantize for this target: its quantization profile and CPU class, and its runtime measures the "
            "budget (intel-cpu: openvino)."
        ),
    ] = None,
    isa: Annotated[
        str,
        opt.isa_option(
            "cpu profile: the CPU class whose int8 arithmetic the model is for", "; default: the --target's"
        ),
    ] = "host",
    scheme: Annotated[
        str,
        typer.Option(
            "--scheme",
            help=(
                "cpu profile: the quantization scheme (auto = the one chosen for the CPU class; "
                f"{' | '.join(SCHEMES)}; see benchmarks/isa_schemes.py)."
            ),
        ),
    ] = "auto",
    step_buckets: Annotated[
        str | None,
        typer.Option(
            "--step-buckets",
            help=(
                "Activation scales per step range of the decode loop (mask share, ODE time t or AR position), weights "
                "shared: N ranges (1-8) with boundaries from the measured range drift, or auto = the fewest that meet "
                "the budget (tried before any fallback or 16-bit promotion)."
            ),
        ),
    ] = None,
    bucket_memory: Annotated[
        float | None,
        typer.Option(
            "--bucket-memory",
            help=(
                "With --step-buckets auto: the most resident memory a bucket count may add over one scale, as a "
                "ratio, measured on the budget runtime (each bucket is one more ORT session or OpenVINO compiled "
                "model); a count past it is not tried; default 1.2, 0 = no bound."
            ),
        ),
    ] = None,
    overrides: Annotated[
        Path | None,
        typer.Option(
            "--overrides",
            help=(
                'JSON file of per-layer decisions to honour ({"schema": "edgekit.quantize-overrides/1", '
                '"overrides": [{"node": NAME, "action": float | weight-only} | {"tensor": NAME, "action": '
                "int16}]}), as `edgekit debug --fix` writes them; NAME as --exclude takes it."
            ),
        ),
    ] = None,
    attention_scores: Annotated[
        Literal["float", "int8"],
        typer.Option(
            "--attention-scores",
            help=(
                "cpu and trt profiles: the attention's QKᵀ in float (default) or in INT8 with symmetric int8 Q and K, "
                "the form OpenVINO's CPU plugin runs as an int8 attention kernel (the budget may still keep it float)."
            ),
        ),
    ] = "float",
    trust_code: opt.TrustCode = False,
    json_out: opt.Json = False,
) -> None:
    """INT8-quantize a bundle (QDQ), calibrated on its FP32 decode loop, within an accuracy budget."""
    from edgekit.decode.dispatch import parse_decode_options
    from edgekit.errors import CheckFailed
    from edgekit.quantize import (
        QuantizeConfig,
        parse_budget,
        quantize_bundle,
    )
    from edgekit.quantize.render import print_quantize

    o = Output(json_out)
    from edgekit.quantize.overrides import load_overrides

    cfg = QuantizeConfig(
        overrides=load_overrides(overrides) if overrides is not None else (),
        step_buckets=step_buckets,
        **({} if bucket_memory is None else {"bucket_memory": bucket_memory}),
        runtime=runtime or "auto",
        profile=profile,
        isa=isa,
        scheme=scheme,
        method=method,
        attention_scores=attention_scores,
        calib_samples=calib_samples,
        eval_samples=eval_samples,
        eval_seed=seed,
        exclude=tuple(exclude or ()),
        budget=parse_budget(budget),
        decode=parse_decode_options(decode),
        fallback=fallback,
        max_fallback=max_fallback,
        threads=threads,
        preprocess=preprocess,
        cond=parse_cond(cond),
        cond_data=None if cond_data is None else str(cond_data),
        target=target,
    )
    s = quantize_bundle(bundle, cfg, progress=o.step, warn=o.warn)
    o.document(s)
    print_quantize(o, s)
    if not s["passed"]:
        failed = ", ".join(
            f"{c['key']} {c['value']:.4g} (limit {c['op']} {c['limit']:g})"
            for c in s["budget"]["checks"]
            if c["passed"] is False
        )
        gates = s["measured"].get("check_failed") or []
        if gates:
            failed += f" (check would fail on {', '.join(gates)})"
        for note in s.get("notes") or []:
            o.warn(note)
        raise CheckFailed(
            f"INT8 model of {s['model']} misses the accuracy budget: {failed}; it was written and recorded as failed",
            hint=(
                "relax it (--budget KEY=VALUE), keep layers float (--exclude), or try "
                f"{'--method entropy' if s['method'] == 'percentile' else '--method percentile'} / "
                f"--calib-samples {2 * int(s['config']['calib_samples'])}"
            ),
        )
