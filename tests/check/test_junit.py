"""JUnit XML: parses, one test case per metric, failure and skip counts that match the verdict."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from types import MappingProxyType

from edgekit.check.junit import junit_xml, write_junit
from edgekit.evaluate.thresholds import Baseline, Rule, Thresholds
from edgekit.evaluate.verdict import compare

RULES = Thresholds(
    "masked",
    MappingProxyType(
        {
            "token_agreement": Rule("min", 0.9, tolerance=0.0, floor=0.02),
            "logits_kl": Rule("max", 0.01, tolerance=1.0, floor=0.001, unit="nats"),
            "first_divergence_step": Rule("min", None),
            "top1_agreement": Rule("min", 0.95, tolerance=0.0, floor=0.01),
        }
    ),
)


def _doc(metrics, baseline=None):
    verdict = compare(metrics, RULES, baseline)
    return {
        "model": "masked-demo",
        "kind": "masked",
        "bundle": "b",
        "reference": "ort:fp32",
        "candidate": "ort:int8",
        "n": 16,
        "seed": 0,
        "greedy": False,
        "wall_s": 1.25,
        "created": "2026-11-30T10:00:00+00:00",
        "rows": [r.to_json() for r in verdict.rows],
        "passed": verdict.passed,
    }


def test_junit_counts_and_failure_messages(tmp_path):
    doc = _doc({"token_agreement": 0.5, "logits_kl": 0.05, "first_divergence_step": 3.5, "top1_agreement": 0.99})
    path = write_junit(tmp_path / "reports" / "check.xml", doc)
    root = ET.parse(path).getroot()
    assert root.tag == "testsuites" and root.get("tests") == "4" and root.get("failures") == "2"
    (suite,) = root.findall("testsuite")
    assert (
        suite.get("tests") == "4"
        and suite.get("failures") == "2"
        and suite.get("skipped") == "1"
        and suite.get("errors") == "0"
    )
    assert suite.get("time") == "1.250"
    cases = {c.get("name"): c for c in suite.findall("testcase")}
    assert list(cases) == ["token_agreement", "logits_kl", "first_divergence_step", "top1_agreement"]
    assert {c.get("classname") for c in cases.values()} == {"edgekit.check.masked-demo.ort_int8_vs_ort_fp32"}
    fail = cases["logits_kl"].find("failure")
    assert fail.get("message") == "logits_kl: 0.05 > max 0.01" and fail.get("type") == "threshold"
    assert "value: 0.05 nats" in fail.text and "threshold: max 0.01" in fail.text
    assert cases["token_agreement"].find("failure").get("message") == "token_agreement: 0.5 < min 0.9"
    skipped = cases["first_divergence_step"].find("skipped")
    assert skipped is not None and "3.5" in skipped.get("message")
    assert cases["top1_agreement"].find("failure") is None and cases["top1_agreement"].find("skipped") is None
    props = {p.get("name"): p.get("value") for p in suite.find("properties")}
    assert props["reference"] == "ort:fp32" and props["n"] == "16"


def test_junit_baseline_failure_and_all_pass():
    base = Baseline("b.json", MappingProxyType({}), MappingProxyType({"token_agreement": 0.99}))
    doc = _doc({"token_agreement": 0.95, "logits_kl": 0.001}, base)
    root = ET.fromstring(junit_xml(doc))
    suite = root.find("testsuite")
    assert suite.get("tests") == "2" and suite.get("failures") == "1"
    fail = suite.find("testcase[@name='token_agreement']/failure")
    assert fail.get("type") == "baseline" and "baseline: 0.99" in fail.text
    ok = ET.fromstring(junit_xml(_doc({"token_agreement": 1.0, "logits_kl": 0.0})))
    assert ok.get("failures") == "0" and len(ok.findall(".//testcase")) == 2


def test_junit_escapes_odd_names():
    metrics = {'quality_drop.<odd & "name">': 0.5}
    root = ET.fromstring(junit_xml(_doc(metrics)))
    assert root.find(".//testcase").get("name") == 'quality_drop.<odd & "name">'
