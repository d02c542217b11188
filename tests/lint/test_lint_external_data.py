"""`edgekit lint` of a model whose weights live in a side file (issue #42, item 2), under
protobuf's limit scaled down to the masked demo (tests/external_data.py): every target's rules
read the graph without loading it whole, the size rules weigh the side file too, and the .ort
format's 2 GiB is its own rule (tests/builder/test_build_external_data.py)."""

import json

import pytest
from typer.testing import CliRunner

from edgekit.bundle import Bundle
from edgekit.cli import app
from edgekit.lint import lint_onnx
from tests.external_data import scaled_limit


@pytest.mark.parametrize("target", ["cpu", "intel-cpu", "jetson-orin-nano", "snapdragon-8-gen-3", "android-arm64"])
def test_every_target_lints_the_graph_without_loading_it_whole(external_bundles, target):
    if target == "snapdragon-8-gen-3":
        pytest.importorskip("onnxruntime_qnn")
    with scaled_limit():
        r = CliRunner().invoke(app, ["lint", str(external_bundles["external"]), "--target", target, "--json"])
    assert r.exit_code == 0, r.output
    assert not [f for f in json.loads(r.stdout)["findings"] if f["severity"] == "error"]


def test_the_memory_rule_weighs_the_side_file(external_bundles, tmp_path):
    toml = tmp_path / "small.toml"
    toml.write_text('runtimes = ["ort"]\nprecisions = ["fp32"]\n[lint]\nmemory_budget_mb = 5\n')
    path = Bundle.load(external_bundles["external"]).path_of("fp32")
    assert path.stat().st_size < 1_000_000  # the graph alone: its 3.3 MB of weights are beside it
    with scaled_limit():
        (mem,) = [f for f in lint_onnx(path, toml) if f.rule == "memory"]
    assert mem.severity == "warning" and "model weights are 3 MB" in mem.message
