"""`edgekit doctor`: what this host can run for a target, and what is missing."""

from __future__ import annotations

from typing import Annotated

import edgekit.cli.options as opt
from edgekit.cli.app import command
from edgekit.output import Output


@command(epilog="Examples:\n\n  edgekit doctor\n\n  edgekit doctor --target jetson-orin-nano --json")
def doctor(
    target: Annotated[
        str | None, opt.target_option("Check one target (name or .toml); default: every built-in target.")
    ] = None,
    json_out: opt.Json = False,
) -> None:
    """Say what this host can run for a target, and what is missing (with the install line)."""
    from edgekit.doctor import doctor as run_doctor
    from edgekit.doctor.render import print_doctor

    o = Output(json_out)
    doc = run_doctor(target)
    o.document(doc)
    print_doctor(o, doc, one_target=target is not None)
