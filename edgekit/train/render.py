"""`edgekit train-demo` console output."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from edgekit.output import Output


def print_train(o: Output, doc: Mapping[str, Any]) -> None:
    o.table(
        "trained",
        ["model", "final loss", "seconds", "weights"],
        [(n, r["final_loss"], r["seconds"], r["path"]) for n, r in doc["models"].items()],
    )
