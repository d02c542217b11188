"""The reader feeds the recorded calls to ORT; range drift is grouped by loop call; the FP32
trajectories of a bundle record every call (the recording itself: tests/runtimes/test_recording.py)."""

from __future__ import annotations

import numpy as np
import pytest

from edgekit.quantize.calibrate import Trajectories, TrajectoryReader, range_drift
from edgekit.runtimes.recording import RecordedCall
from tests.quantize.conftest import tiny_feeds


def test_reader_is_an_ort_calibration_reader_that_rewinds():
    quant = pytest.importorskip("onnxruntime.quantization")
    from edgekit.quantize.calibrate import calibration_reader

    feeds = [{"x": np.full((1,), i, np.float32)} for i in range(5)]
    reader = calibration_reader(feeds)
    assert isinstance(reader, quant.CalibrationDataReader) and len(reader) == 5
    assert [int(f["x"][0]) for f in reader] == [0, 1, 2, 3, 4]
    assert reader.get_next() is None
    reader.rewind()
    assert int(reader.get_next()["x"][0]) == 0
    reader.set_range(2, 4)
    assert [int(f["x"][0]) for f in iter(reader.get_next, None)] == [2, 3]
    assert isinstance(TrajectoryReader([]), quant.CalibrationDataReader)


def test_range_drift_groups_ranges_by_loop_call(tiny_model):
    pytest.importorskip("onnxruntime")
    feeds = tiny_feeds(6)
    for i, f in enumerate(feeds):
        f["x"] *= 1 + (i % 3)  # call 2 of each decode sees 3x the range of call 0
    calls = [RecordedCall(decode=i // 3, call=i % 3, position=float(i % 3)) for i in range(6)]
    traj = Trajectories(feeds, calls, decodes=2, samples=4, seed=0)
    drift = range_drift(tiny_model, ["x", "h"], traj)
    assert drift.amax.shape == (3, 2) and drift.positions == (0.0, 1.0, 2.0)
    for call in range(3):
        expected = max(np.abs(feeds[call]["x"]).max(), np.abs(feeds[call + 3]["x"]).max())
        assert drift.amax[call, 0] == pytest.approx(expected, rel=1e-6)
    assert drift.share[2, 0] == pytest.approx(1.0)
    assert drift.share[0, 0] < 0.5  # the first call uses a third of the calibrated range of x
    assert drift.share[:, 1].min() > 0.6  # LayerNorm output: scale-free, barely drifts
    rows = drift.table(max_rows=2)
    assert [r["calls"] for r in rows] == [[0, 1], [2, 2]] and rows[0]["min_tensor"] == "x"
    assert drift.most_drifting(1)[0]["tensor"] == "x"


def test_a_tensor_that_is_zero_in_some_calls_uses_no_range_there_rather_than_too_little():
    # SD3 under guidance: the unconditional calls feed an all-zero condition, whose projection's
    # input read "min share 0" in every unconditional group; it is counted apart instead.
    from edgekit.quantize.calibrate import RangeDrift

    amax = np.array([[2.0, 0.0, 4.0], [1.0, 0.0, 4.0], [2.0, 3.0, 2.0], [1.0, 3.0, 4.0]])  # [calls, tensors]
    drift = RangeDrift(("x", "cond", "h"), (0.0, 0.0, 0.5, 0.5), amax)
    uncond, cond = drift.table(max_rows=2)
    assert uncond["zero_tensors"] == 1 and uncond["min_tensor"] == "x" and uncond["min_share"] == pytest.approx(1.0)
    assert uncond["mean_share"] == pytest.approx(1.0)  # x at 2/2, h at 4/4; cond left out
    assert cond["zero_tensors"] == 0 and cond["min_tensor"] == "x" and cond["min_share"] == pytest.approx(1.0)
    drifting = {d["tensor"]: d["max_over_min"] for d in drift.most_drifting(3)}
    assert drifting == {"x": pytest.approx(2.0), "h": pytest.approx(2.0), "cond": pytest.approx(1.0)}
    all_zero = RangeDrift(("z",), (0.0,), np.zeros((1, 1)))
    assert all_zero.table()[0]["zero_tensors"] == 1 and all_zero.most_drifting()[0]["max_over_min"] == 1.0


@pytest.mark.parametrize("method", ["minmax", "percentile"])
def test_range_drift_reuses_the_calibrators_per_call_ranges(tiny_model, method, monkeypatch):
    """The calibrator keeps each call's max |x| (``CallRanges``): the drift is the same as running
    the model over every feed again, and no session opens for it."""
    pytest.importorskip("onnxruntime")
    from edgekit.quantize import calibrate as calibrate_module
    from edgekit.quantize.calibrate import calibration_reader
    from edgekit.quantize.calibrator import CallRanges, collect_ranges

    feeds = tiny_feeds(6)
    for i, f in enumerate(feeds):
        f["x"] *= 1 + (i % 3)
    calls = [RecordedCall(decode=i // 3, call=i % 3, position=float(i % 3)) for i in range(6)]
    traj = Trajectories(feeds, calls, decodes=2, samples=4, seed=0)
    kept = CallRanges()
    collect_ranges(tiny_model, calibration_reader(feeds), method, ["MatMul", "LayerNormalization"], calls=kept)
    assert len(kept.rows) == 6 and {"x", "h"} <= set(kept.index)
    ran = range_drift(tiny_model, ["x", "h"], traj)

    def no_session(*args, **kwargs):
        raise AssertionError("range_drift ran the model although the calibrator kept every call's ranges")

    monkeypatch.setattr(calibrate_module, "tapped_session", no_session)
    reused = range_drift(tiny_model, ["x", "h"], traj, recorded=kept)
    np.testing.assert_allclose(reused.amax, ran.amax, rtol=1e-5)
    assert reused.positions == ran.positions
    # a tensor the calibrator did not see, or another recording: the model runs (here: refused)
    with pytest.raises(AssertionError, match="ran the model"):
        range_drift(tiny_model, ["x", "not-calibrated"], traj, recorded=kept)
    with pytest.raises(AssertionError, match="ran the model"):
        range_drift(tiny_model, ["x"], Trajectories(feeds[:3], calls[:3], 1, 2, 0), recorded=kept)


def test_record_trajectories_on_the_masked_demo(quant_bundles):
    from edgekit.bundle import Bundle
    from edgekit.quantize.calibrate import record_trajectories
    from edgekit.runtimes import open_runtime

    bundle = Bundle.load(quant_bundles["masked"])
    with open_runtime(bundle, "ort", "fp32") as rt:
        traj = record_trajectories(bundle, rt, samples=3, seed=5, decode_options={"steps": 4})
    assert traj.decodes == 2 and len(traj.feeds) == 8 and traj.calls_per_decode == 4  # batch 2: ceil(3/2) decodes
    assert traj.summary()["positions"][-1] == 1.0
    assert {c.decode for c in traj.calls} == {0, 1}
    assert traj.summary()["every_nth_call"] == 1  # the demo records every call, far under the bound
    per_call = sum(a.nbytes for a in traj.feeds[0].values())
    with open_runtime(bundle, "ort", "fp32") as rt:
        thin = record_trajectories(bundle, rt, samples=3, seed=5, decode_options={"steps": 4}, max_bytes=4 * per_call)
    assert thin.summary()["every_nth_call"] == 2 and thin.calls_per_decode == 2 and len(thin.feeds) == 4
