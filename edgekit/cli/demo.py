"""`edgekit demo`: the whole pipeline on the built-in models."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

import edgekit.cli.options as opt
from edgekit.cli.app import command
from edgekit.outpaths import check_dir
from edgekit.output import Output


@command(epilog="Examples:\n\n  edgekit demo --out edgekit-demo\n\n  edgekit demo --full --out edgekit-demo-full")
def demo(
    out: Annotated[Path, opt.out_option("Directory for the demo bundles.")] = Path("edgekit-demo"),
    n: Annotated[int, opt.bounded_option("--n", "Evaluation sequences per model.")] = 32,
    seed: opt.Seed = 0,
    full: Annotated[
        bool,
        typer.Option(
            "--full",
            help=(
                "The complete sizes: the frontier at K = 1..16 on --n conditions (not K = 1..8 on 16), a length sweep "
                "for a measured crossover, and the NPU stage."
            ),
        ),
    ] = False,
    npu: Annotated[
        bool | None,
        typer.Option(
            "--npu/--no-npu",
            help=(
                "NPU stage: masked-demo quantized, compiled and checked for snapdragon-8-gen-3 on the emulated HTP, "
                "minutes (needs edgekit\\[qnn]; skipped without it). Default: with --full only."
            ),
            show_default=False,
        ),
    ] = None,
    json_out: opt.Json = False,
) -> None:
    """Run the whole pipeline on the built-in models and the default CPU target (a few minutes on 2
    cores; --full for the complete sizes and the Snapdragon NPU stage)."""
    from edgekit.demo import DemoConfig, print_demo, run_demo

    o = Output(json_out)
    check_dir(out, "-o")
    report = run_demo(DemoConfig(out=out, n=n, seed=seed, full=full, npu=npu), progress=lambda msg: o.info(f"· {msg}"))
    o.document(report)
    print_demo(o, report)
