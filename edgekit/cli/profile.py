"""`edgekit profile`: latency, host time, energy and memory side by side."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Literal

import typer

import edgekit.cli.options as opt
from edgekit.cli.app import command, parse_cond, parse_csv, parse_skippable_csv
from edgekit.errors import CheckFailed, UsageError
from edgekit.outpaths import check_dir
from edgekit.output import Output


@command(
    epilog="Examples:\n\n  edgekit profile edgekit-demo/masked\n\n"
    "  edgekit profile edgekit-demo/masked --runtime ort,torch --precision fp32,int8 --html report/\n\n"
    "  edgekit profile edgekit-demo/masked --runtime ort,openvino --precision fp32,int8 --compare-ar\n\n"
    "  edgekit profile edgekit-demo/masked --compare-ar --sweep 16,32,128,256\n\n"
    "  edgekit profile edgekit-demo/masked --compare-ar --frontier-steps 2,4,8,16,32 --frontier-tolerance 5%\n\n"
    "  edgekit profile bundles/mine --compare-ar --ar-bundle bundles/mine-ar --metric mypkg.metrics:score "
    "--cond speaker=0.5\n\n"
    "  edgekit profile bundles/flow --steps 2,4,8 --iters 50 --min-seconds 5 --power rapl --json\n\n"
    '  edgekit profile bundles/masked --runtime aihub --devices "Samsung Galaxy S24 '
    '(Family),snapdragon-x-elite" --html report/\n\n'
    "  edgekit profile bundles/masked --target intel-cpu   # the engines `edgekit build --target intel-cpu` wrote"
)
def profile(
    bundle: opt.Bundle,
    runtime: Annotated[str, opt.runtime_option("Comma-separated runtimes to compare", many=True)] = "ort",
    precision: Annotated[
        str | None,
        opt.precision_option(
            "Comma-separated (default: fp32, plus int8 when the bundle has it); each runtime runs the ones it can",
            many=True,
        ),
    ] = None,
    steps: Annotated[
        str | None,
        typer.Option(
            "--steps", help="Decode steps, comma-separated for several variants (masked K, flow solver steps)."
        ),
    ] = None,
    batch: Annotated[int | None, opt.bounded_option("--batch", "Decode rows (default: the graph's batch).")] = None,
    iters: Annotated[
        int | None,
        opt.bounded_option("--iters", "Measured decodes per variant, at least (default 20)."),
    ] = None,
    min_seconds: Annotated[
        float | None,
        opt.bounded_option("--min-seconds", "Measure each variant for at least this long (default 1 s)."),
    ] = None,
    max_seconds: Annotated[
        float | None,
        opt.bounded_option(
            "--max-seconds",
            "Stop measuring a variant after this long once 5 decodes are in, short of --iters (default 60 s; "
            "with --iters, none; 0: none).",
        ),
    ] = None,
    warmup: Annotated[
        int | None,
        opt.bounded_option("--warmup", "Warm-up decodes per variant, at least (default 3; also >= 0.2 s)."),
    ] = None,
    power: Annotated[
        Literal["off", "auto", "nvml", "jetson", "tegrastats", "rapl", "android", "odpm", "rpi"],
        typer.Option("--power", help="Power probe (auto: the one this host has; off: none)."),
    ] = "auto",
    compare_ar: Annotated[
        bool,
        typer.Option(
            "--compare-ar",
            help=(
                "Also decode the AR baseline at the same length: speedup, crossover length and the quality-latency "
                "frontier."
            ),
        ),
    ] = False,
    frontier_steps: Annotated[
        str,
        opt.skippable_option(
            "--frontier-steps", "With --compare-ar: masked step counts K of the quality-latency frontier"
        ),
    ] = "1,2,4,8,16",
    frontier_n: Annotated[
        int,
        opt.bounded_option(
            "--frontier-n", "Conditions in the frontier's evaluation set (the same for every K and for AR)."
        ),
    ] = 64,
    frontier_metric: Annotated[
        str | None,
        typer.Option(
            "--frontier-metric",
            help=(
                "Quality metric the frontier ranks by (default: event_accuracy for the demo models, else the --metric "
                "hook's first)."
            ),
        ),
    ] = None,
    frontier_tolerance: Annotated[
        str,
        typer.Option(
            "--frontier-tolerance",
            help="A K reaches AR's quality within this: 10% (of AR's value) or an absolute amount like 0.02.",
        ),
    ] = "10%",
    metric: Annotated[str | None, opt.metric_option(", for the frontier of your own model")] = None,
    ar_bundle: Annotated[
        Path | None,
        typer.Option(
            "--ar-bundle",
            help="The AR baseline bundle (default: the sibling `ar` directory, as `edgekit demo` lays them out).",
        ),
    ] = None,
    sweep: Annotated[
        str | None,
        opt.skippable_option("--sweep", "Extra lengths for the crossover sweep, e.g. 16,32,128 (needs torch)"),
    ] = None,
    latency_budget_ms: Annotated[
        float | None, opt.latency_budget_option("profile the", "as `edgekit run --latency-budget-ms`")
    ] = None,
    sweep_precision: Annotated[
        str,
        typer.Option(
            "--sweep-precision",
            help=(
                "Precision(s) of the architecture-only sweep models: fp32, int8 (cpu-profile QDQ, no budget) or "
                "fp32,int8 (a sweep and crossover each, side by side)."
            ),
        ),
    ] = "fp32",
    cond: opt.Cond = None,
    cond_data: opt.CondData = None,
    threads: opt.Threads = 0,
    seed: opt.Seed = 0,
    html: Annotated[
        Path | None,
        typer.Option("--html", help="Write a self-contained HTML report (and profile.json) into this directory."),
    ] = None,
    devices: Annotated[
        str | None,
        opt.aihub_option(
            "--devices",
            "comma-separated AI Hub device names, or Snapdragon targets standing for their first device; one profile "
            "job each, all at once (default: the devices of the bundle's AI Hub engines).",
        ),
    ] = None,
    require_npu: Annotated[
        bool,
        opt.aihub_option(
            "--require-npu", "exit 4 when any op ran off the NPU (a CPU/GPU fallback is otherwise a warning)."
        ),
    ] = False,
    resume: Annotated[
        bool,
        opt.resume_option("profile", "profile jobs"),
    ] = False,
    target: Annotated[
        str | None,
        opt.target_option(
            "Profile the engines built for this target, as `edgekit run --target` loads them (overrides --runtime)."
        ),
    ] = None,
    rebuild: Annotated[
        bool, typer.Option("--rebuild", help="Rebuild a missing or stale engine for --target instead of refusing it.")
    ] = False,
    trust_code: opt.TrustCode = False,
    json_out: opt.Json = False,
) -> None:
    """Measure a bundle's decode on several runtimes/precisions side by side: latency, per-step and
    host time, throughput, energy, memory; with --compare-ar, NAR vs AR speed and the
    quality-latency frontier; with --runtime aihub, on Qualcomm AI Hub's hosted devices."""
    from edgekit.probes.latency import MeasureConfig
    from edgekit.profile import ProfileConfig, profile_bundle, write_report
    from edgekit.profile.render import print_profile, profile_progress
    from edgekit.run import budget_doc, plan_for_request, print_plan

    o = Output(json_out)
    base = MeasureConfig()
    measure_cfg = MeasureConfig(
        warmup_iters=base.warmup_iters if warmup is None else warmup,
        warmup_seconds=base.warmup_seconds if warmup is None else 0.0,  # an explicit count is the whole rule
        iters=iters or base.iters,
        min_seconds=base.min_seconds if min_seconds is None else min_seconds,
        max_iters=max(base.max_iters, iters or 0),
        # An explicit --iters is the count asked for: no time bound unless --max-seconds says one.
        max_seconds=(0.0 if iters else base.max_seconds) if max_seconds is None else max_seconds,
    )
    raw_cond = parse_cond(cond)
    extra: dict[str, Any] = {"sweep_precision": sweep_precision}
    if sweep is not None:
        extra["sweep_lengths"] = parse_skippable_csv("--sweep", sweep, int)
    plan = None
    if latency_budget_ms is not None:
        if steps is not None:
            raise UsageError("--latency-budget-ms chooses the steps itself; drop --steps (or drop the budget)")
        plan = plan_for_request(bundle, latency_budget_ms, raw_cond, batch, seed, progress=o.step)
        print_plan(o, latency_budget_ms, plan)
        steps, extra["decode"] = str(plan.steps), {"solver": plan.solver}
    cfg = ProfileConfig(
        runtimes=parse_csv("--runtime", runtime),
        precisions=parse_csv("--precision", precision),
        steps=parse_csv("--steps", steps, int),
        batch=batch,
        cond=raw_cond,
        cond_data=cond_data,
        measure=measure_cfg,
        power=power,
        compare_ar=compare_ar,
        ar_bundle=ar_bundle,
        seed=seed,
        threads=threads,
        frontier_n=frontier_n,
        frontier_metric=frontier_metric,
        frontier_tolerance=frontier_tolerance,
        metric_hook=metric,
        frontier_steps=parse_skippable_csv("--frontier-steps", frontier_steps, int),
        devices=parse_csv("--devices", devices),
        require_npu=require_npu,
        resume=resume,
        target=target,
        rebuild=rebuild,
        **extra,
    )
    if html is not None:
        from edgekit._deps import require

        require("matplotlib")  # before minutes of measuring, not after
        check_dir(html, "--html")
    with profile_progress(o) as progress:
        doc = profile_bundle(bundle, cfg, progress=progress)
    if plan is not None:
        doc["budget"] = budget_doc(latency_budget_ms, plan)
    if html is not None:
        paths = write_report(doc, html)
        doc["report"] = {k: str(v) for k, v in paths.items()}
    o.document(doc)
    print_profile(o, doc)
    if html is not None:
        o.line(f"wrote {doc['report']['html']} and {doc['report']['json']}")
    if require_npu and doc.get("aihub") and not doc["aihub"]["npu_only"]:
        raise CheckFailed(
            "--require-npu: ops ran off the NPU on AI Hub's devices (see the warnings)",
            hint=(
                "quantize every op with `edgekit quantize BUNDLE --profile qnn`; `edgekit lint BUNDLE --target "
                "TARGET` names the ops"
            ),
        )
