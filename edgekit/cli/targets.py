"""`edgekit targets`: the shipped deployment targets."""

from __future__ import annotations

import edgekit.cli.options as opt
from edgekit.cli.app import command
from edgekit.output import Output


@command(epilog="Examples:\n\n  edgekit targets\n\n  edgekit targets --json")
def targets(json_out: opt.Json = False) -> None:
    """List the deployment targets edgekit ships (runtimes, precisions, power probe)."""
    from edgekit.targets.listing import targets_document
    from edgekit.targets.render import print_targets

    o = Output(json_out)
    doc = targets_document()
    o.document(doc)
    print_targets(o, doc)
