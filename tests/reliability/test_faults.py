"""Disk full, read-only bundles and Ctrl-C (issue #19, items 10 and 11): one line and exit 1,
found before long work, cleanup that never hides the real error, and interrupt messages that say
what was recorded."""

import errno
import os
import pathlib
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from edgekit.bundle import MANIFEST, STAGING_PREFIX, Bundle
from edgekit.cli import app

runner = CliRunner()
ROOT = Path(__file__).resolve().parents[2]


def invoke(*args):
    return runner.invoke(app, [str(a) for a in args])


def one_error(r, *needles):
    errors = [line for line in r.stderr.splitlines() if line.startswith("error:")]
    assert r.exit_code == 1 and "Traceback" not in r.output and len(errors) == 1, r.output
    for needle in needles:
        assert needle in errors[0], errors[0]


@pytest.fixture
def tiny_masked(tiny_bundles, tmp_path):
    return shutil.copytree(tiny_bundles["masked"], tmp_path / "masked")


@pytest.fixture
def disk_full(monkeypatch):
    def full(self, *a, **k):
        raise OSError(errno.ENOSPC, "No space left on device", str(self))

    monkeypatch.setattr(pathlib.Path, "write_text", full)
    monkeypatch.setattr(pathlib.Path, "write_bytes", full)
    monkeypatch.setattr(os, "fsync", lambda fd: full(f"fd {fd}"))  # write_json_atomic's last step


@pytest.mark.parametrize(
    "cmd",
    [
        ["run", "{b}", "--steps", "2", "-o", "{t}/out.npz"],
        ["check", "{b}", "--reference", "torch", "--candidate", "ort:fp32", "--n", "2", "--junit", "{t}/j.xml"],
        [
            "check",
            "{b}",
            "--reference",
            "torch",
            "--candidate",
            "ort:fp32",
            "--n",
            "2",
            "--save-baseline",
            "{t}/base.json",
        ],
        [
            "profile",
            "{b}",
            "--iters",
            "1",
            "--warmup",
            "0",
            "--min-seconds",
            "0",
            "--power",
            "off",
            "--html",
            "{t}/r.html",
        ],
    ],
)
def test_disk_full_is_one_line(masked, tmp_path, disk_full, cmd):
    r = invoke(*(c.format(b=masked, t=tmp_path) for c in cmd))
    one_error(r, "No space left on device")
    assert not [p for p in tmp_path.rglob("*") if p.is_file() and "masked" not in p.parts]  # no partial files


def test_pack_to_a_full_disk_is_one_line(tiny_masked, tmp_path, monkeypatch):
    import tarfile

    def full(*a, **k):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(tarfile.TarFile, "addfile", full)
    r = invoke("pack", tiny_masked, "-o", tmp_path / "m.tar.gz")
    one_error(r, "No space left on device", "m.tar.gz")
    assert not list(tmp_path.glob("*.tar.gz")) and not list(tmp_path.glob(".m.tar.gz*"))


def test_readonly_bundle_fails_before_quantizing(tiny_masked, monkeypatch):
    real = os.access
    monkeypatch.setattr(
        os, "access", lambda p, mode, **k: False if Path(p) == tiny_masked and mode == os.W_OK else real(p, mode, **k)
    )
    start = time.monotonic()
    r = invoke("quantize", tiny_masked, "--calib-samples", "1", "--eval-samples", "1")
    one_error(r, "is not writable")
    assert "prepare graph" not in r.stderr  # refused before the first step of work
    assert time.monotonic() - start < 30  # not a timing assertion on speed: a bound on "did no work"


def test_manifest_write_failure_keeps_the_real_error(tiny_masked, monkeypatch):
    b = Bundle.load(tiny_masked)

    def boom(*a, **k):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "fsync", boom)
    b.manifest["decode_defaults"] = {"steps": 3}
    with pytest.raises(Exception, match="No space left on device"):
        b.save()
    Bundle.load(tiny_masked)
    assert not list(tiny_masked.glob(f"{STAGING_PREFIX}*"))


