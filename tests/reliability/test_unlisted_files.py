"""Files a bundle's manifest does not list (issue #30, item 0): `unpack` refuses an archive member
the manifest does not name and takes the writer lock before it swaps a bundle; an ONNX artifact
reading weights from an unlisted side file (a bundle from an older edgekit) is refused by every
command instead of being run unchecked, packed without its weights, or unpacked as "verified"."""

import fcntl
import io
import json
import os
import shutil
import tarfile

import pytest
from typer.testing import CliRunner

from edgekit._lock import LOCK_NAME
from edgekit._userhooks import bundle_code_problem, remember_export
from edgekit.bundle import MANIFEST, Bundle
from edgekit.cli import app
from edgekit.deploy import pack_bundle, unpack_bundle
from edgekit.errors import BundleError

runner = CliRunner()


def _one_error(r, code=1):
    assert r.exit_code == code, r.output
    assert "Traceback" not in r.output and r.stderr.count("error:") == 1, r.output


@pytest.fixture
def packed(tiny_bundles, tmp_path):
    src = shutil.copytree(tiny_bundles["masked"], tmp_path / "masked")
    pack_bundle(src, tmp_path / "m.tar.gz")
    return tmp_path / "m.tar.gz"


def _with_extra(packed, out, name, data):
    with tarfile.open(packed) as tar:
        members = [(m, tar.extractfile(m).read() if m.isfile() else None) for m in tar.getmembers()]
    with tarfile.open(out, "w:gz") as tar:
        for m, body in members:
            tar.addfile(m, io.BytesIO(body) if body is not None else None)
        info = tarfile.TarInfo(name)
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))
    return out


@pytest.mark.parametrize("extra", ["masked/payload.py", "masked/engines/cpu/evil.so", f"masked/{LOCK_NAME}"])
def test_unpack_refuses_a_member_the_manifest_does_not_list(packed, tmp_path, extra):
    evil = _with_extra(packed, tmp_path / "evil.tar.gz", extra, b"import os\n")
    r = runner.invoke(app, ["unpack", str(evil), "-o", str(tmp_path / "dest"), "--json"])
    _one_error(r)
    assert "does not list" in r.stderr and json.loads(r.stdout)["exit_code"] == 1
    assert not (tmp_path / "dest" / "masked").exists() and not list((tmp_path / "dest").iterdir())


def test_unpack_waits_for_no_one_and_swaps_nothing_under_a_writer(packed, tmp_path):
    dest = tmp_path / "device"
    unpack_bundle(packed, dest)
    before = {p.name: p.stat().st_ino for p in (dest / "masked").iterdir()}
    fd = os.open(dest / "masked" / LOCK_NAME, os.O_RDWR | os.O_CREAT)  # a running quantize
    fcntl.flock(fd, fcntl.LOCK_EX)
    os.pwrite(fd, b'{"pid": 4242, "stage": "quantize"}', 0)
    try:
        r = runner.invoke(app, ["unpack", str(packed), "-o", str(dest)])
    finally:
        os.close(fd)
    _one_error(r)
    assert "is being written by `edgekit quantize` (pid 4242)" in r.stderr
    after = {p.name: p.stat().st_ino for p in (dest / "masked").iterdir() if p.name != LOCK_NAME}
    assert after == before  # the very same files
    assert [p.name for p in dest.iterdir()] == ["masked"]
    unpack_bundle(packed, dest)  # once the writer is gone it goes through
    Bundle.load(dest / "masked")


def test_unpack_over_an_own_export_drops_its_code_trust(packed, tmp_path):
    dest = tmp_path / "device"
    unpack_bundle(packed, dest)
    factory = tmp_path / "factory.py"
    factory.write_text("def make(batch=2):\n    pass\n")
    remember_export(dest / "masked", [f"{factory}:make"])
    assert bundle_code_problem(dest / "masked", f"{factory}:make") is None
    unpack_bundle(packed, dest)
    assert "not exported by you" in bundle_code_problem(dest / "masked", f"{factory}:make")


# ---- an unlisted external-data side file ---------------------------------------------------------
@pytest.fixture
def old_style(tiny_specs, tmp_path):
    """A bundle whose fp32 weights live in a side file the manifest does not list (as edgekit
    wrote them before side files were hashed)."""
    from edgekit.export import ExportConfig
    from edgekit.export.to_bundle import export_bundle

    root = export_bundle(tiny_specs["masked"], tmp_path / "old", ExportConfig(external_data_mb=0), source="tiny").root
    doc = json.loads((root / MANIFEST).read_text())
    side = doc["artifacts"]["fp32"].pop("side_files")[0]["path"]
    (root / MANIFEST).write_text(json.dumps(doc))
    return root, side


@pytest.mark.parametrize(
    "argv",
    [
        ["run", "{b}", "--cond", "class_id=1", "--steps", "2"],
        ["pack", "{b}", "-o", "{t}/o.tar.gz"],
        ["inspect", "{b}"],
        ["build", "{b}", "--target", "cpu"],
    ],
)
def test_unlisted_side_file_is_refused_not_used_unchecked(old_style, tmp_path, argv):
    root, side = old_style
    r = runner.invoke(app, [a.format(b=root, t=tmp_path) for a in argv])
    _one_error(r)
    assert side in r.stderr and "does not list" in r.stderr
    assert not (tmp_path / "o.tar.gz").exists()


def test_unpack_of_a_bundle_missing_its_weights_is_not_verified(old_style, tmp_path):
    """The archive an older pack made: the manifest and the model, not its side file."""
    root, side = old_style
    archive = tmp_path / "old.tar.gz"
    with tarfile.open(archive, "w:gz") as tar:
        for p in sorted(root.iterdir()):
            if p.name != side and not p.name.startswith("."):
                tar.add(p, arcname=f"old/{p.name}")
    with pytest.raises(BundleError, match=f"does not verify: .*{side}"):
        unpack_bundle(archive, tmp_path / "dest")
    assert not (tmp_path / "dest" / "old").exists()


def test_pack_names_the_files_it_leaves_out(tiny_bundles, tmp_path):
    src = shutil.copytree(tiny_bundles["masked"], tmp_path / "masked")
    (src / "notes.txt").write_text("mine")
    doc = pack_bundle(src, tmp_path / "m.tar.gz")
    assert "file notes.txt (the manifest does not name it)" in doc["left_out"]
