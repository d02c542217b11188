"""Two stages on one bundle (issue #19, item 1): one writer at a time, and a commit merges into the
manifest as it is on disk, so neither stage's result is lost and no file is orphaned."""

import fcntl
import os
import shutil
import threading
import time

import pytest
from typer.testing import CliRunner

from edgekit._lock import LOCK_NAME, bundle_lock
from edgekit.bundle import MANIFEST, STAGING_PREFIX, Bundle
from edgekit.cli import app
from edgekit.errors import BundleError

runner = CliRunner()


@pytest.fixture
def tiny_masked(tiny_bundles, tmp_path):
    return shutil.copytree(tiny_bundles["masked"], tmp_path / "masked")


def _hold(bundle) -> int:
    """Take the bundle's lock the way another process would (its own open file description)."""
    fd = os.open(bundle / LOCK_NAME, os.O_RDWR | os.O_CREAT)
    fcntl.flock(fd, fcntl.LOCK_EX)
    os.ftruncate(fd, 0)  # as edgekit's holder does: the copied bundle's lock file names an older pid
    os.pwrite(fd, b'{"pid": 4242, "stage": "quantize"}', 0)
    return fd


def test_second_writer_fails_with_one_line_naming_the_holder(tiny_masked):
    fd = _hold(tiny_masked)
    try:
        r = runner.invoke(app, ["build", str(tiny_masked), "--target", "cpu"])
    finally:
        os.close(fd)
    assert r.exit_code == 1, r.output
    assert "is being written by `edgekit quantize` (pid 4242)" in r.stderr and "--wait" in r.stderr
    assert r.stderr.count("\n") == 1 and "Traceback" not in r.output
    assert not Bundle.load(tiny_masked).manifest.get("engines")


def test_wait_queues_behind_the_holder(tiny_masked):
    fd = _hold(tiny_masked)
    threading.Timer(0.5, os.close, args=(fd,)).start()
    r = runner.invoke(app, ["build", str(tiny_masked), "--target", "cpu", "--wait"])
    assert r.exit_code == 0, r.output
    assert "waiting for `edgekit quantize` (pid 4242)" in r.stderr
    assert "cpu/fp32" in Bundle.load(tiny_masked).manifest["engines"]


def test_stale_copies_merge_at_commit(tiny_masked, tmp_path):
    """Stage A and stage B both loaded the bundle before either saved (the lost-update race)."""
    a, b = Bundle.load(tiny_masked), Bundle.load(tiny_masked)
    staged = a.staging_path("int8.onnx")
    staged.write_bytes(b"int8 model")
    a.add_artifact("int8", staged, made_by="quantize", config={}, suffix=".onnx")
    a.manifest["quantization"] = {"passed": True}
    a.save()
    b.manifest.setdefault("engines", {})["cpu/fp32"] = {"path": b.artifact("fp32").path, "target": "cpu"}
    b.save()  # a stale copy without int8: must not drop it
    merged = Bundle.load(tiny_masked)
    assert "int8" in merged.manifest["artifacts"] and merged.manifest["quantization"] == {"passed": True}
    assert "cpu/fp32" in merged.manifest["engines"]


def test_replaced_artifact_from_a_stale_copy_keeps_the_newer_file_alive(tiny_masked):
    a, b = Bundle.load(tiny_masked), Bundle.load(tiny_masked)
    for bundle, data in ((a, b"first"), (b, b"second")):
        staged = bundle.staging_path("int8.onnx")
        staged.write_bytes(data)
        bundle.add_artifact("int8", staged, made_by="quantize", config={}, suffix=".onnx")
        bundle.save()
    final = Bundle.load(tiny_masked)  # hashes verified: the winner's file is there
    assert final.path_of("int8").read_bytes() == b"second"
    orphans = [
        p.name for p in tiny_masked.iterdir() if p.name.startswith("int8-") and p.name != final.artifact("int8").path
    ]
    assert orphans == []


