"""`edgekit inspect`: a bundle's manifest, for people or as JSON; or its float set for other quantizers."""

from __future__ import annotations

from typing import Annotated, Literal

import typer

import edgekit.cli.options as opt
from edgekit.cli.app import command
from edgekit.output import Output


@command(
    epilog="Examples:\n\n  edgekit inspect bundles/masked --json\n\n"
    "  edgekit inspect bundles/masked --float-set nncf > ignored_scope.json   "
    "(nncf.IgnoredScope(**json.load(f)) on fp32.onnx)\n\n"
    "  edgekit inspect bundles/masked --float-set ort   (quantize_static(..., **json.load(f)))"
)
def inspect(
    bundle: opt.Bundle,
    float_set: Annotated[
        Literal["nncf", "openvino", "ort", "ort-prepared"] | None,
        typer.Option(
            "--float-set",
            help="Print only the layers quantize kept float (and weight-only), named for another quantizer, as one "
            "JSON document of its call's keyword arguments: nncf = IgnoredScope names in the FP32 ONNX graph, "
            "openvino = IgnoredScope names of the OpenVINO model read from it, ort = quantize_static "
            "nodes_to_exclude on the FP32 ONNX, ort-prepared = the same after quant_pre_process.",
        ),
    ] = None,
    json_out: opt.Json = False,
) -> None:
    """Show a bundle's manifest: model, IO, artifacts, verification, what quantize kept float, engines."""
    from edgekit.inspect import float_set_document, inspect_bundle, print_bundle

    if float_set is not None:
        o = Output(True)  # the document is the output, with or without --json
        doc, warnings = float_set_document(bundle, float_set)
        for line in warnings:
            o.warn(line)
        o.document(doc)
        return
    o = Output(json_out)
    b, doc = inspect_bundle(bundle)
    o.document(doc)
    print_bundle(o, b, doc)
