"""OpenVINO coverage of a model for an Intel target: its ONNX frontend converts the graph (or
names what it cannot), and, where the target's device is on this host, ``query_model`` says
which ops that device's plugin runs. OpenVINO is imported only when a function runs."""

from __future__ import annotations

from pathlib import Path

from edgekit.host import module_available
from edgekit.lint.findings import Finding
from edgekit.lint.ops import shown_names
from edgekit.runtimes import openvino as ov_backend  # imports openvino only when a function runs
from edgekit.runtimes import openvino_engine as ov_engine
from edgekit.targets import Target


def openvino_findings(model_path: Path, target: Target, name: str) -> list[Finding]:
    device = target.openvino.device
    if not module_available("openvino"):
        return [
            Finding(
                "info",
                "unsupported-op",
                name,
                "OpenVINO is not installed here: op support was not checked",
                hint="pip install 'edgekit[openvino]' and lint again",
            )
        ]
    try:
        kinds_by_name, supported = ov_engine.op_support(model_path, device)
    except ov_engine.ConversionError as exc:
        return [
            Finding(
                "error",
                "unsupported-op",
                name,
                exc.message,
                hint="replace the op at export, or run this target's model on ONNX Runtime",
            )
        ]
    version = ov_backend.openvino_version()
    if supported is None:
        return [
            Finding(
                "info",
                "unsupported-op",
                name,
                f"OpenVINO {version} converts every op ({len(kinds_by_name)} "
                f"OpenVINO ops); whether the {device} runs each "
                f"is known only where the {device} is (checked when `edgekit build` compiles on the device)",
            )
        ]
    lacking = tuple(n for n in kinds_by_name if n not in supported)
    if lacking:
        kinds = sorted({kinds_by_name[n] for n in lacking})
        return [
            Finding(
                "error",
                "unsupported-op",
                name,
                (
                    f"OpenVINO's {device} plugin cannot run {', '.join(kinds)} "
                    f"({len(lacking)} op(s): {shown_names(lacking)})"
                ),
                hint="use another target device, or replace the op at export",
                nodes=lacking,
            )
        ]
    return []  # the device's plugin runs every op: nothing to say
