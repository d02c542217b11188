"""`edgekit lint`'s console output: the findings table and the verdict line."""

from __future__ import annotations

from typing import Any

from edgekit.output import Output


def print_lint(o: Output, doc: dict[str, Any]) -> None:
    if doc["findings"]:
        o.table(
            f"lint {doc['bundle']} for {doc['target']}",
            ["severity", "rule", "model", "finding", "fix"],
            [(f["severity"], f["rule"], f["artifact"], f["message"], f["hint"]) for f in doc["findings"]],
        )
    c = doc["counts"]
    o.line(
        f"{c['error']} error(s), {c['warning']} warning(s), {c['info']} note(s): "
        + ("deploys" if doc["passed"] else f"will not deploy to {doc['target']} as it is")
    )
