"""edgekit debug --fix on a bundle that fails check: the smallest fix, proven with check's gate,
written into the bundle; `quantize --overrides` of the written file reproduces it."""

from __future__ import annotations

import json
import shlex

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
    # fc2 breaks at every step alike (no range drift): the op fixes come before --step-buckets.
    assert not doc["compounding"]["step_dependent"] and [t["kind"] for t in doc["fix"]["tried"]] == ["weight-only"]
    assert doc["passed"] and winner["after"]["margin"] >= 0
    assert doc["summary"].endswith(
        f"fixed by fc2 (MatMul) weight-only: check passes, margin {winner['after']['margin']:+.2f}"
    )

    bundle = Bundle.load(path)
    art = bundle.artifact("quantize-overrides")
    assert art.made_by == "debug" and art.config["module"] == "fc2" and art.config["fix"] == "weight-only"
    written = json.loads(bundle.path_of("quantize-overrides").read_text())
    assert written["schema"] == "edgekit.quantize-overrides/1" and written["overrides"] == winner["overrides"]
    assert bundle.manifest["quantization"]["config"]["overrides"] == winner["overrides"]
    assert invoke("check", path).exit_code == 0

    # A re-quantize of the original bundle with the written file (the line debug gives) reproduces the fix.
    again = copy_bundle(outlier, tmp_path / "again")
    line = winner["reproduce"].replace(str(path), str(again), 1)
    assert (
        f"--overrides {bundle.path_of('quantize-overrides')}" in line
        and "--no-fallback" in line
        and "--isa avx2" in line
    )
    r = invoke(*shlex.split(line)[1:])
    assert r.exit_code in (0, 4), r.output  # its own budget may still fail: check's gate decides
    assert invoke("check", again).exit_code == 0


def test_fix_quantizes_for_the_cpu_class_the_model_was_made_for_not_this_host(outlier, tmp_path):
    """A bundle quantized with --isa host records the class it resolved to; a fix made on another
    machine (or its reproduce line run there) must quantize for that class, not the new host's."""
    from edgekit.debug.fix import recorded_config, reproduce

    path = copy_bundle(outlier, tmp_path / "made-elsewhere")
    manifest_path = path / "edgekit.json"
    manifest = json.loads(manifest_path.read_text())
    manifest["quantization"]["config"]["isa"] = "host"  # as `edgekit quantize` without --isa records it
    manifest["quantization"]["arithmetic"]["isa"] = "avx512-vnni"  # ... on a VNNI machine
    manifest_path.write_text(json.dumps(manifest))
    cfg = recorded_config(Bundle.load(path))
    assert cfg.isa == "avx512-vnni"
    assert "--isa avx512-vnni" in reproduce(path, "quantize-overrides.json", cfg)
