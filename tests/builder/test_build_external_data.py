"""`edgekit build` of a model whose weights live in a side file (issue #42, item 2), under
protobuf's limit scaled down to the masked demo (tests/external_data.py): every engine's files
are recorded (hash and bytes), an ONNX engine keeps its weights beside it, and each engine
decodes what the embedded twin's engine decodes."""

import json
import shutil
from contextlib import nullcontext

import numpy as np
import pytest
from build_helpers import ORIN_NANO
from typer.testing import CliRunner

from edgekit.builder import build_bundle
from edgekit.bundle import Bundle
from edgekit.cli import app
from tests.external_data import assert_weights_outside, decode, scaled_limit

onnx = pytest.importorskip("onnx")
runner = CliRunner()


def _build(root, target, precision, limited=True):
    with scaled_limit() if limited else nullcontext():
        r = runner.invoke(app, ["build", str(root), "--target", target, "--precision", precision, "--json"])
    assert r.exit_code == 0, r.output
    return json.loads(r.stdout)["engine"]


@pytest.mark.parametrize(
    "target, precision, reads_beside",
    [
        ("cpu", "fp32", True),  # an optimized .onnx: its own weights file
        ("intel-cpu", "fp32", False),  # OpenVINO's compiled blob holds them
        ("android-arm64", "fp32", False),  # the .ort flatbuffer holds them (under 2 GiB)
        ("snapdragon-8-gen-3", "fp16", True),  # EPContext model + its context binary
    ],
)
def test_engine_files_are_recorded_and_decode_like_the_embedded_twin(
    external_bundles, tmp_path, target, precision, reads_beside
):
    if target == "snapdragon-8-gen-3":
        pytest.importorskip("onnxruntime_qnn")
    if target == "intel-cpu":
        pytest.importorskip("openvino")
    roots = {k: shutil.copytree(external_bundles[k], tmp_path / k) for k in ("external", "embedded")}
    entry = _build(roots["external"], target, precision)
    engine = roots["external"] / entry["path"]
    if reads_beside:
        side = entry["external_data"]
        assert assert_weights_outside(engine) == {side["path"].rsplit("/", 1)[-1]}
        assert (roots["external"] / side["path"]).stat().st_size == side["bytes"] > 0
    else:
        assert "external_data" not in entry
    Bundle.load(roots["external"])
    if target == "android-arm64":  # arm64: it does not run here; its graph is the embedded twin's
        return
    _build(roots["embedded"], target, precision, limited=False)
    args = ["--target", target, "--precision", precision]
    got = decode(roots["external"], tmp_path / "ext.npz", *args)
    want = decode(roots["embedded"], tmp_path / "emb.npz", *args, limited=False)
    assert got.keys() == want.keys()
    for key in want:
        np.testing.assert_array_equal(got[key], want[key])


def test_a_changed_engine_weights_file_makes_the_engine_stale(external_bundles, tmp_path):
    root = shutil.copytree(external_bundles["external"], tmp_path / "ext")
    side = root / _build(root, "cpu", "fp32")["external_data"]["path"]
    side.write_bytes(side.read_bytes()[:-4])  # truncated
    r = runner.invoke(app, ["run", str(root), "--target", "cpu", "--cond", "class_id=1"])
    assert r.exit_code == 1 and "engine weights file" in r.stderr and "--rebuild" in r.stderr, r.output
    assert "Traceback" not in r.output


def test_the_qnn_context_binary_is_beside_its_model_under_its_own_name(external_bundles, tmp_path):
    """Two precisions share engines/<target>/: their context binaries must not share a name."""
    pytest.importorskip("onnxruntime_qnn")
    root = shutil.copytree(external_bundles["external"], tmp_path / "ext")
    entry = _build(root, "snapdragon-8-gen-3", "fp16")
    name = entry["external_data"]["path"].rsplit("/", 1)[-1]
    assert name.startswith("ctx-") and name.endswith(".bin") and entry["config"]["ep.context_embed_mode"] == 0
    model = onnx.load(str(root / entry["path"]), load_external_data=False)
    (node,) = model.graph.node
    assert node.op_type == "EPContext"
    assert {a.name: a for a in node.attribute}["ep_cache_context"].s.decode() == name


def test_a_jetson_gets_a_valid_onnx_with_its_weights_beside_it(external_bundles, tmp_path, fake_trt, monkeypatch):
    """The plan is built on the device (here: the fake TensorRT through the real build_engine),
    from an ONNX the checker passes whose side file lies beside it: TensorRT's parse_from_file
    reads it from there (the fake parser loads the weights the same way)."""
    root = shutil.copytree(external_bundles["external"], tmp_path / "ext")
    with scaled_limit():
        r = runner.invoke(app, ["lint", str(root), "--target", "jetson-orin-nano", "--json"])
    assert r.exit_code == 0, r.output
    assert not [f for f in json.loads(r.stdout)["findings"] if f["severity"] == "error"]
    monkeypatch.setenv("EDGEKIT_EXTERNAL_DATA_MB", "0")  # the fake TensorRT keeps the whole graph as its "plan"
    doc = build_bundle(root, "jetson-orin-nano", "fp16", host=ORIN_NANO)
    assert doc["status"] == "built"
    ((parsed, _),) = fake_trt.builds
    assert assert_weights_outside(parsed)
    onnx.checker.check_model(str(parsed), full_check=True)
    weights = {i.name for i in onnx.load(str(parsed)).graph.initializer}  # the weights resolve beside it
    assert len(weights) > 10


def test_a_model_over_the_ort_format_limit_is_refused_in_one_line(external_bundles, tmp_path, monkeypatch):
    """The .ort format is one flatbuffer (2 GiB, no external data): lint says so and build stops
    before the converter runs (here the limit is scaled down to the demo's 3.3 MB)."""
    from edgekit.lint import graph

    monkeypatch.setattr(graph, "ORT_FORMAT_LIMIT", 1 << 20)
    root = shutil.copytree(external_bundles["external"], tmp_path / "ext")
    r = runner.invoke(app, ["lint", str(root), "--target", "android-arm64", "--json"])
    (finding,) = [f for f in json.loads(r.stdout)["findings"] if f["rule"] == "format"]
    assert finding["severity"] == "error" and ".ort format" in finding["message"] and "quantize" in finding["hint"]
    r = runner.invoke(app, ["build", str(root), "--target", "android-arm64"])
    assert r.exit_code == 1 and "holds at most 2 GiB" in r.stderr and "Traceback" not in r.output, r.output
    assert r.stderr.count("error:") == 1
    assert not (root / "engines" / "android-arm64").exists() or not list((root / "engines" / "android-arm64").iterdir())
