"""Issue #30, items 2 and 4, as an attacker would: hostile --cond-data files, output paths that
cannot be written, numbers that would allocate or loop without end, a factory whose export fails.
Each ends in one ``error:`` line naming the bad value, the documented exit code, ``{error,
exit_code}`` with --json, nothing written, and the bundle still healthy."""

import json
import os
import shutil
import struct
import zipfile

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from edgekit.bundle import Bundle
from edgekit.cli import app

runner = CliRunner()


@pytest.fixture
def masked(tiny_bundles, tmp_path):
    return shutil.copytree(tiny_bundles["masked"], tmp_path / "masked")


def _files(root):
    return sorted(p.relative_to(root).as_posix() for p in root.rglob("*") if p.name != ".edgekit.lock")


def _refused(argv, code, *needles, cwd_files=None):
    """Run ``argv`` with --json: one error line, the exit code, the JSON error document."""
    r = runner.invoke(app, [str(a) for a in argv] + ["--json"])
    assert r.exit_code == code, r.output
    assert "Traceback" not in r.output and r.stderr.count("error:") == 1 and "\x1b" not in r.output, r.output
    doc = json.loads(r.stdout.strip().splitlines()[-1])
    assert doc["exit_code"] == code
    for needle in needles:
        assert needle in doc["error"], doc["error"]
    return doc


def _healthy(bundle):
    Bundle.load(bundle)
    r = runner.invoke(app, ["run", str(bundle), "--cond", "class_id=1", "--steps", "2"])
    assert r.exit_code == 0, r.output


def _npy_claiming(path, shape, descr="<i8"):
    """A .npy whose header claims ``shape`` and holds a few bytes (an allocation bomb)."""
    header = f"{{'descr': '{descr}', 'fortran_order': False, 'shape': {tuple(shape)!r}, }}"
    header += " " * (118 - len(header)) + "\n"
    path.write_bytes(b"\x93NUMPY\x01\x00" + struct.pack("<H", len(header)) + header.encode() + bytes(64))
    return path


# ---- --cond-data -------------------------------------------------------------------------------
def _bad_files(tmp):
    (tmp / "empty.npz").write_bytes(b"")
    (tmp / "notzip.npz").write_bytes(b"PK\x03\x04 this is not a zip")
    (tmp / "text.npz").write_text("hello\n")
    with zipfile.ZipFile(tmp / "badhdr.npz", "w") as z:
        z.writestr("class_id.npy", b"\x93NUMPY\x01\x00\x20\x00{'descr': '<i8', 'shape': (4,  \n")
    (tmp / "huge").mkdir()  # a folder of NAME.npy files
    _npy_claiming(tmp / "huge" / "class_id.npy", (10**12,))
    with zipfile.ZipFile(tmp / "hugez.npz", "w") as z:
        z.write(_npy_claiming(tmp / "h.npy", (10**12,)), "class_id.npy")
    np.savez(tmp / "vocab.npz", class_id=np.array([1, 99, 1, 1]))
    np.savez(tmp / "negative.npz", class_id=np.array([-5, 1]))
    np.savez(tmp / "objects.npz", class_id=np.array([{"a": 1}], dtype=object))
    return {
        "empty.npz": "cannot read",
        "notzip.npz": "cannot read",
        "text.npz": "cannot read",
        "badhdr.npz": "cannot read",
        "huge": "more than edgekit's cap",
        "hugez.npz": "more than edgekit's cap",
        "vocab.npz": "value 99 is outside",
        "negative.npz": "value -5 is outside",
        "objects.npz": "cannot read",
    }


