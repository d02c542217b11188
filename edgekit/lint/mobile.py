"""NNAPI/CoreML coverage of a model, by ONNX Runtime's mobile usability checker (imported lazily)."""

from __future__ import annotations

import tempfile
from pathlib import Path

from edgekit._deps import require
from edgekit.lint.findings import Finding
from edgekit.targets import Target


def mobile_ep_findings(model_path: Path, target: Target, name: str) -> list[Finding]:
    """NNAPI/CoreML partitioning as onnxruntime's mobile usability checker estimates it, on the
    graph after ORT's basic optimizations (as `.ort` conversion applies them)."""

    onnx = require("onnx")
    require("onnxruntime")
    from onnxruntime.tools.mobile_helpers import usability_checker
    from onnxruntime.tools.onnx_model_utils import optimize_model

    ep = {"nnapi": "NNAPI", "coreml": "CoreML"}[target.lint.supported_ops]
    with tempfile.TemporaryDirectory(prefix="edgekit-lint-") as tmp:
        optimized = Path(tmp) / model_path.name
        try:
            # Weights written to a side file in the temp folder (a model over 2 GB cannot be
            # written inline), never read back: the structure is what counts.
            optimize_model(model_path, optimized, use_external_initializers=True)
            model = onnx.load(str(optimized), load_external_data=False)
        except Exception as exc:  # noqa: BLE001 - ORT refuses the graph: that is the finding
            return [
                Finding(
                    "error",
                    "ep-coverage",
                    name,
                    f"ONNX Runtime cannot load the graph to check {ep} coverage: {str(exc).splitlines()[0][:200]}",
                    hint="run `edgekit run BUNDLE` to see the full error",
                )
            ]
    model = onnx.shape_inference.infer_shapes(model)  # the graph alone: its weights stayed on disk
    if ep == "NNAPI":
        info = usability_checker.check_nnapi_partitions(model, require_fixed_input_sizes=True)
    else:
        info = usability_checker.check_coreml_partitions(model, True, "coreml_supported_mlprogram_ops.md")
    findings = []
    total, taken = info.num_nodes, info.num_supported_nodes
    others = [
        p
        for p in target.ort.providers
        if p not in ("NnapiExecutionProvider", "CoreMLExecutionProvider", "CPUExecutionProvider")
    ]
    if info.unsupported_ops:
        ops = sorted(o.removeprefix("ai.onnx:") for o in info.unsupported_ops)
        findings.append(
            Finding(
                "warning",
                "ep-coverage",
                name,
                f"{ep} cannot run {', '.join(ops)}: {total - taken} of {total} nodes fall back to the CPU provider "
                f"({info.num_partitions} {ep} partition(s); each boundary copies tensors)",
                hint=f"measure with and without {ep} on the device (`edgekit deploy ... --command profile`)",
            )
        )
    findings.append(
        Finding(
            "info",
            "ep-coverage",
            name,
            f"{ep} can take {taken}/{total} nodes in {info.num_partitions} partition(s) "
            f"(onnxruntime's estimate: {info.suitability().name})"
            + (f"; {', '.join(others)} coverage cannot be checked offline" if others else ""),
        )
    )
    return findings
