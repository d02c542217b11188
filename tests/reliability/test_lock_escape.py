"""A bundle that arrives (git, rsync, zip) with a hostile ``.edgekit.lock`` (issue #30, item 0):
the writer lock is opened without following links, so no writing stage can truncate, create or
write the file it points at; each such bundle is refused with one line naming the lock file."""

import os
import shutil

import pytest
from typer.testing import CliRunner

from edgekit._lock import LOCK_NAME, bundle_lock
from edgekit.bundle import Bundle
from edgekit.cli import app
from edgekit.errors import BundleError

runner = CliRunner()


@pytest.fixture
def tiny_masked(tiny_bundles, tmp_path):
    return shutil.copytree(tiny_bundles["masked"], tmp_path / "masked")


def _one_line(r, code=1):
    assert r.exit_code == code, r.output
    assert "Traceback" not in r.output and r.stderr.count("\n") == 1, r.output


@pytest.mark.parametrize("argv", [["build", "{b}", "--target", "cpu"], ["quantize", "{b}", "--profile", "cpu"]])
def test_lock_symlinked_to_a_user_file_is_never_written(tiny_masked, tmp_path, argv):
    victim = tmp_path / "bashrc"
    victim.write_text("export PATH=$HOME/bin:$PATH\n")
    (tiny_masked / LOCK_NAME).unlink(missing_ok=True)
    (tiny_masked / LOCK_NAME).symlink_to(victim)
    r = runner.invoke(app, [a.format(b=tiny_masked) for a in argv])
    _one_line(r)
    assert "is a symbolic link" in r.stderr and LOCK_NAME in r.stderr
    assert victim.read_text() == "export PATH=$HOME/bin:$PATH\n"
    assert "int8" not in Bundle.load(tiny_masked).manifest["artifacts"]  # no work was done either


def test_dangling_lock_link_creates_nothing(tiny_masked, tmp_path):
    target = tmp_path / "created-by-edgekit"
    (tiny_masked / LOCK_NAME).unlink(missing_ok=True)
    (tiny_masked / LOCK_NAME).symlink_to(target)
    with pytest.raises(BundleError, match="symbolic link"):
        with bundle_lock(tiny_masked, "build"):
            pass
    assert not target.exists() and not target.is_symlink()


def test_lock_hard_linked_to_a_user_file_is_refused(tiny_masked, tmp_path):
    victim = tmp_path / "profile"
    victim.write_text("keep me\n")
    (tiny_masked / LOCK_NAME).unlink(missing_ok=True)
    os.link(victim, tiny_masked / LOCK_NAME)
    with pytest.raises(BundleError, match="hard link"):
        with bundle_lock(tiny_masked, "quantize"):
            pass
    assert victim.read_text() == "keep me\n"


@pytest.mark.parametrize("make", ["fifo", "dir"])
def test_lock_that_is_not_a_file_is_refused_without_hanging(tiny_masked, make):
    lock = tiny_masked / LOCK_NAME
    lock.unlink(missing_ok=True)
    os.mkfifo(lock) if make == "fifo" else lock.mkdir()
    r = runner.invoke(app, ["build", str(tiny_masked), "--target", "cpu", "--json"])
    _one_line(r)
    assert "is not a regular file" in r.stderr and '"exit_code": 1' in r.stdout


def test_export_into_a_folder_with_a_linked_lock(tiny_specs, tmp_path):
    from edgekit.export.to_bundle import export_bundle

    victim = tmp_path / "victim"
    victim.write_text("data")
    out = tmp_path / "new"
    out.mkdir()
    (out / LOCK_NAME).symlink_to(victim)
    with pytest.raises(BundleError, match="symbolic link"):
        export_bundle(tiny_specs["masked"], out, source="tiny")
    assert victim.read_text() == "data"
