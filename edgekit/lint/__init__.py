"""Will this graph deploy to that target? Static checks of a bundle's ONNX models against a
target's lint rules, before anyone copies anything to a device.

Rules: static graph IO dims; no random ops (edgekit graphs take all noise as inputs); no ops
whose output shape depends on the data; TopK with a constant K within the runtime's limit; the
opset range the target's runtime reads; TensorRT's QDQ rules (int8, zero point 0); ops the
target's execution providers support, where that can be told offline (ONNX Runtime's mobile
usability checker for NNAPI/CoreML, the ONNX-TensorRT support matrix for TensorRT); model size
against the target's memory budget. Each finding has a severity: ``error`` (will not deploy as
is: ``edgekit lint`` exits 4), ``warning`` (deploys, but slower or with a caveat), ``info``.

``findings``: the finding type; ``graph``: rules on one model; ``trt``/``mobile``: per-runtime
rules; ``stage``: over a bundle and the report document; ``render``: the console table.
"""

from edgekit.lint.findings import SEVERITIES, Finding, has_errors, sort_findings
from edgekit.lint.graph import lint_onnx
from edgekit.lint.stage import (
    LINT_SCHEMA,
    lint_bundle,
    lint_report,
    quantization_profile_of,
)

__all__ = [
    "LINT_SCHEMA",
    "SEVERITIES",
    "Finding",
    "has_errors",
    "lint_bundle",
    "lint_onnx",
    "lint_report",
    "quantization_profile_of",
    "sort_findings",
]
