"""quantize's budget measured on the target's runtime: OpenVINO decodes the INT8 candidates for
intel-cpu (its int8 kernels round differently from ORT's), recorded in the manifest."""

from __future__ import annotations

import pytest

from edgekit.bundle import Bundle
from edgekit.errors import UsageError
from edgekit.quantize import QuantizeConfig, quantize_bundle


def test_budget_runtime_must_be_one_that_can_measure_it():
    with pytest.raises(UsageError, match="valid: ort, openvino"):
        QuantizeConfig(runtime="trt")


@pytest.mark.slow
def test_openvino_decodes_the_int8_candidates(masked, monkeypatch):
    pytest.importorskip("openvino")
    from edgekit.quantize.cpu.fallback import FallbackProfile
    from edgekit.runtimes.openvino import OpenVinoRuntime

    opened = []
    real = FallbackProfile.budget_runtime
    monkeypatch.setattr(
        FallbackProfile,
        "budget_runtime",
        lambda self, model, **kw: (opened.append(rt := real(self, model, **kw)), rt)[1],
    )
    s = quantize_bundle(masked, QuantizeConfig(runtime="openvino", calib_samples=4, eval_samples=4, threads=1))
    assert opened and all(isinstance(rt, OpenVinoRuntime) for rt in opened)
    assert s["config"]["runtime"] == "openvino" and s["passed"], s["budget"]["checks"]
    assert Bundle.load(masked).manifest["quantization"]["config"]["runtime"] == "openvino"
