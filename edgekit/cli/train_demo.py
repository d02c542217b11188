"""`edgekit train-demo`: retrain the built-in demo models."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

import edgekit.cli.options as opt
from edgekit.cli.app import command
from edgekit.outpaths import check_dir
from edgekit.output import Output


@command(
    "train-demo",
    epilog="Examples:\n\n  edgekit train-demo --models ar-demo --steps 50 --out retrained/\n\n"
    "  edgekit train-demo --overwrite-shipped   (replaces the weights `edgekit export masked-demo` loads)",
)
def train_demo(
    out: Annotated[
        Path,
        opt.out_option(
            "Directory for the .safetensors files (a new one; the shipped weights need --overwrite-shipped)."
        ),
    ] = Path("edgekit-weights"),
    overwrite_shipped: Annotated[
        bool,
        typer.Option(
            "--overwrite-shipped",
            help="Write into the package's own weights folder, replacing the shipped demo weights.",
        ),
    ] = False,
    steps: Annotated[
        int | None,
        typer.Option(min=1, help="Optimizer steps per model (default: masked 20000, ar 1000, flow 1500)."),
    ] = None,
    models: Annotated[
        str, typer.Option(help="Comma-separated demo models to train.")
    ] = "masked-demo,flow-demo,ar-demo",
    json_out: opt.Json = False,
) -> None:
    """Retrain the built-in demo models on the synthetic corpus (all three: about 73 minutes on 2 idle
    cores, the masked model 66 of them)."""
    from edgekit.train import TrainDemoConfig, train_demo
    from edgekit.train.render import print_train

    o = Output(json_out)
    if not overwrite_shipped:
        check_dir(out, "-o")  # before minutes of training, not after
    cfg = TrainDemoConfig(
        models=tuple(n.strip() for n in models.split(",") if n.strip()),
        out=out,
        overwrite_shipped=overwrite_shipped,
        steps=steps,
    )
    doc = train_demo(cfg, progress=o.progress, say=o.info)
    o.document(doc)
    print_train(o, doc)
