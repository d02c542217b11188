"""`edgekit debug`: where INT8 (or any variant) goes wrong in the decode loop, and the fix."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

import edgekit.cli.options as opt
from edgekit.cli.app import command
from edgekit.outpaths import check_dir
from edgekit.output import Output


@command(
    epilog="Exit codes (as check): 0 check passes (after the fix, with --fix) · 4 it fails · 1 error · 2 usage.\n\n"
    "Examples:\n\n  edgekit debug bundles/masked                         "
    "(ort:int8 vs ort:fp32: the first step and op where the error enters)\n\n"
    "  edgekit debug bundles/masked --fix                   "
    "(try the smallest fix, prove it with check's gate, write it into the bundle)\n\n"
    "  edgekit debug bundles/masked --candidate openvino:int8 --html debug-report\n\n"
    "  edgekit debug bundles/masked --candidate qnn:int8 --target snapdragon-8-gen-3 --fix\n\n"
    "  edgekit debug bundles/flow --reference torch --candidate ort:int8 --json"
)
def debug(
    bundle: opt.Bundle,
    candidate: Annotated[
        str,
        typer.Option(
            "--candidate",
            help=(
                "Variant under test: runtime:precision (ort:int8, openvino:int8, qnn:int8, trt:int8), a precision (on "
                "--runtime) or a runtime."
            ),
        ),
    ] = "int8",
    reference: Annotated[
        str,
        typer.Option(
            "--reference",
            help="Known-good variant whose decode is replayed: ort:fp32, torch:fp32 (forward hooks), same forms.",
        ),
    ] = "fp32",
    runtime: opt.VariantRuntime = "ort",
    target: Annotated[
        str | None, opt.target_option("A variant on this target's runtime loads its engine (qnn: the target's HTP).")
    ] = None,
    threshold: Annotated[
        float | None,
        opt.bounded_option(
            "--threshold",
            "dB: the error enters at the first step and op whose own added noise is below this SQNR (default 20).",
        ),
    ] = None,
    rows: Annotated[
        int | None,
        opt.bounded_option(
            "--rows", "Rows replayed teacher-forced with every tensor captured (default: one graph batch)."
        ),
    ] = None,
    n: Annotated[
        int | None, opt.bounded_option("--n", "Rows of check's gate (default: the rows `edgekit quantize` judged).")
    ] = None,
    seed: Annotated[int | None, opt.seed_option("Seed of all decode noise (default: quantize's).")] = None,
    cond_data: opt.CondData = None,
    fix: Annotated[
        bool,
        typer.Option(
            "--fix",
            help=(
                "Try the smallest fix (16-bit tensor, weight-only or float op), prove it with check's gate, write it "
                "into the bundle and re-quantize."
            ),
        ),
    ] = False,
    html: Annotated[
        Path | None, typer.Option("--html", help="Write a heatmap (steps × layers, SQNR) to this folder.")
    ] = None,
    isa: Annotated[str, opt.isa_option("CPU class whose int8 accumulation is modelled")] = "host",
    threads: opt.Threads = 0,
    trust_code: opt.TrustCode = False,
    json_out: opt.Json = False,
) -> None:
    """Find the first decode step and op where a variant's error enters (teacher-forced replay, every
    tensor captured), say why, and with --fix prove and write the smallest fix."""
    from edgekit.debug import DebugConfig, debug_bundle
    from edgekit.debug.html import write_heatmap
    from edgekit.debug.render import print_debug, summary_line
    from edgekit.errors import CheckFailed

    o = Output(json_out)
    if html is not None:
        check_dir(html, "--html")  # before the replay, not after
    chosen = {"threshold_db": threshold} if threshold is not None else {}  # the default lives in DebugConfig
    cfg = DebugConfig(
        candidate=candidate,
        reference=reference,
        runtime=runtime,
        target=target,
        rows=rows,
        n=n,
        seed=seed,
        cond_data=cond_data,
        fix=fix,
        html=html,
        threads=threads,
        isa=isa,
        **chosen,
    )
    o.info(f"debugging {bundle}: {candidate} vs {reference} …")
    doc = debug_bundle(bundle, cfg, progress=o.step)
    doc["summary"] = summary_line(doc)
    if html is not None:
        doc["html"] = str(write_heatmap(html, doc))
    o.document(doc)
    print_debug(o, doc)
    if not doc["passed"]:
        raise CheckFailed(
            (
                f"check fails on {', '.join(doc['failed']) or 'its gate'} ({doc['candidate']} vs {doc['reference']} "
                f"on {doc['model']})"
            ),
            hint="see the fixes tried above" if fix else f"`edgekit debug {bundle} --fix` tries the smallest change",
        )
