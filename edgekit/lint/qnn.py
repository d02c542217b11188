"""Lint by compiling: a model for a Snapdragon target is compiled for its HTP (the Hexagon NPU's
backend of onnxruntime-qnn, emulated on x86) with CPU fallback off, and every node the backend
refuses becomes one finding with the fix."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from edgekit._deps import require
from edgekit._sidefiles import model_bytes
from edgekit.lint.findings import Finding
from edgekit.lint.qnn_locate import LOCATE_MAX_BYTES, LOCATE_MAX_COMPILE_S, locate
from edgekit.runtimes import (
    qnn as qnn_backend,  # imports onnxruntime-qnn only when a function runs
)
from edgekit.runtimes.onnx_file import load_onnx
from edgekit.targets import Target

# Ops whose output shape depends on the data: no static NPU graph can hold them.
_DATA_DEPENDENT = frozenset({"NonZero", "Unique", "NonMaxSuppression", "Compress", "Loop", "If", "Scan"})
# The HTP backend's ops hold tensors of up to 5 dimensions: measured on onnxruntime-qnn 2.7's HTP
# emulation (v73, v75; fp16): Reshape and Transpose to rank 5 compile; to rank 6 or 7 they are
# refused with no reason in the log, except some 6-D tensors with a leading 1 that it folds
# ([1, 8, 8, 2, 2, 16] compiles, [2, 8, 8, 2, 2, 16] and diffusers' SD3 unpatchify [1, 16, 8, 2, 8, 2]
# do not). DiT-style patchify / unpatchify (SD3, PixArt, DiT) goes through such a 6-D tensor, so
# a refused node is told its rank where it is over.
HTP_MAX_RANK = 5
_RANK_FIX = (
    "op rewrite: keep every tensor at rank <= 5 (fold the batch or one patch dimension into its "
    "neighbour around the 6-D reshape/transpose of a patchify or unpatchify), then re-export"
)
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


def node_ranks(model_path: Path) -> dict[str, int]:
    """{node name: the highest rank among its inputs and outputs} where the graph's shapes say
    it (value_info, else ONNX shape inference on the graph without its weights); {} where they
    cannot be read: the ranks only add a reason to a refusal."""
    onnx = require("onnx")
    try:
        model = load_onnx(model_path)
        graph = model.graph
        if not graph.value_info:
            graph = onnx.shape_inference.infer_shapes(model).graph
    except Exception:  # noqa: BLE001 - an unreadable graph is reported by the compile itself
        return {}
    ranks = {
        v.name: len(v.type.tensor_type.shape.dim)
        for v in (*graph.input, *graph.output, *graph.value_info)
        if v.type.tensor_type.HasField("shape")
    }
    return {
        n.name: max((ranks[t] for t in (*n.input, *n.output) if t in ranks), default=0) for n in graph.node if n.name
    }


def refusal(where: str, found: dict[str, str], artifact: str, rank: int) -> Finding:
    """One refused node as a finding: the fix for its op, or for its rank where that is over
    what the HTP holds."""
    what = f"{found['op']}{' as ' + found['qnn_op'] if found.get('qnn_op') else ''}"
    over = rank > HTP_MAX_RANK
    reason = f": a rank-{rank} tensor, over the {HTP_MAX_RANK} dimensions the HTP's ops hold" if over else ""
    return Finding(
        "error",
        "npu-refused",
        artifact,
        f"{where} refused node {found['node']!r} ({what}){reason}",
        hint=_RANK_FIX if over else fix_for(found["op"], artifact),
        nodes=(found["node"],),
        op=found["op"],
        by=where,
    )


def whole_graph_refusal(
    where: str, artifact: str, message: str, model_path: Path, options: Any, seconds: float
) -> Finding:
    """A compile that failed with no node refused: where it breaks (``qnn_locate``), when one
    compile is quick enough to bisect the graph, and the rewrite."""
    said = f"{where} could not compile {artifact}: {message}"
    if seconds > LOCATE_MAX_COMPILE_S or model_bytes(model_path) > LOCATE_MAX_BYTES:
        why = f"one compile took {seconds:.0f} s" if seconds > LOCATE_MAX_COMPILE_S else "over 1 GiB of weights"
        return Finding("error", "npu-compile", artifact, f"{said} (not bisected: {why})", hint=fix_for("", artifact))

    def compiles(prefix: Path) -> bool | None:
        try:
            with qnn_backend.QnnRuntime(prefix, options):
                return True
        except qnn_backend.QnnCompileError:
            return False
        except Exception:  # noqa: BLE001 - a prefix ORT itself cannot load says nothing of the backend
            return None

    found = locate(model_path, compiles)
    if found is None:
        return Finding("error", "npu-compile", artifact, said, hint=fix_for("", artifact))
    return Finding(
        "error",
        "npu-compile",
        artifact,
        (
            f"{said}; the graph compiles up to node {found.index - 1} of {found.nodes} and fails once node "
            f"{found.node!r} ({found.op}) joins it ({found.compiles} compiles of its prefixes)"
        ),
        hint=found.hint(),
        nodes=(found.node,),
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
            return [whole_graph_refusal(where, artifact, exc.message, model_path, options, exc.seconds)]
        ranks = node_ranks(model_path)
        return [refusal(where, f, artifact, ranks.get(f["node"], 0)) for f in exc.findings]
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
