from __future__ import annotations

import re
import time

import pytest

from edgekit.probes.power.nvml import NvmlSampler, UnmappedGpu, cuda_to_nvml, open_nvml
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
    assert "NVML sees 1 GPU" in open_nvml(cuda_index=1, pynvml=fake_nvml()).reason


# ---- which board: CUDA's cuda:N against NVML's PCI-bus numbering ------------------------------
A100, H100 = "NVIDIA A100-SXM4-80GB", "NVIDIA H100 80GB HBM3"


def test_cuda_visible_devices_picks_the_board_the_decode_runs_on(fake_nvml):
    nvml = fake_nvml(gpus=4)
    # The bug this guards: cuda:0 under CUDA_VISIBLE_DEVICES=2 is NVML's GPU 2, not GPU 0.
    s = open_nvml(pynvml=nvml, env={"CUDA_VISIBLE_DEVICES": "2"})
    assert isinstance(s, NvmlSampler) and (s.index, s.cuda_index, s.rail) == (2, 0, "gpu2")
    assert "NVML GPU 2 (NVIDIA A10) is cuda:0 (CUDA_VISIBLE_DEVICES='2')" in s.notes()
    assert cuda_to_nvml(nvml, 1, {"CUDA_VISIBLE_DEVICES": "3, 1"})[0] == 1
    assert cuda_to_nvml(nvml, 1, {})[0] == 1  # unset: CUDA's numbering is NVML's for alike GPUs


def test_uuid_entries_and_their_unique_prefixes_resolve(fake_nvml):
    nvml = fake_nvml(gpus=3)
    assert cuda_to_nvml(nvml, 0, {"CUDA_VISIBLE_DEVICES": "GPU-00000002-1111-2222-3333-444455556666"})[0] == 2
    assert cuda_to_nvml(nvml, 1, {"CUDA_VISIBLE_DEVICES": "0,GPU-00000001"})[0] == 1
    with pytest.raises(UnmappedGpu, match=r"'GPU-0000000' matches 3 of NVML's GPUs .*full UUID"):
        cuda_to_nvml(nvml, 0, {"CUDA_VISIBLE_DEVICES": "GPU-0000000"})


@pytest.mark.parametrize(
    ("visible", "cuda_index", "says"),
    [
        ("1", 1, r"cuda:1 is not a visible device: CUDA_VISIBLE_DEVICES='1' makes 1 visible"),
        ("", 0, r"makes 0 visible"),
        ("-1", 0, r"makes 0 visible"),
        ("0,x,1", 1, r"makes 1 visible"),  # CUDA stops at the first entry it cannot read
        ("5", 0, r"is GPU 5, but NVML sees 2 GPU"),
        ("MIG-6a8e5b3c-1111", 0, r"MIG instance .* whole GPU's, shared with the other instances"),
    ],
)
def test_a_board_that_cannot_be_named_is_unavailable_with_the_reason(fake_nvml, visible, cuda_index, says):
    s = open_nvml(cuda_index, pynvml=fake_nvml(gpus=2), env={"CUDA_VISIBLE_DEVICES": visible})
    assert isinstance(s, Unavailable) and re.search(says, s.reason), s


def test_unlike_gpus_need_the_pci_bus_order_to_map_indices(fake_nvml):
    nvml = fake_nvml(gpus=2, names=[A100, H100.encode()])
    # CUDA's default order is fastest first (the H100 would be cuda:0), NVML's is by PCI bus.
    with pytest.raises(UnmappedGpu, match=r"CUDA_DEVICE_ORDER=PCI_BUS_ID"):
        cuda_to_nvml(nvml, 0, {})
    assert cuda_to_nvml(nvml, 0, {"CUDA_DEVICE_ORDER": "PCI_BUS_ID"})[0] == 0
    assert cuda_to_nvml(nvml, 0, {"CUDA_VISIBLE_DEVICES": "GPU-00000001"})[0] == 1  # a UUID is unambiguous


def test_missing_pynvml_names_the_extra():
    try:
        import pynvml  # noqa: F401
    except ImportError:
        u = open_nvml()
        assert isinstance(u, Unavailable) and "edgekit[nvml]" in u.reason
    else:
        pytest.skip("pynvml is installed here")
