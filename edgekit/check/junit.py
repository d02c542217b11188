"""JUnit XML for CI systems: one test suite per check, one test case per metric.

A gated metric that failed is a ``<failure>`` whose message carries the measured value and the
threshold (or baseline); a metric that is only reported is ``<skipped>`` with its value, so CI
dashboards show it without counting it as a test that ran.
"""

from __future__ import annotations

import os
import xml.etree.ElementTree as ET
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from edgekit.bundle import STAGING_PREFIX


def _num(value: Any) -> str:
    if value is None:
        return "n/a"
    if isinstance(value, str):
        return value
    return f"{float(value):.6g}"


def _detail(row: Mapping[str, Any]) -> str:
    lines = [f"value: {_num(row['value'])} {row.get('unit') or ''}".rstrip()]
    if row.get("threshold") is not None:
        lines.append(f"threshold: {row['bound']} {_num(row['threshold'])}")
    if row.get("baseline") is not None:
        lines.append(f"baseline: {_num(row['baseline'])} (allowed regression {_num(row.get('allowed_regression'))})")
    return "\n".join(lines)


def junit_xml(doc: Mapping[str, Any]) -> str:
    """The JUnit XML of a check document (``edgekit.check/1``) as a string."""
    rows = doc["rows"]
    failures = sum(1 for r in rows if not r["passed"])
    skipped = sum(1 for r in rows if not r["gated"])
    suites = ET.Element("testsuites", name="edgekit check", tests=str(len(rows)), failures=str(failures), errors="0")
    suite = ET.SubElement(
        suites,
        "testsuite",
        name=f"edgekit check {doc['model']}: {doc['candidate']} vs {doc['reference']}",
        tests=str(len(rows)),
        failures=str(failures),
        errors="0",
        skipped=str(skipped),
        time=f"{float(doc.get('wall_s', 0.0)):.3f}",
        timestamp=str(doc.get("created", "")),
    )
    props = ET.SubElement(suite, "properties")
    for key in ("bundle", "kind", "reference", "candidate", "n", "seed", "greedy"):
        ET.SubElement(props, "property", name=key, value=str(doc.get(key)))
    classname = f"edgekit.check.{doc['model']}.{doc['candidate']}_vs_{doc['reference']}".replace(":", "_")
    for row in rows:
        case = ET.SubElement(suite, "testcase", classname=classname, name=row["metric"], time="0")
        if not row["passed"]:
            kinds = [
                k
                for k, key in (("threshold", "passed_threshold"), ("baseline", "passed_baseline"))
                if row.get(key) is False
            ]
            failure = ET.SubElement(
                case, "failure", message=f"{row['metric']}: {row['reason']}", type="+".join(kinds) or "check"
            )
            failure.text = _detail(row)
        elif not row["gated"]:
            ET.SubElement(
                case, "skipped", message=f"reported only (no threshold): {row['metric']} = {_num(row['value'])}"
            )
        else:
            out = ET.SubElement(case, "system-out")
            out.text = _detail(row)
    ET.indent(suites)
    return ET.tostring(suites, encoding="unicode", xml_declaration=True) + "\n"


def write_junit(path: Path | str, doc: Mapping[str, Any]) -> Path:
    """Write ``junit_xml(doc)`` to ``path`` atomically (a CI step never reads half a file)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f"{STAGING_PREFIX}{path.name}")
    try:
        tmp.write_text(junit_xml(doc))
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
    return path
