"""`edgekit inspect`'s console output: a bundle's manifest for people (model, IO, artifacts, verification)."""

from __future__ import annotations

from edgekit.bundle import Bundle
from edgekit.output import Output


def print_bundle(o: Output, b: Bundle) -> None:
    m = b.manifest
    o.pairs(f"bundle {b.root}", {"model": b.name, "kind": b.kind, "source": m["model"].get("source"), "schema": m["schema"], **{f"meta.{k}": v for k, v in b.meta.items() if k != "conditioning"}})
    o.table("inputs / outputs", ["tensor", "role", "dtype", "shape"], [(n, "input", s.dtype, list(s.shape)) for n, s in b.inputs.items()] + [(n, "output", s.dtype, list(s.shape)) for n, s in b.outputs.items()])
    o.table("artifacts", ["name", "path", "MB", "sha256", "made by"], [(n, a["path"], a["bytes"] / 1e6, a["sha256"][:12], a["made_by"]) for n, a in m["artifacts"].items()])
    for name, ver in m.get("verification", {}).items():
        status = "passed" if ver.get("passed") else "FAILED"
        o.line(f"verification of {name}: {status} ({ver.get('reference')} vs {ver.get('candidate')}, {ver.get('samples')} inputs)")
