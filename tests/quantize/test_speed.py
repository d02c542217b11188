"""INT8 against FP32 per decode, the last step of quantize (``quantize.speed``): a decode long
enough by the first FP32 decode's clock is timed on its first steps and scaled to a whole one."""

from __future__ import annotations

import pytest


@pytest.mark.slow
def test_a_long_decode_is_timed_on_its_first_step_and_recorded_so(masked, monkeypatch):
    """With every decode "long" (SPEED_PART_S stood in at a microsecond), the timed decodes run
    one step each on the FP32 speed session (a recorded call to warm it, then one call a timed
    decode), the plan prices them as a share of a decode, and the record scales them to whole
    decodes and says how."""
    from edgekit.bundle import Bundle
    from edgekit.quantize import QuantizeConfig, decodes, quantize_bundle, speed
    from edgekit.quantize.scratch import calls_per_decode
    from edgekit.runtimes.ort import OrtOptions, OrtRuntime

    monkeypatch.setattr(decodes, "SPEED_PART_S", 1e-6)
    timed = []

    class Spy(OrtRuntime):
        def __init__(self, path, options=OrtOptions()):
            super().__init__(path, options)
            self.calls = 0
            timed.append(self)

        def run(self, feeds):
            self.calls += 1
            return super().run(feeds)

    monkeypatch.setattr(speed, "OrtRuntime", Spy)
    s = quantize_bundle(masked, QuantizeConfig(calib_samples=2, eval_samples=2, fallback=False, threads=1))
    b = Bundle.load(masked)
    steps = b.decode_defaults["steps"]
    record = s["speed"]
    assert record["timed_steps"]["steps"] == 1 and record["timed_steps"]["of"] == steps
    fp32 = record["timing"]["timings"]["fp32"]
    assert record["fp32_ms_per_decode"] == pytest.approx(fp32["median_ms"] * steps)
    assert s["plan"]["speed_decodes"] == pytest.approx(2 * speed.SPEED_ROUNDS / steps)
    (spy,) = timed
    per_step = calls_per_decode(b.kind, b.meta, b.decode_defaults, {"steps": 1})
    assert per_step == 1 and b.decode_defaults.get("guidance", 1.0) == 1.0  # one call a step
    # the warm-up call, then one call a timed decode: at most 1 + EXTRA_ROUNDS rounds of SPEED_ROUNDS
    # (a busy host times again), where whole decodes would make ``steps`` calls each
    rounds = record["timing"]["rounds"]
    assert 1 + len(fp32["samples_ms"]) <= spy.calls <= 1 + rounds * speed.SPEED_ROUNDS < len(fp32["samples_ms"]) * steps
    assert b.quantization.speed.timing["timings"]["fp32"]["n"] == fp32["n"]  # the manifest keeps it too
