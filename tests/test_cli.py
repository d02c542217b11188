import json
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from edgekit.cli import app

runner = CliRunner()
EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "custom_model.py"


def invoke(*args):
    return runner.invoke(app, [str(a) for a in args], catch_exceptions=False)


def test_inspect_json_shows_a_verified_export(demo_bundles):
    r = invoke("inspect", demo_bundles["masked"], "--json")
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)
    assert doc["schema"] == "edgekit.bundle/1"
    assert doc["model"]["kind"] == "masked"
    assert doc["verification"]["fp32"]["passed"] is True
    assert doc["artifacts"]["fp32"]["sha256"]


def test_inspect_table(demo_bundles):
    r = invoke("inspect", demo_bundles["flow"])
    assert r.exit_code == 0
    assert "verification of fp32: passed" in r.stdout and "tokens" in r.stdout


def test_export_plugin_example_and_run_it(tmp_path):
    pytest.importorskip("torch")
    out = tmp_path / "mine"
    r = invoke("export", f"{EXAMPLE}:make_model", "-o", out, "--batch", "2", "--json")
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)
    assert doc["model"]["name"] == "custom-flow" and doc["verification"]["fp32"]["passed"]
    assert doc["io"]["inputs"]["x"]["shape"] == [2, 32, 16]
    npz = tmp_path / "o.npz"
    r = invoke("run", out, "--cond", "speaker=0.5", "--solver", "rk4", "--steps", "2", "-o", npz, "--json")
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)
    assert doc["nfe"] == 8 and doc["quality"] is None
    data = np.load(npz)
    assert data["frames"].shape == (2, 32, 16) and np.all(data["cond_speaker"] == 0.5)


@pytest.mark.parametrize(
    "args,code,needle",
    [
        (["export", "no-such-model", "-o", "{tmp}/x"], 1, "not a known model"),
        (["inspect", "{tmp}/missing"], 1, "does not exist"),
        (["run", "{masked}", "--solver", "rk4"], 2, "--solver does not apply to the masked model"),
        (["run", "{masked}", "--runtime", "tensorflow"], 2, "--runtime 'tensorflow' is unknown"),
        (["run", "{masked}", "--precision", "int8"], 1, "edgekit quantize"),
        (["run", "{masked}", "--schedule", "zigzag"], 2, "zigzag"),
        (["run", "{masked}", "--cond", "speaker=1"], 2, "not a conditioning input"),
        (["run", "{masked}", "--cond", "class_id"], 1, "NAME=VALUE"),
        (["run", "{masked}", "--runtime", "trt"], 3, "pip install 'edgekit[trt]'"),
        (["run", "{masked}", "-o", "{tmp}/out.txt"], 2, "must end in .npz"),
        (["train-demo", "--models", "gpt5"], 1, "gpt5"),
    ],
)
def test_user_errors_are_one_line_with_exit_code(demo_bundles, tmp_path, args, code, needle):
    args = [a.format(tmp=tmp_path, masked=demo_bundles["masked"]) for a in args]
    r = runner.invoke(app, args)
    assert r.exit_code == code, r.output
    assert needle in r.stderr
    assert "Traceback" not in r.output and r.stderr.count("\n") == 1
    assert not (tmp_path / "out.txt").exists()


def test_debug_env_shows_traceback(tmp_path, monkeypatch):
    monkeypatch.setenv("EDGEKIT_DEBUG", "1")
    r = runner.invoke(app, ["inspect", str(tmp_path / "missing")])
    assert r.exit_code != 0 and r.exception is not None


def test_usage_errors_exit_2():
    r = runner.invoke(app, ["run"])
    assert r.exit_code == 2


def test_python_dash_m_edgekit_is_the_cli():
    """`python -m edgekit` (issue #45, point 8): the same commands and exit codes as `edgekit`."""
    import subprocess
    import sys

    root = Path(__file__).resolve().parents[1]
    r = subprocess.run(
        [sys.executable, "-m", "edgekit", "--help"], cwd=root, capture_output=True, text=True, timeout=120
    )
    assert r.returncode == 0 and "quantize" in r.stdout and "deploy" in r.stdout, r.stderr
    r = subprocess.run(
        [sys.executable, "-m", "edgekit", "run", "nowhere", "--seed", "-1"],
        cwd=root,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode == 2 and r.stderr.startswith("error: --seed -1 is out of bounds"), r.stderr
