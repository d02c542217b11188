"""Every file a user names is opened as a regular file of bounded size, and every output path is
checked before the work (issue #45, point 4): ``check --thresholds FIFO`` and ``quantize
--overrides FIFO`` blocked until a writer came, ``/dev/zero`` and ``/dev/urandom`` were read until
the out-of-memory killer; ``debug --html /proc/self/x`` was a traceback and ``--html /dev/null``
failed after the whole run. Each is now one line, before anything is read or decoded."""

from __future__ import annotations

import json
import os
import shutil

import numpy as np
import pytest
from typer.testing import CliRunner

from edgekit.cli import app
from edgekit.errors import UsageError
from edgekit.userfiles import MAX_DOCUMENT_BYTES, open_user_file, read_user_text
from tests.reliability.test_cli_fuzz import time_limit

runner = CliRunner()
LIMIT_S = 30  # a refusal takes milliseconds; a blocked FIFO read would run into this


@pytest.fixture(scope="module")
def masked(tiny_bundles, tmp_path_factory):
    return shutil.copytree(tiny_bundles["masked"], tmp_path_factory.mktemp("files") / "masked")


@pytest.fixture(scope="module")
def specials(tmp_path_factory):
    """{kind: path} of things that are not regular files."""
    root = tmp_path_factory.mktemp("special")
    fifo = root / "fifo.npz"
    os.mkfifo(fifo)
    (root / "folder.npz").mkdir()
    big = root / "big.json"
    with open(big, "wb") as fh:  # sparse: 17 MiB reported, nothing written
        fh.truncate(MAX_DOCUMENT_BYTES + (1 << 20))
    return {
        "FIFO": fifo,
        "device": "/dev/zero",
        "random": "/dev/urandom",
        "directory": root / "folder.npz",
        "too big": big,
    }


def _one_line(r, *needles):
    assert r.exit_code in (1, 2), r.output
    assert "Traceback" not in r.output and r.stderr.count("error:") == 1, r.stderr
    for needle in needles:
        assert needle in r.stderr, r.stderr


def _why(kind):
    return {
        "FIFO": "a FIFO",
        "device": "a device",
        "random": "a device",
        "directory": "a directory",
        "too big": "more than edgekit reads",
    }[kind]


@pytest.mark.parametrize("kind", ["FIFO", "device", "random", "directory", "too big"])
@pytest.mark.parametrize(
    "args",
    [
        ["check", "{b}", "--thresholds", "{f}"],
        ["check", "{b}", "--baseline", "{f}"],
        ["quantize", "{b}", "--overrides", "{f}"],
        ["run", "{b}", "--cond", "class_id={f}"],
        ["run", "{b}", "--cond-data", "{f}"],
        ["run", "{b}", "--cond", "class_id=1", "--target", "{f}"],
        ["deploy", "{b}", "--host", "pi@dev", "--identity", "{f}"],
        ["deploy", "{b}", "--host", "pi@dev", "--known-hosts", "{f}"],
    ],
)
def test_user_named_files_that_are_not_regular_or_too_big_are_refused_up_front(masked, specials, kind, args):
    path = specials[kind]
    if kind == "too big" and ("--cond" in args or "--cond-data" in args):
        pytest.skip("data files are bounded by the memory cap and their headers (test_hostile_inputs)")
    if kind == "directory" and "--cond-data" in args:
        pytest.skip("a --cond-data directory is a folder of .npz files by design")
    if kind in ("device", "random") and "class_id={f}" in args:
        pytest.skip("--cond takes a path by its .npy/.npz name: /dev/zero is refused as not one")
    argv = [a.format(b=masked, f=path) for a in args]
    with time_limit(LIMIT_S):
        r = runner.invoke(app, argv)
    _one_line(r, str(path), _why(kind))


def test_a_fifo_is_never_opened_for_reading(specials):
    """Opening a FIFO for reading blocks until a writer appears: the helper decides by stat
    first, and opens non-blocking when it does open."""
    with time_limit(5), pytest.raises(UsageError, match="is a FIFO"):
        open_user_file(specials["FIFO"], "--thresholds")


def test_a_growing_file_is_read_only_to_the_cap(tmp_path):
    """A file that reports 0 bytes and holds more (a /proc file) stops at the cap."""
    environ = "/proc/self/environ"
    if not os.path.exists(environ):
        pytest.skip("no /proc")
    with pytest.raises(UsageError, match="holds more than edgekit reads for it"):
        read_user_text(environ, "--thresholds", max_bytes=4)
    assert read_user_text(environ, "--thresholds", max_bytes=1 << 20) is not None


def test_regular_files_still_read(masked, tmp_path):
    from edgekit.evaluate.thresholds import load_thresholds

    (tmp_path / "t.toml").write_text("[masked.token_agreement]\nthreshold = 0.5\n")
    assert load_thresholds("masked", tmp_path / "t.toml") != load_thresholds("masked", None)
    np.save(tmp_path / "c.npy", np.ones(2, np.int64))
    r = runner.invoke(app, ["run", str(masked), "--cond", f"class_id={tmp_path / 'c.npy'}", "--steps", "2"])
    assert r.exit_code == 0, r.output


# ---- output paths, before the run -------------------------------------------------------------------
@pytest.mark.parametrize(
    "args,needle",
    [
        (["debug", "{b}", "--html", "/proc/self/x"], "/proc/self"),
        (["debug", "{b}", "--html", "/dev/null"], "/dev/null is not a folder"),
        (["debug", "{b}", "--html", "{file}"], "is a file"),
        (["profile", "{b}", "--html", "/dev/null", "--cond", "class_id=1"], "/dev/null is not a folder"),
        (["check", "{b}", "--junit", "{dir}"], "is a folder"),
        (["check", "{b}", "--junit", "/dev/null"], "is not a regular file"),
        (["check", "{b}", "--save-baseline", "/proc/self/x.json"], "/proc/self"),
        (["run", "{b}", "-o", "{dir}/x.npz/y.npz", "--cond", "class_id=1"], "on the way to"),
        (["export", "tiny", "-o", "/proc/self/bundle"], "/proc/self"),
    ],
)
def test_output_paths_are_checked_before_the_run(masked, tmp_path, args, needle):
    if not os.path.isdir("/proc/self") and "/proc" in " ".join(args):
        pytest.skip("no /proc")
    (tmp_path / "file").write_text("mine")
    (tmp_path / "x.npz").write_text("a file where a folder goes")
    argv = [a.format(b=masked, file=tmp_path / "file", dir=tmp_path) for a in args]
    r = runner.invoke(app, argv)
    assert r.exit_code == 2, r.output
    _one_line(r, needle)
    assert "check's gate" not in r.stderr and "record " not in r.stderr  # refused before the work
    assert (tmp_path / "file").read_text() == "mine"


def test_the_json_error_document_names_the_refused_file(masked, specials):
    r = runner.invoke(app, ["check", str(masked), "--thresholds", str(specials["FIFO"]), "--json"])
    doc = json.loads(r.stdout)
    assert doc["exit_code"] == r.exit_code == 1 and "is a FIFO" in doc["error"]
