"""Minmax ranges kept as the FP32 calibration decodes run (``edgekit.quantize.ranges.LiveRanges``):
the same numbers a replay of the recorded calls gathers, and quantize replays none where it kept
them."""

from __future__ import annotations

import shutil

import numpy as np
import pytest

from edgekit.quantize import calibrator
from edgekit.quantize.calibrate import calibration_reader
from edgekit.quantize.config import WEIGHTED_OPS
from edgekit.quantize.ranges import live_ranges
from edgekit.spec import TensorSpec
from tests.quantize.conftest import D, tiny_feeds
from tests.quantize.test_calibrator import assert_same_ranges

ort = pytest.importorskip("onnxruntime")

INPUTS = {"x": TensorSpec((2, 4, D), "float32"), "t": TensorSpec((2,), "float32")}
OUTPUTS = {"y": TensorSpec((2, 4, D), "float32")}


@pytest.mark.parametrize("outputs", [("*",), ("Conv",)])
def test_live_ranges_equal_a_replay_of_the_same_calls_and_the_loop_gets_the_graphs_outputs(tiny_model, outputs):
    feeds = tiny_feeds(6)
    plain = ort.InferenceSession(str(tiny_model), providers=["CPUExecutionProvider"])
    with live_ranges(tiny_model, WEIGHTED_OPS, outputs, INPUTS, OUTPUTS) as rt:
        for feed in feeds:
            got = rt.run(feed)
            assert list(got) == ["y"]
            np.testing.assert_allclose(got["y"], plain.run(["y"], feed)[0], rtol=1e-5, atol=1e-6)
        live = rt.ranges()
    assert rt.session is None  # the weights go with the session when the context ends
    replay = calibrator.CallRanges()
    kept = calibrator.collect_min_max(tiny_model, calibration_reader(feeds), WEIGHTED_OPS, 0, replay, None, outputs)
    assert live.signed is not None and live.magnitude is not None and replay.magnitude is not None
    assert live.signed.calls == kept.calls == len(feeds)
    for name in kept.lo:  # the very numbers, not close ones: same graph, same session options
        assert live.signed.lo[name] == kept.lo[name] and live.signed.hi[name] == kept.hi[name], name
        assert live.magnitude.lo[name] == replay.magnitude.lo[name], name
    assert sorted(live.signed.lo) == sorted(kept.lo)
    np.testing.assert_array_equal(np.stack(live.rows), np.stack(replay.rows))
    assert_same_ranges(calibrator.min_max_data(live.signed), calibrator.min_max_data(kept))


def run_quantize(bundle, cfg, monkeypatch, max_bytes=None):
    """quantize_bundle with its progress lines, the recording bounded to ``max_bytes`` where given,
    and the replay pass counted."""
    from edgekit.quantize import calibrator as calibrator_module
    from edgekit.quantize import stage
    from edgekit.quantize.stage import quantize_bundle

    replays: list[int] = []
    real_collect, real_record = calibrator_module.collect_min_max, stage.record_trajectories

    def collect(*args, **kwargs):
        replays.append(1)
        return real_collect(*args, **kwargs)

    def record(*args, **kwargs):
        return real_record(*args, **kwargs, **({} if max_bytes is None else {"max_bytes": max_bytes}))

    monkeypatch.setattr(calibrator_module, "collect_min_max", collect)
    monkeypatch.setattr(stage, "record_trajectories", record)
    said: list[str] = []
    summary = quantize_bundle(bundle, cfg, progress=said.append)
    return summary, said, replays


def test_quantize_replays_no_call_where_the_calibration_decodes_kept_the_ranges(tiny_bundles, tmp_path, monkeypatch):
    from edgekit.quantize.config import QuantizeConfig

    flow = shutil.copytree(tiny_bundles["flow"], tmp_path / "flow")
    cfg = QuantizeConfig(method="minmax", calib_samples=4, eval_samples=4, fallback=False)
    s, said, replays = run_quantize(flow, cfg, monkeypatch)
    assert replays == []
    assert any("kept as the decodes ran" in line for line in said)
    assert s["calibration"]["feeds"] > 0 and s["range_drift"]  # the per-call ranges serve the drift too


