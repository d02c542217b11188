"""`edgekit pack`/`unpack`/`deploy` console output; a device's profile or check report is shown
with the same tables the command prints locally."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from edgekit.check.render import print_check
from edgekit.output import Output
from edgekit.profile.render import print_profile


def print_pack(o: Output, doc: dict[str, Any]) -> None:
    o.line(
        f"wrote {doc['out']} ({len(doc['files'])} files, {doc['bytes'] / 1e6:.1f} MB"
        + (f", for {doc['target']}" if doc["target"] else "")
        + ")"
    )
    for item in doc["left_out"]:
        o.info(f"left out {item}")


def print_deploy(o: Output, doc: dict[str, Any], host: str, command: str) -> None:
    for w in doc["warnings"]:
        o.warn(w)
    report = doc["report"]
    printer = {"profile": print_profile, "check": print_check}.get(command)
    if printer is not None:
        printer(o, report)
    else:
        o.pairs(
            f"{command} on {host} ({doc['target']}, {doc['precision']})",
            {k: v for k, v in report.items() if not isinstance(v, (dict, list))},
        )
        for key, value in report.items():
            if isinstance(value, dict) and value and all(not isinstance(v, (dict, list)) for v in value.values()):
                o.pairs(key, value)
    o.line(
        f"copied {len(doc['copied']['files'])} files ({doc['copied']['bytes'] / 1e6:.1f} MB)"
        f" by {doc['remote']['transfer']}; "
        f"reports in {doc['fetched'][0] if doc['fetched'] else '—'}"
    )


def print_unpack(o: Output, doc: Mapping[str, Any]) -> None:
    o.line(f"unpacked bundle {doc['bundle']} ({len(doc['files'])} files, every hash verified)")
