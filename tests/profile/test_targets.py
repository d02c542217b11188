"""`edgekit profile --target`: each precision's engine as the target loads it (the file `edgekit
build` wrote, opened as `edgekit run --target` opens it), not the bundle's ONNX."""

from __future__ import annotations

import json
import shutil

import pytest
from typer.testing import CliRunner

from edgekit.bundle import Bundle
from edgekit.cli import app

pytest.importorskip("onnxruntime")
runner = CliRunner()
QUICK = ["--iters", "2", "--min-seconds", "0", "--warmup", "1", "--power", "off"]


def invoke(*args):
    return runner.invoke(app, [str(a) for a in args])


def test_profile_measures_the_engine_build_wrote_for_the_target(tiny, tmp_path):
    bundle = shutil.copytree(tiny["masked8"], tmp_path / "masked8")
    built = invoke("build", bundle, "--target", "cpu", "--precision", "int8")
    assert built.exit_code == 0, built.output
    shipped = Bundle.load(bundle).engine_for("ort", "int8")
    assert shipped is not None

    r = invoke("profile", bundle, *QUICK, "--target", "cpu", "--json")
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)
    by_precision = {v["precision"]: v for v in doc["variants"]}
    assert set(by_precision) == {"fp32", "int8"} and all(v["available"] for v in by_precision.values())
    int8 = by_precision["int8"]
    assert int8["id"] == "ort int8 (cpu)" and int8["target"] == "cpu"
    assert int8["engine"] == {"path": str(bundle / shipped.path), "built": True}
    assert str(bundle / shipped.path) in int8["memory"]["model_files_bytes"]  # the file it loaded
    # fp32 was not built for the target: the target loads the bundle's ONNX, and the row says so.
    assert by_precision["fp32"]["engine"]["built"] is False
    assert doc["ratios"] and doc["config"]["target"] == "cpu"


@pytest.mark.parametrize(
    "args,needle",
    [
        (["--target", "cpu", "--compare-ar"], "drop --target (or --compare-ar)"),
        (["--rebuild"], "add --target NAME"),
        (["--target", "no-such-target"], "no-such-target"),
        (["--target", "cpu", "--runtime", "aihub"], "drop --target"),
    ],
)
def test_target_misuse_is_one_line(tiny, args, needle):
    r = invoke("profile", tiny["masked8"], *QUICK, *args)
    assert r.exit_code != 0, r.output
    assert r.stderr.count("error:") == 1 and needle in r.stderr and "Traceback" not in r.output, r.stderr


def test_a_target_whose_engine_is_not_built_here_is_refused_before_measuring(tiny):
    r = invoke("profile", tiny["masked8"], *QUICK, "--target", "jetson-orin-nano", "--precision", "fp16")
    assert r.exit_code != 0, r.output
    assert r.stderr.count("error:") == 1 and "Traceback" not in r.output, r.stderr
    assert "latency" not in r.stdout
