"""`edgekit demo`: the whole pipeline on the built-in models."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from edgekit.cli.app import JsonOpt, SeedOpt, command, configure_logging
from edgekit.outpaths import check_dir
from edgekit.output import Output


@command(epilog="Example:\n\n  edgekit demo --out edgekit-demo")
def demo(
    out: Annotated[Path, typer.Option("-o", "--out", help="Directory for the demo bundles.")] = Path("edgekit-demo"),
    n: Annotated[int, typer.Option("--n", min=1, help="Evaluation sequences per model.")] = 32,
    seed: SeedOpt = 0,
    npu: Annotated[bool, typer.Option("--npu/--no-npu", help="NPU stage: masked-demo quantized, compiled and checked for snapdragon-8-gen-3 on the emulated HTP (needs edgekit[qnn]; skipped without it).")] = True,
    json_out: JsonOpt = False,
) -> None:
    """Run the whole pipeline on the built-in models and the default CPU target (and a Snapdragon NPU stage)."""
    configure_logging()
    from edgekit.demo import DemoConfig, print_demo, run_demo

    o = Output(json_out)
    check_dir(out, "-o")
    report = run_demo(DemoConfig(out=out, n=n, seed=seed, npu_target="snapdragon-8-gen-3" if npu else None), progress=lambda msg: o.info(f"· {msg}"))
    o.document(report)
    print_demo(o, report)
