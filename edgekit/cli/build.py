"""`edgekit build`: a bundle's engine for a target."""

from __future__ import annotations

from typing import Annotated

import typer

import edgekit.cli.options as opt
from edgekit.cli.app import command
from edgekit.output import Output


@command(
    epilog="Examples:\n\n  edgekit build bundles/masked --target cpu\n\n"
    "  edgekit build bundles/masked --target android-arm64   # writes the .ort model\n\n"
    "  edgekit build bundles/masked --target jetson-orin-nano --precision int8   # on the Jetson\n\n"
    "  edgekit build bundles/masked --target snapdragon-8-gen-3 "
    "--precision int8 --runtime aihub   # compiled on Qualcomm AI Hub"
)
def build(
    bundle: opt.Bundle,
    target: opt.Target = "cpu",
    precision: Annotated[
        str,
        opt.precision_option(
            "One the target runs (`edgekit targets`)",
            extra={
                "auto": (
                    "the fastest that meets the accuracy budget on the target (INT8 only where quantize met its "
                    "budget, its scheme is exact on "
                    "the target's CPU class and it was not slower than FP32 there), and why"
                )
            },
        ),
    ] = "fp32",
    rebuild: Annotated[
        bool, typer.Option("--rebuild", help="Rebuild even when an engine exists (required for a stale one).")
    ] = False,
    runtime: Annotated[
        str | None,
        opt.runtime_option(
            "Another of the target's runtimes to build for (default: the first it lists that has engines), e.g. aihub"
        ),
    ] = None,
    resume: Annotated[
        bool,
        opt.resume_option("build", "compile and link jobs"),
    ] = False,
    wait: opt.Wait = False,
    json_out: opt.Json = False,
) -> None:
    """Build a bundle's engine for a target: optimized .onnx / .ort for ONNX Runtime, a TensorRT plan
    on the device, a QNN context binary (locally, or on Qualcomm AI Hub with --runtime aihub)."""
    from edgekit.builder import build_bundle
    from edgekit.builder.render import print_build

    o = Output(json_out)
    doc = build_bundle(bundle, target, precision, rebuild, runtime=runtime, resume=resume, progress=o.step)
    o.document(doc)
    print_build(o, doc)
