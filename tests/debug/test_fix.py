"""edgekit debug --fix on a bundle that fails check: the smallest fix, proven with check's gate,
written into the bundle; `quantize --overrides` of the written file reproduces it."""

from __future__ import annotations

import json

from typer.testing import CliRunner

from edgekit.bundle import Bundle
from edgekit.cli import app
from tests.debug.conftest import copy_bundle

runner = CliRunner()


def invoke(*args):
    return runner.invoke(app, [str(a) for a in args], catch_exceptions=False)


def test_fix_makes_check_pass_and_quantize_overrides_reproduces_it(outlier, tmp_path):
    path = copy_bundle(outlier, tmp_path / "fixed")
    assert invoke("check", path).exit_code == 4  # the bundle fails check as quantized

    r = invoke("debug", path, "--fix", "--json")
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)
    winner = doc["fix"]["winner"]
    # The smallest change first: fc2's activations float, its weights still INT8.
    assert winner["kind"] == "weight-only" and winner["overrides"][0]["node"] == "node_MatMul_8"
    assert [t["kind"] for t in doc["fix"]["tried"]] == ["weight-only"]
    assert doc["fix"]["unavailable"][0]["kind"] == "step-bucket"
    assert doc["passed"] and winner["after"]["margin"] >= 0
    assert doc["summary"].endswith(f"fixed by fc2 (MatMul) weight-only: check passes, margin {winner['after']['margin']:+.2f}")

    bundle = Bundle.load(path)
    art = bundle.artifact("quantize-overrides")
    assert art.made_by == "debug" and art.config["module"] == "fc2" and art.config["fix"] == "weight-only"
    written = json.loads(bundle.path_of("quantize-overrides").read_text())
    assert written["schema"] == "edgekit.quantize-overrides/1" and written["overrides"] == winner["overrides"]
    assert bundle.manifest["quantization"]["config"]["overrides"] == winner["overrides"]
    assert invoke("check", path).exit_code == 0

    # A re-quantize of the original bundle with the written file reproduces the fix.
    again = copy_bundle(outlier, tmp_path / "again")
    r = invoke("quantize", again, "--overrides", bundle.path_of("quantize-overrides"), "--no-fallback",
               "--calib-samples", 4, "--eval-samples", 4)
    assert r.exit_code in (0, 4), r.output  # its own budget may still fail: check's gate decides
    assert invoke("check", again).exit_code == 0
