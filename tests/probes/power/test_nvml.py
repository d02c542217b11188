from __future__ import annotations

import time

import pytest

from edgekit.probes.power.nvml import NvmlSampler, open_nvml
from edgekit.probes.power.trace import Unavailable


def run_window(sampler, seconds):
    sampler.start()
    time.sleep(seconds)
    return sampler.stop()


def test_energy_counter_path(fake_nvml):
    s = open_nvml(interval_s=0.01, pynvml=fake_nvml(energy_mw=200_000.0))
    assert isinstance(s, NvmlSampler) and s.has_energy_counter
    assert s.device_name == "NVIDIA A10" and s.total_rail == "gpu0"
    assert s.power_method.startswith("field 186")
    t = run_window(s, 0.2)
    assert t.energy_source == "energy counter (nvml)"
    assert t.energy_mj == pytest.approx(200_000.0 * t.duration_s, rel=0.05)
    assert t.rail_average_mw()["gpu0"] == pytest.approx(200_000.0, rel=0.05)  # counter-based
    assert any("updates every ~20-100 ms" in n for n in t.all_notes)


def test_counter_that_has_not_ticked_falls_back_to_power_and_says_so(fake_nvml):
    s = open_nvml(interval_s=0.005, pynvml=fake_nvml(energy_mw=0.0, power_mw=150_000))
    t = run_window(s, 0.02)
    assert t.energy_mj is not None and t.energy_mj > 0  # never a 0 J "measurement"
    assert t.energy_source.startswith("integrated")
    assert t.energy_mj == pytest.approx(150_001 * t.duration_s, rel=0.3)
    assert any("did not advance" in n and "not reported as 0" in n for n in t.all_notes)


def test_power_integration_path_without_counter_or_fields(fake_nvml):
    s = open_nvml(interval_s=0.01, pynvml=fake_nvml(energy_mw=None, fields=False, power_mw=80_000))
    assert isinstance(s, NvmlSampler) and not s.has_energy_counter
    assert s.power_method == "nvmlDeviceGetPowerUsage"
    t = run_window(s, 0.1)
    assert t.energy_source.startswith("integrated")
    assert t.total_average_mw == pytest.approx(80_000.0)
    notes = " ".join(t.all_notes)
    assert "no energy counter before Volta" in notes and "~1 s moving average" in notes


def test_average_field_when_instant_is_missing(fake_nvml):
    class AverageOnly(fake_nvml):
        def nvmlDeviceGetFieldValues(self, handle, field_ids):
            ((field_id, _),) = field_ids
            if field_id == 186:
                raise self.NVMLError("Not Supported")
            return super().nvmlDeviceGetFieldValues(handle, field_ids)

    s = open_nvml(pynvml=AverageOnly())
    assert s.power_method.startswith("field 185") and s.read().rails_mw == {"gpu0": 150_000.0}


def test_unavailable_cases(fake_nvml):
    assert "no NVIDIA driver" in open_nvml(pynvml=fake_nvml(init_error="Driver Not Loaded")).reason
    assert "sees 0 GPU" in open_nvml(pynvml=fake_nvml(gpus=0)).reason
    assert "sees 1 GPU" in open_nvml(index=1, pynvml=fake_nvml()).reason


def test_missing_pynvml_names_the_extra():
    try:
        import pynvml  # noqa: F401
    except ImportError:
        u = open_nvml()
        assert isinstance(u, Unavailable) and "edgekit[nvml]" in u.reason
    else:
        pytest.skip("pynvml is installed here")
