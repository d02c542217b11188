"""`edgekit doctor`: what this host can run for a target, and what is missing."""

from __future__ import annotations

from typing import Annotated

import typer

from edgekit.cli.app import (
    JsonOpt,
    command,
)
from edgekit.output import Output


@command(epilog="Examples:\n\n  edgekit doctor\n\n  edgekit doctor --target jetson-orin-nano --json")
def doctor(
    target: Annotated[
        str | None,
        typer.Option("--target", "-t", help="Check one target (name or .toml); default: every built-in target."),
    ] = None,
    json_out: JsonOpt = False,
) -> None:
    """Say what this host can run for a target, and what is missing (with the install line)."""
    from edgekit.doctor import doctor as run_doctor
    from edgekit.doctor.render import print_doctor

    o = Output(json_out)
    doc = run_doctor(target)
    o.document(doc)
    print_doctor(o, doc, one_target=target is not None)
