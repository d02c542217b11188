"""`edgekit check`: the FP32-vs-INT8 regression gate a CI job runs."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

import edgekit.cli.options as opt
from edgekit.cli.app import command, parse_cond
from edgekit.outpaths import check_file
from edgekit.output import Output


@command(
    epilog="Exit codes: 0 pass · 4 a metric failed (with --strict: or any warning) · 1 error.\n\n"
    "Examples:\n\n  edgekit check bundles/masked                     (ort:int8 vs ort:fp32, default thresholds)\n\n"
    "  edgekit check bundles/flow --reference torch --candidate ort:fp32 --n 32\n\n"
    "  edgekit check bundles/masked --candidate openvino:int8 --reference ort:fp32\n\n"
    "  edgekit check bundles/masked --thresholds ci/thresholds.toml --baseline ci/masked.json --junit report.xml\n\n"
    "  edgekit check bundles/masked --save-baseline ci/masked.json\n\n"
    "  edgekit check bundles/masked --strict     (any warning fails too: an int8 model quantize did not make)\n\n"
    "  edgekit check bundles/mine --metric mypkg.metrics:score --cond speaker=0.5\n\n"
    "  edgekit check bundles/masked --candidate qnn:int8 --reference ort:fp32 --target snapdragon-8-gen-3\n\n"
    "  edgekit check bundles/mine --cond-data conditions.npz       (its held-out rows, as quantize split them)\n\n"
    '  edgekit check bundles/masked --runtime aihub --device "Samsung Galaxy S24 (Family)"   '
    "(int8 on the device vs fp32 here)"
)
def check(
    bundle: opt.Bundle,
    reference: Annotated[
        str,
        typer.Option(
            "--reference",
            help=(
                "Known-good variant: runtime:precision (ort:fp32, torch:fp32, trt:fp16), a precision (on --runtime) "
                "or a runtime (fp32)."
            ),
        ),
    ] = "fp32",
    candidate: Annotated[
        str,
        typer.Option("--candidate", help="Variant under test, same forms; int8 = the model `edgekit quantize` made."),
    ] = "int8",
    runtime: opt.VariantRuntime = "ort",
    n: Annotated[
        int | None,
        opt.bounded_option(
            "--n",
            (
                "Evaluation conditions (graph batch i decodes with seed + i); default: the rows `edgekit quantize` "
                "gated on, else 16."
            ),
        ),
    ] = None,
    seed: Annotated[
        int | None,
        opt.seed_option("Seed of all decode noise; default: the seed `edgekit quantize` gated with, else 0."),
    ] = None,
    greedy: Annotated[
        bool,
        typer.Option(
            "--greedy", help="masked/ar: temperature 0 (argmax trajectories) instead of the bundle's sampling."
        ),
    ] = False,
    thresholds: Annotated[
        Path | None, typer.Option("--thresholds", help="TOML file overriding the per-kind default thresholds.")
    ] = None,
    baseline: Annotated[
        Path | None,
        typer.Option(
            "--baseline", help="Also fail a metric that regressed beyond its tolerance vs this baseline file."
        ),
    ] = None,
    save_baseline: Annotated[
        Path | None, typer.Option("--save-baseline", help="Write this run's metrics as a baseline file (JSON).")
    ] = None,
    junit: Annotated[
        Path | None, typer.Option("--junit", help="Write JUnit XML for CI: one test case per metric.")
    ] = None,
    metric: Annotated[str | None, opt.metric_option()] = None,
    cond: opt.Cond = None,
    cond_data: opt.CondData = None,
    threads: opt.Threads = 0,
    target: Annotated[
        str | None,
        opt.target_option(
            "A variant on this target's runtime loads the engine built for it "
            "(qnn:int8 + a Snapdragon target: its precompiled context)."
        ),
    ] = None,
    device: Annotated[
        str | None,
        opt.aihub_option(
            "--device",
            "the AI Hub device the candidate runs on (a name, or a Snapdragon target for its first device); per step "
            "on the reference's recorded inputs.",
        ),
    ] = None,
    resume: Annotated[
        bool,
        opt.resume_option("check", "inference jobs"),
    ] = False,
    strict: Annotated[
        bool,
        typer.Option(
            "--strict",
            help="Every warning fails the check (exit 4), e.g. an int8 model `edgekit quantize` did not make.",
        ),
    ] = False,
    trust_code: opt.TrustCode = False,
    json_out: opt.Json = False,
) -> None:
    """Compare two variants of a bundle (default INT8 vs FP32) on whole decodes under identical noise;
    exit 4 when a metric fails."""
    from edgekit.check import CheckConfig, check_bundle
    from edgekit.check.render import print_check
    from edgekit.errors import CheckFailed

    o = Output(json_out)
    for flag, path in (("--junit", junit), ("--save-baseline", save_baseline)):
        if path is not None:
            check_file(path, flag)  # before the decodes, not after
    raw_cond = parse_cond(cond)
    cfg = CheckConfig(
        reference=reference,
        candidate=candidate,
        runtime=runtime,
        n=n,
        seed=seed,
        greedy=greedy,
        cond=raw_cond,
        cond_data=cond_data,
        thresholds=thresholds,
        baseline=baseline,
        save_baseline=save_baseline,
        junit=junit,
        metric_hook=metric,
        threads=threads,
        target=target,
        device=device,
        resume=resume,
        strict=strict,
    )
    o.info(f"checking {bundle}: {candidate} vs {reference} …")
    doc = check_bundle(bundle, cfg, progress=o.step)
    for w in doc["warnings"]:
        o.warn(w)
    o.document(doc)
    print_check(o, doc)
    if not doc["passed"]:
        failed = ", ".join(doc["failed"])
        raise CheckFailed(
            f"check failed: {failed} ({doc['candidate']} vs {doc['reference']} on {doc['model']})",
            hint=(
                "the table shows each value against its threshold; a deliberate change needs a new --save-baseline or "
                "--thresholds"
            ),
        )