# ---- interrupts ----------------------------------------------------------------------------------------
def test_interrupt_message_after_a_commit_says_what_was_recorded(tiny_masked, monkeypatch):
    """Ctrl-C right after export's manifest write: the message must not claim nothing was recorded."""
    from edgekit.bundle import COMMITTED
    from edgekit.cli import app as cli_app  # noqa: F401
    from edgekit.cli.app import _interrupted

    assert _interrupted([]) == "interrupted: nothing was recorded for the unfinished stage"
    COMMITTED.append(str(tiny_masked))
    try:
        msg = _interrupted(COMMITTED[-1:])
    finally:
        COMMITTED.pop()
    assert "nothing was recorded" not in msg and str(tiny_masked) in msg


def test_sigint_handler_is_restored_after_a_command(tiny_masked):
    before = signal.getsignal(signal.SIGINT)
    r = invoke("inspect", tiny_masked)
    assert r.exit_code == 0
    assert signal.getsignal(signal.SIGINT) is before


@pytest.mark.slow
def test_sigint_after_the_command_finished_is_quiet(tiny_masked):
    """The command's work is done; Ctrl-C during interpreter shutdown gives neither a traceback nor -2."""
    code = (
        "import os, signal, atexit, time\n"
        "atexit.register(lambda: (os.kill(os.getpid(), signal.SIGINT), time.sleep(0.2)))\n"
        "import sys; sys.argv = ['edgekit', 'inspect', sys.argv[1]]\n"
        "from edgekit.cli import main; main()\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code, str(tiny_masked)], cwd=ROOT, capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0 and "Traceback" not in proc.stderr and "KeyboardInterrupt" not in proc.stderr, (
        proc.stderr
    )


@pytest.mark.slow
@pytest.mark.parametrize("delay", [0.5, 2.0, 4.0])
def test_interrupted_build_leaves_a_loadable_bundle_and_no_litter(tiny_masked, delay):
    proc = subprocess.Popen(
        [sys.executable, "-m", "edgekit.cli", "build", str(tiny_masked), "--target", "cpu"],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    time.sleep(delay)
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=60)
    Bundle.load(tiny_masked)  # every hash
    r = invoke("build", tiny_masked, "--target", "cpu")  # the next writer sweeps what the killed one left
    assert r.exit_code == 0, r.output
    assert not list(tiny_masked.glob(f"{STAGING_PREFIX}*"))
    assert (tiny_masked / MANIFEST).is_file()


def test_ctrl_c_inside_a_string_exec_still_exits_with_the_chosen_code_under_python_m(tmp_path):
    """A KeyboardInterrupt that ends a string ``exec`` (as dataclasses' generated methods do) and
    is caught must not turn ``python -m``'s exit into -SIGINT (CPython's "unhandled" flag): the
    shutdown every command ends with clears it."""
    pkg = tmp_path / "interrupted_cli"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "__main__.py").write_text(
        "import sys\n"
        "from edgekit.cli.main import _quiet_shutdown\n"
        "try:\n"
        "    exec('raise KeyboardInterrupt', {})\n"
        "except KeyboardInterrupt:\n"
        "    pass\n"
        "if sys.argv[1:] == ['shutdown']:\n"
        "    _quiet_shutdown()\n"
        "sys.exit(130)\n"
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), str(ROOT), os.environ.get("PYTHONPATH", "")])}

    def exit_code(*args: str) -> int:
        run = [sys.executable, "-m", "interrupted_cli", *args]
        return subprocess.run(run, cwd=ROOT, env=env, capture_output=True, timeout=120).returncode

    # Without the shutdown, CPython 3.11/3.12 end this process with -SIGINT (a later version that
    # does not is fine too); with it, the code the command chose.
    assert exit_code() in (-signal.SIGINT, 130)
    assert exit_code("shutdown") == 130
