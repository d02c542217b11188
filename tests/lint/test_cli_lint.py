"""CLI: `edgekit lint` (command from /tmp/edgekit-cli/targets.py, merged into edgekit.cli)."""

from __future__ import annotations

import json

import onnx
from typer.testing import CliRunner

from edgekit.bundle import Bundle
from edgekit.cli import app
from edgekit.spec import TensorSpec

runner = CliRunner()


def invoke(*args):
    return runner.invoke(app, [str(a) for a in args], catch_exceptions=False)


def test_lint_clean_demo_exits_0(demo_bundles):
    r = invoke("lint", demo_bundles["masked"], "--target", "cpu")
    assert r.exit_code == 0, r.output
    assert "0 error(s)" in r.stdout and "deploys" in r.stdout


def test_lint_bad_bundle_exits_4_with_a_table(bad_graph, tmp_path):
    bundle = Bundle.new(
        tmp_path / "bad",
        model={"name": "bad", "kind": "masked", "meta": {"vocab_size": 4, "mask_id": 4, "seq_len": 4}},
        inputs={"x": TensorSpec((2, 16), "float32"), "k": TensorSpec((1,), "int64")},
        outputs={"values": TensorSpec((2, 4), "float32")},
        decode_defaults={},
    )
    staged = bundle.staging_path("fp32.onnx")
    onnx.save(onnx.load(str(bad_graph)), str(staged))
    bundle.add_artifact("fp32", staged, made_by="test", config={}, suffix=".onnx")
    bundle.save()
    r = invoke("lint", bundle.root, "--target", "nvidia-gpu")
    assert r.exit_code == 4, r.output
    assert "RandomNormalLike" in r.stdout and "will not deploy" in r.stdout
    # one error line, as `check` ends, for a CI log's last line: the count, the target, the first rule
    errors = [line for line in r.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "lint failed: 5 error-level finding(s) for target nvidia-gpu" in errors[0], r.stderr
    r = invoke("lint", bundle.root, "--target", "nvidia-gpu", "--json")
    doc = json.loads(r.stdout)
    assert r.exit_code == 4 and doc["schema"] == "edgekit.lint/1" and doc["passed"] is False
    assert {f["rule"] for f in doc["findings"] if f["severity"] == "error"} == {
        "qdq",
        "random-op",
        "static-shapes",
        "topk",
    }
