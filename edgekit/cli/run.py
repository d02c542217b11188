"""`edgekit run`: decode a bundle's model on a runtime and write the outputs."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Literal

import typer

import edgekit.cli.options as opt
from edgekit.cli.app import command, parse_cond
from edgekit.outpaths import check_file
from edgekit.output import Output


@command(
    epilog="Examples:\n\n  edgekit run bundles/masked --steps 8 --schedule cosine -o tokens.npz\n\n"
    "  edgekit run bundles/flow --solver rk4 --steps 2 --cond tokens=tokens.npz -o frames.npz   "
    "(every row of tokens.npz)\n\n"
    "  edgekit run bundles/masked --runtime torch --temperature 0 --json\n\n"
    "  edgekit run bundles/masked --runtime openvino --precision int8 -o tokens.npz\n\n"
    "  edgekit run bundles/masked --target intel-cpu --precision int8 -o tokens.npz   # the blob `edgekit build` wrote"
)
def run(
    bundle: opt.Bundle,
    out: Annotated[
        Path | None,
        opt.out_option(
            "Write the outputs (tokens or frames, the conditions as cond_NAME and, for flow, the starting "
            "noise x0) to this .npz."
        ),
    ] = None,
    runtime: opt.Runtime = "ort",
    precision: opt.Precision = "fp32",
    steps: Annotated[int | None, typer.Option(help="masked: MaskGIT steps K; flow: solver steps.")] = None,
    schedule: Annotated[
        str | None, typer.Option(help="masked: cosine | linear | square | cubic | powK | log | exp.")
    ] = None,
    temperature: Annotated[
        float | None, typer.Option(help="masked/ar: logit temperature (0 = greedy); flow: noise scale.")
    ] = None,
    choice_temperature: Annotated[
        float | None, typer.Option(help="masked: Gumbel temperature of the confidence (annealed to 0).")
    ] = None,
    guidance: Annotated[float | None, typer.Option(help="CFG scale g: uncond + g·(cond − uncond); 1 = off.")] = None,
    solver: Annotated[
        Literal["euler", "midpoint", "heun", "rk4"] | None, typer.Option(help="flow: ODE solver.")
    ] = None,
    grid: Annotated[Literal["uniform", "cosine", "sway"] | None, typer.Option(help="flow: time grid.")] = None,
    sway: Annotated[float | None, typer.Option(help="flow: sway coefficient for --grid sway.")] = None,
    top_k: Annotated[int | None, typer.Option(help="ar: sample among the k most likely tokens (0 = all).")] = None,
    spacing: Annotated[
        int | None,
        typer.Option(
            min=0,
            help=(
                "masked: tokens committed in one step prefer to be more than this many positions apart (0 = "
                "confidence only)."
            ),
        ),
    ] = None,
    length: Annotated[
        int | None, typer.Option(min=1, help="ar: tokens to generate (default: the KV cache's max length).")
    ] = None,
    cond: Annotated[
        list[str] | None,
        opt.repeatable_option(
            "--cond",
            "NAME=VALUE (a number), NAME=FILE.npy, NAME=FILE.npz (its array NAME) or NAME=FILE.npz:KEY; files give "
            "the rows to decode (in as many graph batches as they need)",
        ),
    ] = None,
    cond_data: opt.CondData = None,
    seed: opt.Seed = 0,
    batch: Annotated[
        int | None,
        opt.bounded_option(
            "--batch", "Decode rows (default: the graph's batch; half of it with guidance on a doubled-batch graph)."
        ),
    ] = None,
    threads: opt.Threads = 0,
    target: Annotated[
        str | None, opt.target_option("Run the engine built for this target (overrides --runtime).")
    ] = None,
    rebuild: Annotated[
        bool, typer.Option("--rebuild", help="Rebuild a stale engine for --target instead of refusing it.")
    ] = False,
    graph: Annotated[
        opt.GraphForm,
        typer.Option(
            "--graph",
            help="host: per-step network, host loop; step | unrolled: a fused graph added by `edgekit export --graph`.",
        ),
    ] = "host",
    latency_budget_ms: Annotated[
        float | None, opt.latency_budget_option("pick", "quality table measured once, stored in the bundle")
    ] = None,
    trust_code: opt.TrustCode = False,
    json_out: opt.Json = False,
) -> None:
    """Decode a bundle's model on a runtime and write the tokens or frames."""
    from edgekit.evaluate import output_name
    from edgekit.run import (
        RunRequest,
        budget_doc,
        plan_for_request,
        print_plan,
        print_run,
        run_bundle,
        save_outputs,
    )

    o = Output(json_out)
    if out is not None:
        check_file(out, "-o", ".npz")  # before the decode, not after
    options = {
        "steps": steps,
        "schedule": schedule,
        "temperature": temperature,
        "choice_temperature": choice_temperature,
        "guidance": guidance,
        "solver": solver,
        "grid": grid,
        "sway": sway,
        "top_k": top_k,
        "length": length,
        "spacing": spacing,
    }
    raw_cond = parse_cond(cond)
    plan = None
    if latency_budget_ms is not None:
        plan = plan_for_request(bundle, latency_budget_ms, raw_cond, batch, seed, progress=o.step)
        print_plan(o, latency_budget_ms, plan)
        options["solver"], options["steps"] = plan.solver, plan.steps
    req = RunRequest(
        runtime=runtime,
        precision=precision,
        seed=seed,
        batch=batch,
        cond=raw_cond,
        cond_data=cond_data,
        decode={k: v for k, v in options.items() if v is not None},
        threads=threads,
        target=target,
        rebuild=rebuild,
        graph=graph,
    )
    result = run_bundle(bundle, req)
    if plan is not None:
        result["budget"] = budget_doc(latency_budget_ms, plan)
    output, conds, x0 = result.pop("output"), result.pop("cond"), result.pop("x0", None)
    if out is not None:
        save_outputs(out, output_name(result["kind"]), output, conds, {} if x0 is None else {"x0": x0})
        result["out"] = str(out)
    o.document(result)
    print_run(o, result, f"run {bundle}")