@pytest.mark.time_limit(240)
@pytest.mark.parametrize("command", ["run", "check", "quantize", "profile"])
def test_hostile_cond_data_is_one_line_before_any_work(masked, tmp_path, command):
    extra = {
        "run": [],
        "check": ["--reference", "ort:fp32", "--candidate", "openvino:fp32"],
        "quantize": [],
        "profile": ["--iters", "1", "--warmup", "0"],
    }[command]
    before = _files(masked)
    for name, needle in _bad_files(tmp_path).items():
        doc = _refused([command, masked, "--cond-data", tmp_path / name, *extra], 2, needle)
        assert name in doc["error"] or "cond-data" in doc["error"]
    assert _files(masked) == before
    _healthy(masked)


def test_memory_cap_is_stated_and_can_be_raised(masked, tmp_path, monkeypatch):
    np.savez(tmp_path / "rows.npz", class_id=np.ones(2_000, np.int64))  # 16 KB
    monkeypatch.setenv("EDGEKIT_MEMORY_CAP_MB", "0.01")
    _refused(["run", masked, "--cond-data", tmp_path / "rows.npz"], 2, "EDGEKIT_MEMORY_CAP_MB", "cap of 10.2 KiB")
    monkeypatch.setenv("EDGEKIT_MEMORY_CAP_MB", "inf")
    _refused(["run", masked, "--cond-data", tmp_path / "rows.npz"], 2, "EDGEKIT_MEMORY_CAP_MB='inf'")
    monkeypatch.setenv("EDGEKIT_MEMORY_CAP_MB", "8")  # raised: the same rows decode
    r = runner.invoke(app, ["run", str(masked), "--cond-data", str(tmp_path / "rows.npz"), "--steps", "1", "--json"])
    assert r.exit_code == 0 and json.loads(r.stdout)["batch"] == 2000, r.output


def test_too_many_rows_for_run_are_refused_before_decoding(masked, tmp_path):
    np.savez(tmp_path / "rows.npz", class_id=np.ones(70_000, np.int64))
    _refused(["run", masked, "--cond-data", tmp_path / "rows.npz"], 2, "70000", "65536")


@settings(max_examples=40, deadline=None, database=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    data=st.binary(max_size=300),
    prefix=st.sampled_from([b"", b"PK\x03\x04", b"\x93NUMPY\x01\x00", b"\x93NUMPY\x02\x00"]),
)
def test_any_bytes_as_cond_data_are_rows_or_one_clean_error(tiny_bundles, tmp_path_factory, data, prefix):
    from edgekit.errors import EdgekitError
    from edgekit.evaluate import load_condition_data

    bundle = Bundle.load(tiny_bundles["masked"], verify=False)
    tmp = tmp_path_factory.mktemp("fuzz")
    for name in ("class_id.npy", "c.npz"):
        (tmp / name).write_bytes(prefix + data)
        try:
            load_condition_data(bundle, tmp / name)
        except EdgekitError as exc:
            assert "\n" not in str(exc)


# ---- output paths -----------------------------------------------------------------------------
def test_output_paths_are_refused_before_the_work(masked, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "afile").write_text("keep")
    long = "x" * 300
    cases = [
        (["profile", masked, "--cond", "class_id=1", "--html", "/dev/null"], "is not a folder"),
        (["profile", masked, "--cond", "class_id=1", "--html", "afile"], "afile is a file"),
        (
            ["run", masked, "--cond", "class_id=1", "-o", "afile/out.npz"],
            "afile, on the way to afile/out.npz, is a file",
        ),
        (["run", masked, "--cond", "class_id=1", "-o", f"{long}.npz"], "more than the file system takes"),
        (["run", masked, "--cond", "class_id=1", "-o", tmp_path], "must end in .npz"),
        (["check", masked, "--junit", "/dev/null"], "is not a regular file"),
        (["check", masked, "--save-baseline", tmp_path], "is a folder"),
        (["pack", masked, "-o", "afile/x.tar.gz"], "is a file"),
        (["unpack", "afile", "-o", "afile/sub"], "is a file"),
        (["export", "masked-demo", "-o", f"afile/{long}"], "more than the file system takes"),
        (["train-demo", "-o", "afile", "--steps", "1"], "afile is a file"),
        (["demo", "-o", "afile"], "afile is a file"),
        (["loadtest", masked, masked, "--html", "afile"], "afile is a file"),
        (["deploy", masked, "--host", f"u@{long}", "-o", "afile"], "is a file"),
    ]
    before = _files(masked)
    for argv, needle in cases:
        _refused(argv, 2, needle)
    assert (tmp_path / "afile").read_text() == "keep"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["afile", "masked"]
    assert _files(masked) == before


