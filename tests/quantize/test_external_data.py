"""`edgekit quantize` of a model whose weights live in a side file (issue #42, item 2), under
protobuf's limit scaled down to the masked demo (tests/external_data.py: a model serialized
whole in memory fails here as a 2.25 GiB one fails): the cpu profile with its budget search, the
trt profile, step buckets over one shared weights file, and the qnn profile; each INT8 model is
recorded with its side file, hashed, and computes what the embedded twin's does."""

from __future__ import annotations

import json
import shutil
from contextlib import nullcontext

import pytest
from typer.testing import CliRunner

from edgekit.bundle import Bundle
from edgekit.cli import app
from tests.external_data import decode, scaled_limit

pytest.importorskip("onnxruntime")

# Few rows: the budget search runs all the same (the masked demo falls back a layer or two).
FAST = ["--calib-samples", "4", "--eval-samples", "4", "--json"]


@pytest.fixture(autouse=True)
def _fallback_forms_timed_alike(monkeypatch):
    """The twins must be quantized alike, and the fallback form is decided on this host's timing
    (a tie measures weight-only and may try it with more layers: more candidates). Here weight-only
    times surely slower on a stand-in host, in both twins."""
    from edgekit.probes.speed import decide
    from tests.fakes.host import StandInHost

    def surely_slower(fp, wo, feed, say):
        host = StandInHost(loads=(0.3,))
        fns = {"float": host.call("float", [100]), "weight-only": host.call("weight-only", [150])}
        return decide(fns, 5, pair=lambda t: ("weight-only", "float"), warmup=0, probe=host.probe)

    monkeypatch.setattr("edgekit.quantize.cpu.form.time_forms", surely_slower)


def _quantize(bundle, limited: bool, *args: str) -> dict:
    with scaled_limit() if limited else nullcontext():
        r = CliRunner().invoke(app, ["quantize", str(bundle), *FAST, *args])
    assert r.exit_code in (0, 4), r.output
    return json.loads(r.stdout)


@pytest.mark.parametrize("args", [(), ("--profile", "trt"), ("--step-buckets", "2")], ids=["cpu", "trt", "buckets"])
def test_int8_of_a_model_in_a_side_file_equals_the_embedded_twins(external_bundles, tmp_path, args):
    external = shutil.copytree(external_bundles["external"], tmp_path / "external")
    embedded = shutil.copytree(external_bundles["embedded"], tmp_path / "embedded")
    a, b = _quantize(external, True, *args), _quantize(embedded, False, *args)
    assert a["measured"] == b["measured"] and a["fallback"] == b["fallback"]
    # The search's candidates were derived from the all-INT8 graph (cpu/derive.py), reading its
    # side file and the prepared model's: one quantize_static per scale set (a step bucket each).
    assert a["candidates"]["derived"] > 0 and a["candidates"]["not_derived_because"] is None, a["candidates"]
    assert a["candidates"] == b["candidates"]
    # Sizes count the side files: the graph alone would be a small share of the twin's bytes.
    for key in ("fp32_bytes", "int8_bytes"):
        assert abs(a["sizes"][key] - b["sizes"][key]) <= 0.05 * b["sizes"][key], (a["sizes"], b["sizes"])

    bundle = Bundle.load(external)  # every hash verified, side files included
    names = [n for n in bundle.artifact_names if n == "int8" or n.startswith("int8-bucket-")]
    for name in names:
        art = bundle.manifest["artifacts"][name]
        sides = art.get("side_files") or []
        assert len(sides) == 1, (name, art)  # the INT8 weights are in one listed, hashed side file
        for side in sides:
            assert (external / side["path"]).stat().st_size == side["bytes"]
    assert not [p.name for p in external.iterdir() if p.name.startswith(".") and "staging" in p.name]

    # The INT8 model computes as the twin's does, through run.
    ours = decode(external, tmp_path / "a.npz", "--precision", "int8")
    theirs = decode(embedded, tmp_path / "b.npz", "--precision", "int8", limited=False)
    for key in theirs:
        assert (ours[key] == theirs[key]).all(), key


def test_check_gates_the_int8_model_of_a_side_file_model(external_bundles, tmp_path):
    external = shutil.copytree(external_bundles["external"], tmp_path / "external")
    _quantize(external, True)
    with scaled_limit():
        r = CliRunner().invoke(app, ["check", str(external), "--json"])
    assert r.exit_code in (0, 4), r.output
    assert json.loads(r.stdout)["candidate"].startswith("ort:int8")
