"""Bad inputs that reach a stage: one clear line and the documented exit code, no traceback."""

import numpy as np
import pytest
from typer.testing import CliRunner

from edgekit.cli import app
from edgekit.errors import EdgekitError
from edgekit.spec import TensorSpec

runner = CliRunner()


def test_calibration_set_of_the_wrong_shape_is_one_clear_error():
    from edgekit.quantize.calibrate import calibration_reader

    specs = {"tokens": TensorSpec((2, 64), "int64"), "class_id": TensorSpec((2,), "int64")}
    good = {"tokens": np.zeros((2, 64), np.int64), "class_id": np.zeros(2, np.int64)}
    assert len(calibration_reader([good, good], specs)) == 2
    bad = {"tokens": np.zeros((2, 32), np.int64), "class_id": np.zeros(2, np.int64)}
    with pytest.raises(
        EdgekitError, match=r"calibration sample 1: feed 'tokens' is int64\[2, 32\], expected int64\[2, 64\]"
    ):
        calibration_reader([good, bad], specs)
    with pytest.raises(EdgekitError, match="calibration set is empty"):
        calibration_reader([], specs)


def test_condition_file_of_the_wrong_shape(demo_bundles, tmp_path):
    # A file brings its rows (decoded in graph batches, issue #15); each row must have the input's shape.
    wrong = tmp_path / "tokens.npy"
    np.save(wrong, np.zeros((3, 63), np.int64))
    r = runner.invoke(app, ["run", str(demo_bundles["flow"]), "--cond", f"tokens={wrong}"])
    assert r.exit_code == 2 and "has shape [3, 63], expected [3, 64]" in r.stderr
    assert "Traceback" not in r.output and r.stderr.count("\n") == 1
    pickled = tmp_path / "evil.npy"
    np.save(pickled, np.array([{"a": 1}], dtype=object), allow_pickle=True)
    r = runner.invoke(app, ["run", str(demo_bundles["flow"]), "--cond", f"tokens={pickled}"])
    assert r.exit_code == 2 and "cannot read it as .npy" in r.stderr  # never unpickles


def test_engine_for_another_tensorrt_or_gpu_is_refused_with_reasons():
    from edgekit.runtimes.trt import EngineMetadata, HostMetadata, check_compatible

    engine = EngineMetadata(
        tensorrt_version="10.3.0",
        gpu_name="Orin",
        compute_capability="8.7",
        l4t="36.3.0",
        source_onnx_sha256="a" * 64,
        precision="int8",
        created="2026-11-30T00:00:00+00:00",
    )
    host = HostMetadata(tensorrt_version="10.7.0", gpu_name="NVIDIA H200", compute_capability="9.0", l4t=None)
    reasons = check_compatible(engine, host, source_sha256="b" * 64)
    text = " ".join(reasons)
    assert len(reasons) >= 3 and "10.3.0" in text and "9.0" in text
