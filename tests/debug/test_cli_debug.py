"""`edgekit debug` on the command line: wrong arguments are one clear line and exit 2 (with
--json, the one error document); the exit codes follow check's."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from edgekit.cli import app

runner = CliRunner()


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--candidate", "ort:int4"], "--candidate 'ort:int4' is not a variant; valid: runtime:precision"),
        (
            ["--reference", "int8", "--candidate", "int8"],
            "--reference and --candidate are both ort:int8: nothing to compare",
        ),
        (
            ["--fix", "--candidate", "openvino:fp32"],
            "--fix re-quantizes the int8 model; --candidate openvino:fp32 is not one",
        ),
        (["--threshold", "nan"], "--threshold nan is out of bounds; valid: a number from -1000 to 1000 dB"),
        (["--isa", "avx9"], "--isa 'avx9' is unknown; valid: host, avx2"),
        (["--rows", "0"], "--rows"),
    ],
)
def test_wrong_arguments_are_one_line_and_exit_2(outlier, args, message):
    r = runner.invoke(app, ["debug", str(outlier), *args])
    assert r.exit_code == 2, r.output
    assert message in r.output and "Traceback" not in r.output
    assert len([line for line in r.stderr.splitlines() if line.startswith("error:")]) == 1


def test_json_usage_error_is_one_document(outlier):
    r = runner.invoke(app, ["debug", str(outlier), "--candidate", "tflite:int8", "--json"])
    assert r.exit_code == 2
    doc = json.loads(r.stdout)
    assert doc["exit_code"] == 2 and "--candidate 'tflite:int8' is not a variant" in doc["error"]


def test_a_failing_candidate_exits_4_with_the_summary(outlier):
    r = runner.invoke(app, ["debug", str(outlier)])
    assert r.exit_code == 4, r.output
    assert "of 4, fc2 (MatMul):" in r.stdout and "check fails, margin -" in r.stdout
    assert "check fails on" in r.stderr and "--fix" in r.stderr


def test_a_missing_bundle_is_exit_1(tmp_path):
    r = runner.invoke(app, ["debug", str(tmp_path / "nope")])
    assert r.exit_code == 1 and "does not exist" in r.stderr
