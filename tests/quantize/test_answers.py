"""Quantize asks FP32 each held-out question once: every candidate's budget and gate are
answered from the reference decode (``runtimes.memo``), and a candidate asked the same question
twice runs it once, with the very numbers a run that asks again gets."""

from __future__ import annotations

import shutil

import pytest

from edgekit.quantize import QuantizeConfig, quantize_bundle
from edgekit.runtimes.memo import MemoRuntime

pytest.importorskip("onnxruntime")

# Enough to make the search try candidates: tight budgets, few rows. The trt profile: the cpu
# profile times its fallbacks' form on this host, and a candidate more or less would follow the load.
# Each miss is one check's gate judges (a candidate that misses the budget's own SNR or accuracy
# keys is not run through the gate, whose questions are the ones answered from FP32's reference):
# the lockstep agreement keeps its gate, and flow's budget misses on the gate's margin alone.
CONFIGS = {
    "masked": QuantizeConfig(
        profile="trt", eval_samples=4, calib_samples=2, budget={"lockstep_token_agreement": 0.9999}, max_fallback=2
    ),
    "flow": QuantizeConfig(
        profile="trt",
        eval_samples=4,
        calib_samples=2,
        budget={"snr_db": 0.0, "gt_snr_drop_db": 100.0, "check_margin": 10.0},
        max_fallback=2,
    ),
}


@pytest.mark.parametrize("kind", ["masked", "flow"])
def test_kept_answers_give_the_numbers_asking_again_gives(kind, tiny_bundles, tmp_path, monkeypatch):
    kept = quantize_bundle(shutil.copytree(tiny_bundles[kind], tmp_path / "kept"), CONFIGS[kind])
    with monkeypatch.context() as m:
        m.setattr(MemoRuntime, "_keep", lambda self, key, out: None)  # every question runs again
        again = quantize_bundle(shutil.copytree(tiny_bundles[kind], tmp_path / "again"), CONFIGS[kind])
    assert kept["measured"] == again["measured"]
    assert [f["node"] for f in kept["fallback"]] == [f["node"] for f in again["fallback"]]
    a, b = kept["answers"], again["answers"]
    assert a["candidates"] == b["candidates"] >= 2  # the search tried more than one candidate
    # The reference decode is the only FP32 that runs: every candidate's FP32 side is answered.
    reference_calls = a["fp32_calls_run"]
    assert a["fp32_calls_answered"] >= a["candidates"] * reference_calls > 0
    assert b["fp32_calls_answered"] == 0 and b["fp32_calls_run"] >= (1 + a["candidates"]) * reference_calls
    # Each candidate's own questions (its decode, its answers on FP32's trajectory) run once.
    assert a["candidate_calls_answered"] > 0 and a["candidate_calls_run"] < b["candidate_calls_run"]
