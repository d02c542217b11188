"""Models whose weights live in an ONNX external-data side file (issue #19, item 2), forced on a
tiny model with ``external_data_mb=0``: the side file gets a final content-addressed name, is hashed
(tampering is refused), packed, and survives an interrupted re-export."""

import tarfile

import pytest
from typer.testing import CliRunner

from edgekit.bundle import Bundle
from edgekit.cli import app
from edgekit.errors import BundleError, ExportError

runner = CliRunner()


@pytest.fixture
def external(tiny_specs, tmp_path):
    from edgekit.export import ExportConfig
    from edgekit.export.to_bundle import export_bundle

    return export_bundle(tiny_specs["masked"], tmp_path / "ext", ExportConfig(external_data_mb=0), source="tiny").root


def test_side_file_is_named_hashed_and_recorded(external):
    bundle = Bundle.load(external)
    art = bundle.manifest["artifacts"]["fp32"]
    (side,) = art["side_files"]
    assert side["path"].startswith("fp32-") and side["path"].endswith(".onnx.data")
    assert (external / side["path"]).stat().st_size == side["bytes"] > 0
    assert sorted(p.name for p in external.iterdir() if not p.name.startswith(".")) == sorted(
        ["edgekit.json", art["path"], side["path"]])
    r = runner.invoke(app, ["run", str(external), "--cond", "class_id=1", "--steps", "2"])
    assert r.exit_code == 0, r.output


def test_tampered_side_file_is_refused(external):
    bundle = Bundle.load(external)
    side = external / bundle.manifest["artifacts"]["fp32"]["side_files"][0]["path"]
    data = bytearray(side.read_bytes())
    data[: len(data) // 100 + 1] = bytes(len(data) // 100 + 1)  # zero 1 %
    side.write_bytes(bytes(data))
    with pytest.raises(BundleError, match="side file .* does not match its recorded sha256"):
        Bundle.load(external)


def test_side_file_is_packed_and_unpacks_loadable(external, tmp_path):
    from edgekit.deploy.pack import pack_bundle, unpack_bundle

    doc = pack_bundle(external, tmp_path / "b.tar.gz")
    side = Bundle.load(external).manifest["artifacts"]["fp32"]["side_files"][0]["path"]
    assert side in doc["files"]
    with tarfile.open(tmp_path / "b.tar.gz") as tar:
        assert f"ext/{side}" in tar.getnames()
    out = unpack_bundle(tmp_path / "b.tar.gz", tmp_path / "dest")
    Bundle.load(out["bundle"])  # every hash, side file included


def test_failed_reexport_keeps_the_previous_side_file(external, tiny_specs, monkeypatch):
    from edgekit.export import ExportConfig
    from edgekit.export import to_bundle

    before = Bundle.load(external).manifest["artifacts"]

    def fail(*a, **k):
        raise ExportError("verification interrupted")

    monkeypatch.setattr(to_bundle, "compare", fail)
    with pytest.raises(ExportError):
        to_bundle.export_bundle(tiny_specs["masked"], external, ExportConfig(external_data_mb=0), source="tiny")
    after = Bundle.load(external)  # still loads: old graph and old side file intact
    assert after.manifest["artifacts"] == before
    assert not [p for p in external.iterdir() if p.name.startswith(".staging-")]
