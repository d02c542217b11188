"""`edgekit build`: a bundle's engine for a target."""

from __future__ import annotations

from typing import Annotated

import typer

from edgekit._lock import LOCK_WAIT
from edgekit.cli.app import (
    BundleArg,
    JsonOpt,
    TargetOpt,
    WaitOpt,
    command,
    configure_logging,
    precision_option,
)
from edgekit.output import Output


@command(epilog="Examples:\n\n  edgekit build bundles/masked --target cpu\n\n"
         "  edgekit build bundles/masked --target android-arm64   # writes the .ort model\n\n"
         "  edgekit build bundles/masked --target jetson-orin-nano --precision int8   # on the Jetson")
def build(
    bundle: BundleArg,
    target: TargetOpt = "cpu",
    precision: Annotated[str, precision_option("One the target runs (`edgekit targets`)", extra={"auto": (
        "the fastest that meets the accuracy budget on the target (INT8 only where quantize met its budget, its scheme is exact on "
        "the target's CPU class and it was not slower than FP32 there), and why")})] = "fp32",
    rebuild: Annotated[bool, typer.Option("--rebuild", help="Rebuild even when an engine exists (required for a stale one).")] = False,
    wait: WaitOpt = False,
    json_out: JsonOpt = False,
) -> None:
    """Build a bundle's engine for a target: optimized .onnx / .ort for ONNX Runtime, a TensorRT plan on the device."""
    configure_logging()
    from edgekit.builder import build_bundle
    from edgekit.builder.render import print_build

    o = Output(json_out)
    LOCK_WAIT.set(wait)
    doc = build_bundle(bundle, target, precision, rebuild)
    o.document(doc)
    print_build(o, doc)
