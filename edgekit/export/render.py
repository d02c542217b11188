"""`edgekit export`'s console output: the verification table."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from edgekit.output import Output


def print_verification(o: Output, bundle: Any) -> None:
    """ONNX-vs-torch error per output, and where the graph was written."""
    ver = bundle.verification["fp32"]
    rows = [(n, e.max_abs, e.max_rel, e.tolerance, "pass" if e.passed else "FAIL") for n, e in ver.outputs.items()]
    o.table(
        f"{bundle.name}: ONNX vs torch on {ver.samples} inputs", ["output", "max abs", "max rel", "tolerance", ""], rows
    )
    art = bundle.artifact("fp32")
    # Over the external-data threshold the weights live in side files: the graph alone is a few MB.
    side = sum(int(f["bytes"]) for f in art.side_files)
    size = f"{art.bytes / 1e6:.1f} MB" + (
        f" graph + {side / 1e6:.1f} MB of weights in {', '.join(str(f['path']) for f in art.side_files)}"
        if side
        else ""
    )
    o.line(f"wrote {bundle.root / art.path} ({size}), manifest {bundle.root / 'edgekit.json'}")


def print_export(o: Output, bundle: Any, fused: Mapping[str, Any] | None = None) -> None:
    """The verification table, and what a fused graph baked in."""
    print_verification(o, bundle)
    if fused is not None:
        o.pairs(f"fused {fused['graph']} graph (baked)", fused["baked"])
