"""`edgekit check` through the CLI: exit 0 pass / 4 fail / 1 error, the table, --json, --junit,
baselines. Needs the `check` command from /tmp/edgekit-cli/check.py merged into edgekit/cli.py."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET

import pytest
from typer.testing import CliRunner

from edgekit.cli import app
from edgekit.evaluate.thresholds import DEFAULTS

runner = CliRunner()


def invoke(*args):
    return runner.invoke(app, [str(a) for a in args])


def _error_line(r) -> str:
    """The error is one line, the last on stderr (a progress line may precede it)."""
    lines = r.stderr.strip().splitlines()
    assert lines and lines[-1].startswith("error:"), r.stderr
    return lines[-1]


@pytest.fixture
def clean(bundle_with):
    return bundle_with("masked", fp32_perturb=0.0, name="clean")  # int8 = an exact copy of fp32


@pytest.fixture
def damaged(bundle_with):
    return bundle_with("masked", fp32_perturb=4.0, name="damaged")


def test_pass_exits_0_with_a_table(clean):
    r = invoke("check", clean, "--n", 2)
    assert r.exit_code == 0, r.output
    out = r.stdout
    assert "ort:int8 vs ort:fp32" in out and "token_agreement" in out and "logits_kl" in out
    rules = DEFAULTS["masked"]
    assert f"≥ {rules['token_agreement'].threshold:.4g}" in out and f"≤ {rules['logits_kl'].threshold:.4g}" in out
    assert "pass" in out and "info" in out
    assert "FAIL" not in out and "PASS" in out


def test_failure_exits_4_names_the_metric_and_marks_the_row(damaged):
    r = invoke("check", damaged, "--n", 2)
    assert r.exit_code == 4, r.output
    assert "FAIL" in r.stdout
    last = _error_line(r)
    assert last.startswith("error: check failed:")
    assert "logits_kl" in last or "top1_agreement" in last
    assert "Traceback" not in r.output


def test_json_is_one_document_even_when_failing(damaged):
    r = invoke("check", damaged, "--n", 2, "--json")
    assert r.exit_code == 4
    doc = json.loads(r.stdout)
    assert doc["schema"] == "edgekit.check/1" and doc["passed"] is False and doc["failed"]
    assert {row["metric"] for row in doc["rows"]} == set(doc["metrics"])


def test_junit_and_baselines(clean, tmp_path):
    base, report = tmp_path / "base.json", tmp_path / "report.xml"
    r = invoke("check", clean, "--n", 2, "--save-baseline", base, "--junit", report)
    assert r.exit_code == 0, r.output
    assert f"wrote baseline {base}" in r.stdout and f"wrote JUnit XML {report}" in r.stdout
    suite = ET.parse(report).getroot().find("testsuite")
    assert suite.get("failures") == "0" and int(suite.get("tests")) >= 5
    r = invoke("check", clean, "--n", 2, "--baseline", base)
    assert r.exit_code == 0, r.output
    r = invoke("check", clean, "--n", 4, "--baseline", base)  # another evaluation set: not comparable
    assert r.exit_code == 1 and "n: baseline 2, this run 4" in _error_line(r)


def test_reference_candidate_and_runtime_reach_the_check(clean):
    r = invoke(
        "check",
        clean,
        "--reference",
        "ORT:FP32",
        "--candidate",
        "int8",
        "--runtime",
        "ort",
        "--n",
        2,
        "--seed",
        3,
        "--json",
    )
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)
    assert (doc["reference"], doc["candidate"], doc["seed"], doc["n"]) == ("ort:fp32", "ort:int8", 3, 2)


@pytest.mark.parametrize(
    "args,code,needle",
    [
        (["--thresholds", "{toml}"], 1, "unknown key masked.token_agrement; valid: token_agreement"),
        (["--candidate", "int4"], 2, "--candidate 'int4' is not a variant"),
        (["--reference", "fp32", "--candidate", "ort:fp32"], 2, "nothing to compare"),
        (["--baseline", "{tmp}/missing.json"], 1, "does not exist"),
    ],
)
def test_errors_exit_1_or_2_in_one_line(clean, tmp_path, args, code, needle):
    toml = tmp_path / "t.toml"
    toml.write_text("[masked]\ntoken_agrement = 0.9\n")
    args = [a.format(toml=toml, tmp=tmp_path) for a in args]
    r = invoke("check", clean, "--n", 2, *args)
    assert r.exit_code == code, r.output
    assert needle in _error_line(r) and "Traceback" not in r.output


def test_missing_int8_exits_1_and_says_quantize(demo_bundles):
    r = invoke("check", demo_bundles["masked"])
    assert r.exit_code == 1 and "edgekit quantize" in _error_line(r)


def test_help_shows_examples_and_exit_codes():
    r = invoke("check", "--help")
    assert r.exit_code == 0
    assert "--junit" in r.stdout and "--save-baseline" in r.stdout and "Exit codes" in r.stdout


def test_table_printer_takes_a_json_round_tripped_document(bundle_with, capsys):
    """`edgekit deploy --command check` prints the remote --json document with the same printer:
    infinities arrive as strings there."""
    from edgekit.check import CheckConfig, check_bundle
    from edgekit.check.render import print_check
    from edgekit.output import Output, jsonable

    doc = check_bundle(bundle_with("flow", fp32_perturb=0.0), CheckConfig(n=2))
    doc = json.loads(json.dumps(jsonable(doc)))
    assert doc["metrics"]["snr_db"] == "inf"  # an exact copy
    print_check(Output(), doc)
    out = capsys.readouterr().out
    assert "snr_db" in out and "PASS" in out and "velocity_snr_db_per_step: inf  inf  inf  inf" in out
