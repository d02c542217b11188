"""Lint by compiling: a model for a Snapdragon target is compiled for its HTP (the Hexagon NPU's
backend of onnxruntime-qnn, emulated on x86) with CPU fallback off, and every node the backend
refuses becomes one finding with the fix."""

from __future__ import annotations

from pathlib import Path

from edgekit.lint.findings import Finding
from edgekit.runtimes import (
    qnn as qnn_backend,  # imports onnxruntime-qnn only when a function runs
)
from edgekit.targets import Target

# Ops whose output shape depends on the data: no static NPU graph can hold them.
_DATA_DEPENDENT = frozenset({"NonZero", "Unique", "NonMaxSuppression", "Compress", "Loop", "If", "Scan"})
_QUANTIZE_FIX = (
    "quantize with `edgekit quantize BUNDLE --profile qnn` (every "
    "op QDQ: uint8/uint16 activations, per-tensor MatMul weights)"
)


def fix_for(op: str, artifact: str) -> str:
    """The fix for a node of ``op`` the HTP refused in ``artifact``."""
    if op in _DATA_DEPENDENT:
        return (
            f"op rewrite: {op} has a data-dependent shape; move it to the host loop or express it with "
            "static-shape ops (masks, TopK of fixed K)"
        )
    if artifact == "int8" or op in ("QuantizeLinear", "DequantizeLinear"):
        return _QUANTIZE_FIX
    return (
        "op rewrite: express it with ops the HTP runs (QNN-ExecutionProvider.md lists them), or re-export with "
        "another --opset; or quantize with --profile qnn if the op only lacks a float kernel"
    )


def qnn_findings(model_path: Path, target: Target, artifact: str) -> list[Finding]:
    """Compile ``model_path`` for ``target``'s HTP (int8 artifacts as QDQ, others in fp16) and
    report what it refused, one finding per node; float compute in an int8 model is a warning."""
    fp16 = artifact != "int8"
    where = f"HTP v{target.qnn.htp_arch or qnn_backend.DEFAULT_HTP_ARCH}"
    if fp16 and "fp16" not in target.precisions:
        return []
    options = qnn_backend.qnn_options_for(target, "fp16" if fp16 else "int8")
    findings: list[Finding] = []
    try:
        with qnn_backend.QnnRuntime(model_path, options) as rt:
            seconds = rt.session_seconds
    except qnn_backend.QnnCompileError as exc:
        if not exc.findings:
            return [
                Finding(
                    "error",
                    "npu-compile",
                    artifact,
                    f"{where} could not compile {artifact}: {exc.message}",
                    hint=fix_for("", artifact),
                )
            ]
        return [
            Finding(
                "error",
                "npu-refused",
                artifact,
                f"{where} refused node {f['node']!r} ({f['op']}{' as ' + f['qnn_op'] if f.get('qnn_op') else ''})",
                hint=fix_for(f["op"], artifact),
                nodes=(f["node"],),
            )
            for f in exc.findings
        ]
    if not fp16:
        floats = qnn_backend.float_nodes(model_path)
        if floats:
            shown = ", ".join(f"{f['node']} ({f['op']})" for f in floats[:4])
            findings.append(
                Finding(
                    "warning",
                    "npu-float",
                    artifact,
                    (
                        f"{len(floats)} node(s) of the int8 model compute in "
                        f"float (the HTP runs them in fp16, not int8): {shown}"
                    ),
                    hint=_QUANTIZE_FIX,
                    nodes=tuple(f["node"] for f in floats),
                )
            )
    findings.append(
        Finding(
            "info",
            "npu-compile",
            artifact,
            (
                f"compiles for {where} ({'fp16' if fp16 else 'QDQ'}) with "
                f"CPU fallback off in {seconds:.2f} s: every node on the NPU"
            ),
        )
    )
    return findings
