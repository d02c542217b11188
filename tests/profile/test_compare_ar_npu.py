"""NAR vs AR on the NPU (issue #16 item 3): `profile --runtime qnn --precision int8 --compare-ar`
decodes the masked model and the AR baseline (its loop cache form) on the emulated HTP backend,
both labelled as emulation; the length sweep (it rebuilds the built-in architectures on ort, openvino
or torch) says why it cannot run, and the rest is reported."""

from __future__ import annotations

import pytest

from edgekit.profile import ProfileConfig, profile_bundle
from edgekit.profile.measure import MeasureConfig

pytestmark = pytest.mark.slow  # decodes on the emulated NPU

ONCE = MeasureConfig(warmup_iters=0, warmup_seconds=0.0, iters=2, min_seconds=0.0)


def test_nar_and_ar_are_compared_on_the_htp(tiny_qnn_bundles):
    cfg = ProfileConfig(
        runtimes=("qnn",),
        precisions=("int8",),
        compare_ar=True,
        ar_bundle=tiny_qnn_bundles["ar"],
        measure=ONCE,
        power="off",
        cond={"class_id": "1"},
        frontier_steps=(),
        sweep_lengths=(16,),
    )
    doc = profile_bundle(tiny_qnn_bundles["masked"], cfg)
    nar, ar = doc["variants"][0], doc["compare_ar"]["variants"][0]
    assert nar["available"] and ar["available"] and ar["id"] == "AR qnn int8"
    assert ar["decode"]["runtime_calls"] == 12  # one HTP call per token of the 12-token loop form graph
    speedup = doc["compare_ar"]["speedups"][0]
    assert speedup["speedup"] == pytest.approx(ar["latency"]["median_ms"] / nar["latency"]["median_ms"])
    assert "emulation" in (nar.get("timing_note") or "") and "emulation" in (ar.get("timing_note") or "")
    sweep = doc["compare_ar"]["crossover"]["sweep"]
    assert not sweep["available"] and sweep["reason"]  # a reason, not an error: the rest is reported
