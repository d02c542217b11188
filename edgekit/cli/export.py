"""`edgekit export`: a PyTorch model to a verified static-shape ONNX bundle."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

import edgekit.cli.options as opt
from edgekit.cli.app import command
from edgekit.outpaths import check_dir
from edgekit.output import Output


@command(
    epilog=(
        "Examples:\n\n  edgekit export masked-demo -o bundles/masked\n\n"
        "  edgekit export examples/custom_model.py:make_model -o bundles/mine --batch 2\n\n"
        "  edgekit export flow-demo -o bundles/flow-chunk --chunk-frames 16 --context 16"
    )
)
def export(
    model: Annotated[
        str,
        typer.Argument(
            help="Built-in name (masked-demo, flow-demo, ar-demo) or module:factory / file.py:factory.",
            show_default=False,
        ),
    ],
    out: Annotated[Path, opt.out_option("Bundle directory to write.", show_default=False)],
    batch: opt.Batch = None,
    opset: Annotated[int, typer.Option(help="ONNX opset (17 or newer).")] = 18,
    atol: Annotated[float, typer.Option(help="Absolute tolerance of the ONNX-vs-torch check.")] = 1e-4,
    rtol: Annotated[float, typer.Option(help="Tolerance relative to each output's largest value.")] = 1e-3,
    graph: Annotated[
        opt.GraphForm,
        typer.Option(
            "--graph",
            help=(
                "host: per-step network (default); step: decode update in "
                "the graph; unrolled: the whole K-step decode in one call."
            ),
        ),
    ] = "host",
    decode_opt: Annotated[
        list[str] | None,
        opt.repeatable_option(
            "--decode",
            "KEY=VALUE decode option to bake into a --graph step|unrolled graph (default: the model's decode defaults)",
        ),
    ] = None,
    wait: opt.Wait = False,
    chunk_frames: Annotated[
        int | None,
        typer.Option(
            "--chunk-frames",
            min=1,
            help=(
                "Flow models: export the chunk window graph for streaming "
                "(F frames emitted per chunk; see `edgekit loadtest`)."
            ),
        ),
    ] = None,
    context: Annotated[
        int,
        typer.Option(
            "--context", min=0, help="With --chunk-frames: already-decoded frames each window sees on its left."
        ),
    ] = 0,
    lookahead: Annotated[
        int,
        typer.Option(
            "--lookahead", min=0, help="With --chunk-frames: frames past the chunk decoded with it and discarded."
        ),
    ] = 0,
    overwrite: Annotated[
        bool,
        typer.Option(
            "--overwrite",
            help=(
                "Replace a bundle already at -o, with everything made from it (int8 model, engines, fused graphs); "
                "without it export refuses and lists what would be lost."
            ),
        ),
    ] = False,
    json_out: opt.Json = False,
) -> None:
    """Export a PyTorch model to a static-shape ONNX bundle and verify it against PyTorch."""
    from edgekit.export import ExportConfig, ExportRequest, VerifyConfig, export_model
    from edgekit.export.render import print_export

    o = Output(json_out)
    check_dir(out, "-o")
    req = ExportRequest(
        model=model,
        out=out,
        batch=batch,
        graph=graph,
        decode=tuple(decode_opt or ()),
        chunk_frames=chunk_frames,
        context=context,
        lookahead=lookahead,
        overwrite=overwrite,
        cfg=ExportConfig(opset=opset, verify=VerifyConfig(atol=atol, rtol=rtol)),
    )
    bundle, fused = export_model(req, progress=o.info)
    o.document(bundle.to_json())
    print_export(o, bundle, fused)
