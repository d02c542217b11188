"""CLI: `edgekit build` (command from /tmp/edgekit-cli/targets.py, merged into edgekit.cli)."""

from __future__ import annotations

import json

from typer.testing import CliRunner

from edgekit.cli import app

runner = CliRunner()


def invoke(*args):
    return runner.invoke(app, [str(a) for a in args], catch_exceptions=False)


def test_build_cpu_then_android(masked):
    r = invoke("build", masked, "--target", "cpu", "--json")
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)
    assert (
        doc["schema"] == "edgekit.build/1" and doc["status"] == "built" and (masked / doc["engine"]["path"]).is_file()
    )
    r = invoke("build", masked, "--target", "android-arm64")
    assert r.exit_code == 0, r.output
    assert "engine: " in r.stdout and ".ort\n" in r.stdout and "required_operators.config" in r.stdout
    r = invoke("build", masked, "--target", "cpu")
    assert r.exit_code == 0 and "cpu/fp32: up-to-date" in r.stdout


def test_build_errors_are_one_line_with_exit_codes(masked):
    for args, code, needle in (
        (["--target", "jetson-orin-nano", "--precision", "fp16"], 3, "this host is not a Jetson"),
        (["--target", "cpu", "--precision", "int8"], 1, "edgekit quantize"),
        (["--target", "cpu", "--precision", "fp16"], 2, "valid: fp32, int8"),
        (["--target", "no-such-board"], 2, "target 'no-such-board' is unknown"),
    ):
        r = invoke("build", masked, *args)
        assert r.exit_code == code and needle in r.output and "Traceback" not in r.output, (args, r.output)
