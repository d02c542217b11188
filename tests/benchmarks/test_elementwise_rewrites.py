"""benchmarks/elementwise_rewrites.py: each pair holds the graph edgekit replaces and its rewrite
(the rewrite is checked to have happened), and each form's error against float64 is recorded;
no timing is asserted."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")
pytest.importorskip("openvino")
sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
import elementwise_rewrites  # noqa: E402

SHAPE = [1, 128, 128]  # 16,384 values: the smallest Sin the OpenVINO rewrite takes


def test_both_pairs_time_each_form_and_record_its_error():
    sins, x = elementwise_rewrites.sin_pair(SHAPE, threads=1)
    got = elementwise_rewrites.time_pair(sins, x, rounds=2, exact=np.sin(x.astype(np.float64)))
    assert set(got) == {"reference kernel", "polynomial"}
    assert all(len(r["samples_ms"]) == 2 and r["median_ms"] > 0 for r in got.values())
    assert got["polynomial"]["max_abs_error"] < 1e-6

    mishes, x = elementwise_rewrites.mish_pair(SHAPE, threads=1)
    x64 = x.astype(np.float64)
    got = elementwise_rewrites.time_pair(mishes, x, rounds=2, exact=x64 * np.tanh(np.log1p(np.exp(x64))))
    assert set(got) == {"Softplus chain", "logistic form"}
    assert got["logistic form"]["max_abs_error"] < 1e-4


def test_a_sin_too_small_to_rewrite_is_refused_in_one_line():
    with pytest.raises(SystemExit, match="not rewritten"):
        elementwise_rewrites.sin_pair([1, 8, 8], threads=1)


@pytest.mark.parametrize("bad", ["abc", "2,0,8", ""])
def test_a_bad_shape_is_one_line_and_exit_2(bad, capsys, monkeypatch):
    monkeypatch.setattr(sys, "argv", ["elementwise_rewrites.py", "--shape", bad])
    with pytest.raises(SystemExit) as exc:
        elementwise_rewrites.main()
    assert exc.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert "is not a shape" in err[-1] and "Traceback" not in "\n".join(err)
