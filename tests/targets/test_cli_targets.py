"""CLI: `edgekit targets` and `edgekit doctor` (commands from /tmp/edgekit-cli/targets.py, merged into edgekit.cli)."""

from __future__ import annotations

import json

from typer.testing import CliRunner

from edgekit.cli import app

runner = CliRunner()


def invoke(*args):
    return runner.invoke(app, [str(a) for a in args], catch_exceptions=False)


def test_targets_table_and_json():
    r = invoke("targets")
    assert r.exit_code == 0, r.output
    for name in ("cpu", "jetson-orin-nano", "android-arm64", "rpi5", "intel-cpu", "intel-gpu", "intel-npu"):
        assert name in r.stdout
    r = invoke("targets", "--json")
    doc = json.loads(r.stdout)
    assert doc["schema"] == "edgekit.targets/1" and doc["targets"][0]["name"] == "cpu" and len(doc["targets"]) == 20
    assert doc["targets"][0]["ort"]["providers"] == ["CPUExecutionProvider"]


def test_targets_fit_80_columns_with_whole_descriptions():
    """At 80 columns the description column was squeezed to a dozen characters per line
    (issue #31): every line fits, and each description reads whole (wrapped below its target)."""
    doc = json.loads(invoke("targets", "--json").stdout)
    for width in (80, 200):
        r = runner.invoke(app, ["targets"], env={"COLUMNS": str(width), "TERMINAL_WIDTH": str(width)})
        assert r.exit_code == 0, r.output
        lines = r.stdout.splitlines()
        assert max(len(line) for line in lines) <= width, width
        flat = " ".join(" ".join(line.replace("│", " ").split()) for line in lines)
        for t in doc["targets"]:
            assert " ".join(t["description"].split()) in flat, (width, t["name"])
