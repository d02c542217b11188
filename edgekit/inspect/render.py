"""`edgekit inspect`'s console output: a bundle's manifest for people (model, IO, artifacts, what
quantize kept float, verification)."""

from __future__ import annotations

from typing import Any

from edgekit.bundle import SCHEMA, Bundle
from edgekit.output import Output

# What inspect says of an int8 model that matches, or that quantize left no record of.
INT8_STATUS = {
    "matches": "int8 model: the one `edgekit quantize` made (sha256 as recorded)",
    "not recorded": "int8 model: not recorded by quantize (an older edgekit, or not made by quantize): not compared",
}


def print_bundle(o: Output, b: Bundle, doc: dict[str, Any]) -> None:
    """The manifest for people; ``doc`` (``inspect_bundle``'s) adds whether the int8 model is quantize's."""
    o.pairs(
        f"bundle {b.root}",
        {
            "model": b.name,
            "kind": b.kind,
            "source": b.source,
            "schema": SCHEMA,
            **{f"meta.{k}": v for k, v in b.meta.items() if k != "conditioning"},
        },
    )
    o.table(
        "inputs / outputs",
        ["tensor", "role", "dtype", "shape"],
        [(n, "input", s.dtype, list(s.shape)) for n, s in b.inputs.items()]
        + [(n, "output", s.dtype, list(s.shape)) for n, s in b.outputs.items()],
    )
    arts = [b.artifact(n) for n in b.artifact_names]
    o.table(
        "artifacts",
        ["name", "path", "MB", "sha256", "made by"],
        [(a.name, a.path, a.bytes / 1e6, a.sha256[:12], a.made_by) for a in arts],
    )
    q = b.quantization
    if q is not None and q.int8_weight_share is not None:
        tables = f"; embedding tables int8: {', '.join(q.int8_tables)}" if q.int8_tables else ""
        o.line(f"int8 model: {q.int8_weight_share:.1%} of weight values stored 8-bit{tables}")
    if q is not None and q.float_nodes:
        o.table(
            "kept float by quantize (torch module, FP32 graph node; `--float-set nncf|openvino|ort` names them for "
            "other quantizers)",
            ["module", "FP32 node", "precision", "source"],
            [
                (
                    f.module,
                    ", ".join(f.fp32_nodes or ()) or f"{f.node} (prepared graph)",
                    f.precision,
                    f.source,
                )
                for f in q.float_nodes
            ],
        )
    for name, ver in b.verification.items():
        status = "passed" if ver.passed else "FAILED"
        o.line(f"verification of {name}: {status} ({ver.reference} vs {ver.candidate}, {ver.samples} inputs)")
    match = doc["int8_match"]
    if match is not None and match["status"] in INT8_STATUS:
        o.line(INT8_STATUS[match["status"]])
    for w in doc["warnings"]:
        o.warn(w)
