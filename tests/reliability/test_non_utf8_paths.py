"""Paths that are not valid UTF-8 (issue #45, point 5): a bundle folder named ``b\\xff\\xfe`` was a
TypeError inside ONNX Runtime's bindings (run, quantize), ``export -o $'x\\xff'`` one inside
onnx's, and unpacking a tarball packed from such a folder failed *after* its swap. Each is now one
line before any work, and unpack never fails once the new bundle is in place."""

from __future__ import annotations

import io
import os
import shutil
import sys
import tarfile
from pathlib import Path

import pytest
from typer.testing import CliRunner

from edgekit.bundle import Bundle
from edgekit.cli import app

runner = CliRunner()
BAD = b"b\xff\xfe"

pytestmark = pytest.mark.skipif(
    sys.getfilesystemencoding().lower() not in ("utf-8", "utf8"), reason="a UTF-8 file system"
)


def _one_line(r, code, *needles):
    assert r.exit_code == code, r.output
    assert "Traceback" not in r.output and r.stderr.count("error:") == 1, r.stderr
    for needle in needles:
        assert needle in r.stderr, r.stderr


@pytest.fixture
def odd_bundle(tiny_bundles, tmp_path):
    """The tiny masked bundle in a folder whose name is not UTF-8 (str with surrogate escapes)."""
    path = os.fsdecode(os.fsencode(tmp_path) + b"/" + BAD)
    shutil.copytree(tiny_bundles["masked"], path)
    return path


@pytest.mark.parametrize(
    "args",
    [
        ["run", "{b}", "--precision", "fp32", "--cond", "class_id=1"],
        ["inspect", "{b}"],
        ["quantize", "{b}", "--calib-samples", "2", "--eval-samples", "2"],
        ["build", "{b}", "--target", "cpu"],
        ["check", "{b}", "--candidate", "fp32", "--reference", "ort:fp32"],
        ["lint", "{b}"],
        ["pack", "{b}", "-o", "{tmp}/x.tar.gz"],
    ],
)
def test_a_bundle_at_a_non_utf8_path_is_one_line(odd_bundle, tmp_path, args):
    before = sorted(os.listdir(odd_bundle))
    r = runner.invoke(app, [a.format(b=odd_bundle, tmp=tmp_path) for a in args])
    _one_line(r, 1, "is not valid UTF-8", repr(BAD)[2:-1])
    assert sorted(os.listdir(odd_bundle)) == before  # nothing written into it


@pytest.mark.parametrize(
    "args",
    [
        ["export", "tiny", "-o", "{odd}"],
        ["run", "{b}", "--cond", "class_id=1", "-o", "{odd}.npz"],
        ["demo", "-o", "{odd}"],
        ["unpack", "{tmp}/none.tar.gz", "-o", "{odd}"],
    ],
)
def test_output_paths_that_are_not_utf8_are_refused_before_the_work(tiny_bundles, tmp_path, args):
    odd = os.fsdecode(os.fsencode(tmp_path) + b"/x\xff")
    r = runner.invoke(app, [a.format(b=tiny_bundles["masked"], odd=odd, tmp=tmp_path) for a in args])
    _one_line(r, 2, "is not valid UTF-8")
    assert not os.path.exists(odd) and not os.path.exists(odd + ".npz")


def _archive_from(folder: Path, top: bytes, dest: Path) -> Path:
    """A tarball of ``folder``'s files under the top folder ``top`` (as `tar czf` makes from
    such a folder)."""
    with tarfile.open(dest, "w:gz") as tar:
        for path in sorted(folder.iterdir()):
            if path.name.startswith("."):
                continue
            data = path.read_bytes()
            info = tarfile.TarInfo(os.fsdecode(top + b"/" + os.fsencode(path.name)))
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return dest


def test_unpacking_a_tarball_of_a_non_utf8_folder_fails_before_any_swap(tiny_bundles, tmp_path):
    archive = _archive_from(tiny_bundles["masked"], BAD, tmp_path / "odd.tar.gz")
    out = tmp_path / "out"
    out.mkdir()
    (out / "keep.txt").write_text("mine")
    r = runner.invoke(app, ["unpack", str(archive), "-o", str(out)])
    _one_line(r, 1, "not valid UTF-8")
    assert sorted(os.listdir(out)) == ["keep.txt"]  # no staging folder, no half bundle


def test_unpack_never_fails_after_its_swap(tiny_bundles, tmp_path, monkeypatch):
    """What follows the swap (forgetting this user's export record) cannot fail the command: the
    record's path that cannot be computed is a record that does not exist."""
    from edgekit import _userhooks
    from edgekit.deploy import pack_bundle

    src = shutil.copytree(tiny_bundles["masked"], tmp_path / "masked")
    pack_bundle(src, tmp_path / "m.tar.gz")

    def broken(root):
        raise UnicodeEncodeError("utf-8", "\udcff", 0, 1, "surrogates not allowed")

    monkeypatch.setattr(_userhooks, "_record_path", broken)
    r = runner.invoke(app, ["unpack", str(tmp_path / "m.tar.gz"), "-o", str(tmp_path / "out")])
    assert r.exit_code == 0, r.output
    Bundle.load(tmp_path / "out" / "masked")


def test_the_export_record_of_a_non_utf8_path_is_keyed_by_its_bytes(tmp_path):
    from edgekit._userhooks import _record_path

    odd = Path(os.fsdecode(os.fsencode(tmp_path) + b"/" + BAD))
    assert _record_path(odd) != _record_path(tmp_path / "b")
