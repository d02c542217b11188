"""`edgekit inspect`'s console output: a bundle's manifest for people (model, IO, artifacts, what
quantize kept float, verification)."""

from __future__ import annotations

from edgekit.bundle import SCHEMA, Bundle
from edgekit.output import Output


def print_bundle(o: Output, b: Bundle) -> None:
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
