"""A lint finding, its severities and ordering."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import asdict, dataclass
from typing import Any

SEVERITIES: tuple[str, ...] = ("error", "warning", "info")


@dataclass(frozen=True)
class Finding:
    severity: str  # error | warning | info
    # static-shapes, random-op, data-dependent-shape, topk, opset, qdq, unsupported-op, ep-coverage,
    # memory, format, precision, npu-refused, npu-float, npu-compile
    rule: str
    artifact: str  # which bundle artifact ("fp32", "int8") or model file it is about
    message: str
    hint: str | None = None
    nodes: tuple[str, ...] = ()  # offending node names (all of them; the message shows a few)
    op: str = ""  # the offending node's op type, where the finding is about one node's op
    by: str = ""  # the compiler or backend that said it ("HTP v73"), where one did

    def to_json(self) -> dict[str, Any]:
        return asdict(self) | {"nodes": list(self.nodes)}


def has_errors(findings: Iterable[Finding]) -> bool:
    return any(f.severity == "error" for f in findings)


def sort_findings(findings: Iterable[Finding]) -> list[Finding]:
    return sorted(findings, key=lambda f: SEVERITIES.index(f.severity))
