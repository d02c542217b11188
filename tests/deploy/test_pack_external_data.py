"""pack / unpack / deploy staging of a bundle whose weights live in side files (issue #42, item 2),
under protobuf's limit scaled down to the masked demo (tests/external_data.py): every side file
(the model's, an engine's) travels with its model, is verified on arrival, and a changed one is
refused."""

import io
import json
import shutil
import tarfile

import pytest
from typer.testing import CliRunner

from edgekit.bundle import Bundle
from edgekit.cli import app
from edgekit.deploy.pack import stage_bundle, unpack_bundle
from edgekit.targets import load_target
from tests.external_data import decode, scaled_limit

runner = CliRunner()


@pytest.fixture(scope="module")
def built(external_bundles, tmp_path_factory):
    """The external bundle with its cpu engine (its own weights file) built."""
    root = shutil.copytree(external_bundles["external"], tmp_path_factory.mktemp("packed") / "ext")
    with scaled_limit():
        r = runner.invoke(app, ["build", str(root), "--target", "cpu"])
    assert r.exit_code == 0, r.output
    return root


def _side_files(root):
    manifest = Bundle.load(root).manifest
    return manifest["artifacts"]["fp32"]["side_files"][0]["path"], manifest["engines"]["cpu/fp32"]["external_data"][
        "path"
    ]


def test_pack_carries_every_side_file_and_unpack_verifies_them(built, tmp_path):
    model_side, engine_side = _side_files(built)
    with scaled_limit():
        r = runner.invoke(app, ["pack", str(built), "--target", "cpu", "-o", str(tmp_path / "b.tar.gz"), "--json"])
    assert r.exit_code == 0, r.output
    assert {model_side, engine_side} <= set(json.loads(r.stdout)["files"])
    with tarfile.open(tmp_path / "b.tar.gz") as tar:
        assert {f"ext/{model_side}", f"ext/{engine_side}"} <= set(tar.getnames())
    with scaled_limit():
        out = unpack_bundle(tmp_path / "b.tar.gz", tmp_path / "device")["bundle"]
    Bundle.load(out)
    got = decode(out, tmp_path / "device.npz", "--target", "cpu")  # the engine loads, not stale
    want = decode(built, tmp_path / "here.npz", "--target", "cpu")
    assert (got["tokens"] == want["tokens"]).all()


@pytest.mark.parametrize("which", [0, 1])  # the model's weights, the engine's weights
def test_a_changed_side_file_in_the_archive_is_refused(built, tmp_path, which):
    changed = _side_files(built)[which]
    src = tmp_path / "b.tar.gz"
    runner.invoke(app, ["pack", str(built), "-o", str(src)])
    bad = tmp_path / "bad.tar.gz"
    with tarfile.open(src) as tar, tarfile.open(bad, "w:gz") as out:
        for member in tar.getmembers():
            data = tar.extractfile(member).read()
            if member.name == f"ext/{changed}":
                data = bytes(64) + data[64:]  # the first 16 weights zeroed
            out.addfile(member, io.BytesIO(data))
    r = runner.invoke(app, ["unpack", str(bad), "-o", str(tmp_path / "device")])
    assert r.exit_code == 1 and changed in r.stderr and "does not match its recorded sha256" in r.stderr, r.output
    assert "Traceback" not in r.output and r.stderr.count("error:") == 1
    assert not (tmp_path / "device" / "ext").exists()


def test_deploy_stages_the_weights_a_jetson_builds_its_plan_from(built, tmp_path):
    doc = stage_bundle(Bundle.load(built), tmp_path / "staged", load_target("jetson-orin-nano"))
    model_side, engine_side = _side_files(built)
    assert model_side in doc["files"] and engine_side not in doc["files"]  # the cpu engine stays home
    Bundle.load(tmp_path / "staged")