def test_lock_is_reentrant_and_sweeps_killed_stage_litter(tiny_masked):
    (tiny_masked / f"{STAGING_PREFIX}dead-int8.onnx").write_bytes(b"half")
    (tiny_masked / f"{STAGING_PREFIX}deadbeef").mkdir()
    with bundle_lock(tiny_masked, "test"):
        assert not list(tiny_masked.glob(f"{STAGING_PREFIX}*"))
        with bundle_lock(tiny_masked, "test"):  # select_engine -> build_bundle -> save nest like this
            Bundle.load(tiny_masked).save()
    assert (tiny_masked / MANIFEST).is_file()


def test_lock_released_after_an_error(tiny_masked):
    with pytest.raises(BundleError):
        with bundle_lock(tiny_masked, "test"):
            raise BundleError("boom")
    fd = os.open(tiny_masked / LOCK_NAME, os.O_RDWR)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # free again
    finally:
        os.close(fd)


def test_killed_quantize_tempdir_is_swept(tmp_path, monkeypatch):
    import tempfile

    from edgekit._lock import owned_tempdir, sweep_tempdirs

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    dead = tmp_path / "edgekit-quantize-dead"
    dead.mkdir()
    (dead / LOCK_NAME).write_text("")
    (dead / "prepared.onnx").write_bytes(b"x" * 1000)
    with owned_tempdir("edgekit-quantize-") as live:
        assert not dead.exists() and live.is_dir()
        assert sweep_tempdirs("edgekit-quantize-") == []  # a live run's dir is never taken
        time.sleep(0)
    assert not live.exists()


def test_lock_file_is_inside_the_bundle_and_locks_only_it(tiny_bundles, tmp_path):
    """Regression: the lock once resolved a path's anchor ('/') instead of the bundle."""
    one = shutil.copytree(tiny_bundles["masked"], tmp_path / "one")
    two = shutil.copytree(tiny_bundles["masked"], tmp_path / "two")
    fd = _hold(one)
    try:
        r = runner.invoke(app, ["build", str(two), "--target", "cpu"])
    finally:
        os.close(fd)
    assert r.exit_code == 0, r.output
    assert (two / LOCK_NAME).is_file() and not (tmp_path / LOCK_NAME).exists()


def test_reexport_removes_the_old_engines(tiny_specs, tmp_path):
    from edgekit.builder import build_bundle
    from edgekit.export.to_bundle import export_bundle

    root = export_bundle(tiny_specs["masked"], tmp_path / "b", source="tiny").root
    build_bundle(root, "cpu")
    engine = root / Bundle.load(root).manifest["engines"]["cpu/fp32"]["path"]
    assert engine.is_file()
    export_bundle(tiny_specs["masked"], root, source="tiny")  # a new graph: its engines are gone
    assert Bundle.load(root).manifest["engines"] == {}
    assert not engine.exists() and not (root / "engines").exists()


def test_a_sweep_at_the_moment_a_tempdir_is_made_never_takes_it(tmp_path, monkeypatch):
    """Another process's sweep between the owner making its lock file and locking it took the live
    directory (CI: ``debug --fix`` failed on a FileNotFoundError with three test processes at once).
    Here the sweep runs right before the owner's lock, as that process would."""
    import tempfile

    from edgekit import _lock

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    real_flock = _lock.fcntl.flock
    swept = []

    def flock_after_a_sweep(fd, op):
        swept.extend(_lock.sweep_tempdirs("edgekit-debug-"))
        return real_flock(fd, op)

    monkeypatch.setattr(_lock.fcntl, "flock", flock_after_a_sweep)
    with _lock.owned_tempdir("edgekit-debug-") as live:
        monkeypatch.setattr(_lock.fcntl, "flock", real_flock)
        assert live.is_dir() and (live / LOCK_NAME).is_file()
        (live / "scratch").write_text("x")  # the run goes on in its directory
        assert _lock.sweep_tempdirs("edgekit-debug-") == []
    assert swept == [] and not live.exists()