def test_engines_folder_that_is_a_file_or_a_folder_in_the_way(masked):
    (masked / "engines").write_text("not a folder")
    _refused(["build", masked, "--target", "cpu"], 1, "engines is not a folder")
    (masked / "engines").unlink()
    assert runner.invoke(app, ["build", str(masked), "--target", "cpu"]).exit_code == 0
    path = Bundle.load(masked).manifest["engines"]["cpu/fp32"]["path"]
    (masked / path).unlink()
    (masked / path).mkdir()
    _refused(["build", masked, "--target", "cpu", "--rebuild"], 1, "is in the way of the engine")
    (masked / "engines" / "intel-cpu").write_text("x")
    _refused(["build", masked, "--target", "intel-cpu"], 1, "intel-cpu is not a folder")
    _healthy(masked)


# ---- numbers ----------------------------------------------------------------------------------
@pytest.mark.time_limit(120)
def test_numbers_that_would_allocate_or_loop_forever(masked, tmp_path):
    cases = [
        (["profile", masked, "--cond", "class_id=1", "--batch", "1000000000"], "1000000000", "65536"),
        (
            ["check", masked, "--reference", "ort:fp32", "--candidate", "openvino:fp32", "--n", "1000000000"],
            "--n 1000000000 is out of bounds",
        ),
        (["run", masked, "--cond", "class_id=1", "--steps", "1000000000"], "steps=1000000000"),
        (["loadtest", masked, masked, "--deadline-ms", "inf"], "--deadline-ms inf"),
        (["loadtest", masked, masked, "--steps", "1000000000"], "--steps 1000000000"),
    ]
    for argv, *needles in cases:
        _refused(argv, 2, *needles)
    _healthy(masked)


# ---- files that end early: never "interrupted" --------------------------------------------------
def test_eof_anywhere_is_an_error_not_ctrl_c(masked, monkeypatch):
    from edgekit.run import stage

    def empty(*a, **k):
        raise EOFError("No data left in file")

    monkeypatch.setattr(stage, "cond_file_rows", empty)
    doc = _refused(["run", masked, "--cond", "class_id=1"], 1, "ended early", "No data left in file")
    assert "interrupted" not in doc["error"]


# ---- export ---------------------------------------------------------------------------------
def test_factory_with_a_wrongly_shaped_input_is_one_clean_line(tmp_path, monkeypatch):
    factory = tmp_path / "badt.py"
    factory.write_text(
        "import dataclasses\nfrom tests.tiny_models import tiny_flow_spec\nfrom edgekit.spec import TensorSpec\n\n"
        "def make(batch=2):\n    s = tiny_flow_spec(batch)\n"
        "    return dataclasses.replace(s, inputs={**s.inputs, 't': TensorSpec((batch, 7, 3), 'float32', 0.0, 1.0)})\n"
    )
    r = runner.invoke(app, ["export", f"{factory}:make", "-o", str(tmp_path / "bt"), "--json"])
    assert r.exit_code == 1, r.output
    doc = json.loads(r.stdout)
    assert "\x1b" not in r.output and "Traceback" not in r.output and r.stderr.count("\n") <= 2  # progress + error
    assert "torch.onnx.export failed" in doc["error"] and "t float32[2, 7, 3]" in doc["error"]
    assert "This is step 1/3" not in doc["error"] and not (tmp_path / "bt").exists()
    assert os.environ.get("EDGEKIT_DEBUG") is None
