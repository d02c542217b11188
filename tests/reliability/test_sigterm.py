"""SIGTERM (a `kill`, a CI timeout, a container stopping) is handled like Ctrl-C (issue #31): the
stage unwinds, its owned temp folder (`edgekit-quantize-*`, 9-11 MB each for the qnn profile)
goes, nothing half-written is recorded, and the command exits 143 with one line."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

from edgekit.bundle import MANIFEST, Bundle

ROOT = Path(__file__).resolve().parents[2]


def test_sigterm_during_quantize_sweeps_its_temp_folder_and_records_nothing(tiny_bundles, tmp_path):
    bundle = Path(shutil.copytree(tiny_bundles["masked"], tmp_path / "masked"))
    before = (bundle / MANIFEST).read_text()
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    env = {**os.environ, "TMPDIR": str(scratch), "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen(
        [sys.executable, "-m", "edgekit.cli", "quantize", str(bundle), "--calib-samples", "64", "--eval-samples", "64"],
        cwd=tmp_path,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and proc.poll() is None and not list(scratch.glob("edgekit-quantize-*")):
        time.sleep(0.05)
    assert proc.poll() is None, proc.communicate()
    time.sleep(0.5)  # into the calibration decodes
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 143, err
    assert "terminated (SIGTERM): nothing was recorded" in err and "Traceback" not in err
    assert not list(scratch.glob("edgekit-*")), list(scratch.iterdir())
    assert (bundle / MANIFEST).read_text() == before
    assert not Bundle.load(bundle).has("int8")
    assert not [p for p in bundle.iterdir() if p.name.startswith(".staging")]


def test_sigterm_raises_terminated_and_the_previous_handler_comes_back():
    """Every command's wrapper installs the handler (cli/app.py `command`): SIGTERM becomes
    `Terminated`, a KeyboardInterrupt, so every `finally` and context manager runs."""
    code = (
        "import os, signal\n"
        "from edgekit.cli.app import _watch_sigint\n"
        "seen, restore = _watch_sigint()\n"
        "try:\n    os.kill(os.getpid(), signal.SIGTERM)\nexcept KeyboardInterrupt as e:\n"
        "    print(type(e).__name__, seen())\n"
        "restore()\nprint(signal.getsignal(signal.SIGTERM) == signal.SIG_DFL)\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code],
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.stdout.split() == ["Terminated", "True", "True"], proc.stderr


def test_sigterm_inside_an_import_is_raised_once_the_import_is_over(tmp_path):
    """Raised inside an import, Terminated could cross a C++ extension's module init (torch's
    pybind11 aborted: "terminate called after throwing ... error_already_set", not exit 143, in
    a CI run): the signal is sent again and raised after the import."""
    (tmp_path / "slow_module.py").write_text(
        "import os, signal, time\n"
        "os.kill(os.getpid(), signal.SIGTERM)\n"
        "time.sleep(0.3)  # the import goes on: the handler did not raise here\n"
        "DONE = True\n"
    )
    code = (
        "import sys, time\n"
        "from edgekit.cli.app import _watch_sigint\n"
        "seen, restore = _watch_sigint()\n"
        "try:\n"
        "    import slow_module\n"
        "    time.sleep(5)\n"
        "except KeyboardInterrupt as e:\n"
        "    print(type(e).__name__, getattr(sys.modules.get('slow_module'), 'DONE', False))\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code],
        env={**os.environ, "PYTHONPATH": f"{ROOT}{os.pathsep}{tmp_path}"},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.stdout.split() == ["Terminated", "True"], proc.stderr
