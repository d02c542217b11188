"""`edgekit targets` console output."""

from __future__ import annotations

from typing import Any, Mapping

from edgekit.output import Output


def print_targets(o: Output, doc: Mapping[str, Any]) -> None:
    o.table("targets (pass one with --target NAME, or --target your.toml)",
            ["target", "runtimes", "precisions", "power", "description"],
            [(t["name"], " → ".join(t["runtimes"]), ",".join(t["precisions"]), t["power_probe"], t["description"]) for t in doc["targets"]])
