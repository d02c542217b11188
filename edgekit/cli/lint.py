"""`edgekit lint`: will a bundle's graphs deploy to a target?"""

from __future__ import annotations

import edgekit.cli.options as opt
from edgekit.cli.app import command
from edgekit.output import Output


@command(
    epilog=(
        "Examples:\n\n  edgekit lint bundles/masked --target jetson-orin-nano\n\n"
        "  edgekit lint bundles/masked --target android-arm64 --json"
    )
)
def lint(bundle: opt.Bundle, target: opt.Target = "cpu", json_out: opt.Json = False) -> None:
    """Check that a bundle's graphs will deploy to a target (exit 4 on an error-level finding)."""
    from edgekit.errors import CheckFailed
    from edgekit.lint import lint_report
    from edgekit.lint.render import print_lint

    o = Output(json_out)
    doc = lint_report(bundle, target)
    o.document(doc)
    print_lint(o, doc)
    if not doc["passed"]:
        # One ``error:`` line, as ``check`` ends: a CI log's last line says why the job failed
        # (the table above has every finding and its fix).
        first = next(f for f in doc["findings"] if f["severity"] == "error")
        raise CheckFailed(
            f"lint failed: {doc['counts']['error']} error-level finding(s) for target {doc['target']}; "
            f"first: {first['rule']} on {first['artifact']}",
            hint="the table above gives each finding's fix",
        )