def test_a_thinned_recording_replays_the_calls_it_kept(tiny_bundles, tmp_path, monkeypatch):
    """Where the recording kept every n-th call only, the ranges seen live cover calls the recording
    lacks: the kept calls are replayed, as before, so ranges and recorded calls agree."""
    from edgekit.quantize.config import QuantizeConfig

    flow = shutil.copytree(tiny_bundles["flow"], tmp_path / "flow")
    cfg = QuantizeConfig(method="minmax", calib_samples=4, eval_samples=4, fallback=False)
    s, said, replays = run_quantize(flow, cfg, monkeypatch, max_bytes=1)
    assert s["calibration"]["every_nth_call"] > 1
    assert replays == [1] and not any("kept as the decodes ran" in line for line in said)


def test_percentile_ranges_come_from_the_calibration_decodes_with_no_pass_and_the_same_model(
    tiny_bundles, tmp_path, monkeypatch
):
    """--method percentile: the calibration decodes keep each tensor's largest |x| beside its range
    (``ranges.Tails``), the ranges are cut from them and no histogram pass runs; the INT8 model is
    the very one a histogram pass over the recorded calls gives (the tails switched off)."""
    from edgekit.bundle import Bundle
    from edgekit.quantize import calibrator as calibrator_module
    from edgekit.quantize import ranges as ranges_module
    from edgekit.quantize.config import QuantizeConfig

    cfg = QuantizeConfig(method="percentile", calib_samples=4, eval_samples=4, fallback=False)
    real_histograms = calibrator_module.collect_histograms
    passes: list[int] = []

    def histograms(*args, **kwargs):
        passes.append(1)
        return real_histograms(*args, **kwargs)

    monkeypatch.setattr(calibrator_module, "collect_histograms", histograms)
    cut = shutil.copytree(tiny_bundles["flow"], tmp_path / "cut")
    s, said, _ = run_quantize(cut, cfg, monkeypatch)
    assert passes == [] and any("cut from the largest |x| of" in line for line in said), said
    assert s["range_drift"]  # the per-call ranges serve the drift too
    monkeypatch.setattr(ranges_module, "TAIL_VALUES_CAP", 0)  # no tails: the histogram pass
    binned = shutil.copytree(tiny_bundles["flow"], tmp_path / "binned")
    _, said, _ = run_quantize(binned, cfg, monkeypatch)
    assert passes == [1] and any("in the ranges the decodes kept" in line for line in said), said
    a, b = Bundle.load(cut).manifest["artifacts"]["int8"], Bundle.load(binned).manifest["artifacts"]["int8"]
    assert a["sha256"] == b["sha256"]


def test_tails_keep_the_largest_values_of_every_call_and_are_sized_for_the_calls_planned():
    from edgekit.quantize.ranges import TAIL_SLACK, TAIL_VALUES_CAP, Tails, tail_sizes

    sizes = tail_sizes({"a": 1000, "b": 10}, calls=64, percentile=99.9)
    assert sizes == {"a": int((1 - 99.9 / 100) * 1000 * 64 * TAIL_SLACK) + 2, "b": 2}
    assert tail_sizes({"a": 10}, calls=1, percentile=0.0) == {"a": 10}  # never more than a call has
    assert tail_sizes({"a": TAIL_VALUES_CAP + 1}, calls=1, percentile=0.0) is None  # too many: the histograms
    tails = Tails({"a": 3}, {"a": 5})
    rng = np.random.default_rng(0)
    calls = [rng.standard_normal(5).astype(np.float32) for _ in range(4)]
    for values in calls:
        tails.add("a", np.sort(values)[-3:])
    np.testing.assert_array_equal(np.sort(tails.top["a"]), np.sort(np.concatenate(calls))[-3:])
    assert tails.seen["a"] == 20
