"""`edgekit debug` on the command line: wrong arguments are one clear line and exit 2 (with
--json, the one error document); the exit codes follow check's."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from edgekit.cli import app

runner = CliRunner()


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--candidate", "ort:int4"], "--candidate 'ort:int4' is not a variant; valid: runtime:precision"),
        (
            ["--reference", "int8", "--candidate", "int8"],
            "--reference and --candidate are both ort:int8: nothing to compare",
        ),
        (
            ["--fix", "--candidate", "openvino:fp32"],
            "--fix re-quantizes the int8 model; --candidate openvino:fp32 is not one",
        ),
        (["--threshold", "nan"], "--threshold nan is out of bounds; valid: a number from -1000 to 1000 dB"),
        (["--isa", "avx9"], "--isa 'avx9' is unknown; valid: host, avx2"),
        (["--rows", "0"], "--rows"),
    ],
)
def test_wrong_arguments_are_one_line_and_exit_2(outlier, args, message):
    r = runner.invoke(app, ["debug", str(outlier), *args])
    assert r.exit_code == 2, r.output
    assert message in r.output and "Traceback" not in r.output
    assert len([line for line in r.stderr.splitlines() if line.startswith("error:")]) == 1


def test_json_usage_error_is_one_document(outlier):
    r = runner.invoke(app, ["debug", str(outlier), "--candidate", "tflite:int8", "--json"])
    assert r.exit_code == 2
    doc = json.loads(r.stdout)
    assert doc["exit_code"] == 2 and "--candidate 'tflite:int8' is not a variant" in doc["error"]


def test_a_failing_candidate_exits_4_with_the_summary(outlier):
    r = runner.invoke(app, ["debug", str(outlier)])
    assert r.exit_code == 4, r.output
    assert "of 4, fc2 (MatMul):" in r.stdout and "check fails, margin -" in r.stdout
    assert "check fails on" in r.stderr and "--fix" in r.stderr


def test_a_missing_bundle_is_exit_1(tmp_path):
    r = runner.invoke(app, ["debug", str(tmp_path / "nope")])
    assert r.exit_code == 1 and "does not exist" in r.stderr


def test_a_host_too_small_for_the_replay_stops_before_any_work(outlier, monkeypatch):
    """The replay holds both variants' weights and three captures of one call's tensors
    (aMUSEd-256: 9.9 GiB): a host without that much stops in one line, exit 3, before the gate."""
    monkeypatch.setattr("edgekit.resources.available_memory", lambda: 64 * 1024**2)
    ran: list = []
    monkeypatch.setattr("edgekit.debug.stage.measure", lambda *a, **k: ran.append(a))
    r = runner.invoke(app, ["debug", str(outlier)])
    assert r.exit_code == 3, r.output
    assert r.stderr.count("error:") == 1 and "debug needs about" in r.stderr and "64 MiB available" in r.stderr
    assert "capture of every tensor" in " ".join(r.stderr.split()) and "Traceback" not in r.output
    assert not ran


def test_debug_needs_count_both_variants_weights_and_three_captures(outlier):
    from pathlib import Path

    from edgekit._sidefiles import model_bytes
    from edgekit.bundle import Bundle
    from edgekit.debug.config import DebugConfig
    from edgekit.debug.stage import debug_needs, resolve
    from edgekit.debug.topology import read_topology
    from edgekit.quantize import graph_without_weights, module_labels, tensor_bytes
    from edgekit.resources import BASE_MEMORY

    bundle = Bundle.load(outlier)
    fp32, int8 = Path(bundle.path_of("fp32")), Path(bundle.path_of("int8"))
    topo = read_topology(fp32, module_labels(fp32))
    (need,) = debug_needs(bundle, resolve(bundle, DebugConfig()), topo)
    sizes = tensor_bytes(graph_without_weights(fp32))
    capture = sum(sizes[t] for t in set(topo.floats))
    assert capture > 0 and need.kind == "memory"
    assert need.bytes == model_bytes(fp32) + model_bytes(int8) + 3 * capture + BASE_MEMORY
