"""CLI: `edgekit doctor` (command from /tmp/edgekit-cli/targets.py, merged into edgekit.cli)."""

from __future__ import annotations

import json

from typer.testing import CliRunner

from edgekit.cli import app

runner = CliRunner()


def invoke(*args):
    return runner.invoke(app, [str(a) for a in args], catch_exceptions=False)


def test_doctor_for_one_target_json():
    r = invoke("doctor", "--target", "cpu", "--json")
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)
    assert doc["schema"] == "edgekit.doctor/1" and doc["targets"][0]["runs_with"] == "ort"


def test_doctor_tables_name_install_lines():
    r = invoke("doctor", "--target", "nvidia-gpu")
    assert r.exit_code == 0, r.output
    assert "pip install 'edgekit[trt]'" in r.stdout and "onnxruntime-gpu" in r.stdout
    r = invoke("doctor")
    assert r.exit_code == 0 and "jetson-agx-orin" in r.stdout and "edgekit doctor --target NAME" in r.stdout


def test_doctor_unknown_target_is_one_line():
    r = invoke("doctor", "--target", "jetson-nano")
    assert r.exit_code == 2 and "target 'jetson-nano' is unknown" in r.output and "Traceback" not in r.output


def test_doctor_for_a_snapdragon_target_checks_qnn_not_tensorrt():
    import pytest

    pytest.importorskip("onnxruntime_qnn")
    r = invoke("doctor", "--target", "snapdragon-8-gen-3")
    assert r.exit_code == 0, r.output
    assert "tensorrt is not installed" not in r.stdout and "runs with qnn" in r.stdout
    r = invoke("doctor")
    row = next(line for line in r.stdout.splitlines() if "snapdragon-8-gen-3" in line)
    assert "qnn" in row and "—" not in row
