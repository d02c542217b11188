"""`edgekit inspect`: a bundle's manifest, for people or as JSON."""

from __future__ import annotations

import edgekit.cli.options as opt
from edgekit.cli.app import command
from edgekit.output import Output


@command(epilog="Example:\n\n  edgekit inspect bundles/masked --json")
def inspect(bundle: opt.Bundle, json_out: opt.Json = False) -> None:
    """Show a bundle's manifest: model, IO, artifacts, verification, engines."""
    from edgekit.inspect import inspect_bundle, print_bundle

    o = Output(json_out)
    b, doc = inspect_bundle(bundle)
    o.document(doc)
    print_bundle(o, b)
