"""`edgekit demo`'s build stage: lint and build one bundle for a target."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from edgekit.builder.stage import build_bundle
from edgekit.bundle import Bundle
from edgekit.lint import lint_report


def demo_build_stage(bundle: str | Path | Bundle, target: str = "cpu", precision: str = "auto") -> dict[str, Any]:
    """`edgekit demo`'s build stage for one bundle: its lint findings and the built engine,
    as a small JSON-ready dict for the demo report and table."""
    root = bundle.root if isinstance(bundle, Bundle) else Path(bundle)
    lint = lint_report(root, target)
    built = build_bundle(root, target, precision)
    engine = built["engine"]
    return {
        "target": built["target"],
        "precision": built["precision"],
        "precision_choice": built["precision_choice"],
        "status": built["status"],
        "engine": engine["path"],
        "format": engine["format"],
        "bytes": engine["bytes"],
        "runtime": f"{engine['runtime']} {engine['runtime_version']}",
        "lint": lint["counts"],
        "lint_passed": lint["passed"],
        "findings": [f"{f['severity']}: {f['message']}" for f in lint["findings"]],
    }
