"""NVML against a real NVIDIA driver and board (``gpu``: skipped, with the reason, where there is
none). The other NVML tests run a fake module with NVML's function names; these catch what a fake
cannot: the driver's real return types, fields a board does not support, and whether the figures
are a board's at all (an idle H100 draws tens of watts, a busy one hundreds)."""

from __future__ import annotations

import time

import pytest

from edgekit.probes.power.nvml import NvmlSampler, open_nvml
from edgekit.probes.power.trace import Unavailable
from edgekit.probes.system import system_state

pytestmark = pytest.mark.gpu
pytest.importorskip("pynvml", reason="nvidia-ml-py is not installed (pip install 'edgekit[nvml]')")


@pytest.fixture
def sampler() -> NvmlSampler:
    s = open_nvml(interval_s=0.02)
    if isinstance(s, Unavailable):
        pytest.skip(f"no NVIDIA GPU here: {s.reason}")
    return s


def _window(sampler: NvmlSampler, seconds: float, work=None):
    sampler.start()
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        work() if work is not None else time.sleep(0.01)
    return sampler.stop()


def test_a_real_board_reads_its_power_and_energy(sampler):
    trace = _window(sampler, 1.5)  # several ticks of the ~20-100 ms energy counter
    watts = trace.rail_average_mw()["gpu0"] / 1000
    assert 5 < watts < 1500, f"{sampler.device_name}: {watts:.1f} W is no board's power"
    assert trace.energy_mj is not None and trace.energy_mj > 0
    if sampler.has_energy_counter:  # Volta and newer
        assert trace.energy_source == "energy counter (nvml)"
    assert sampler.device_name and trace.all_notes


def test_gpu_work_reads_more_power_than_idle(sampler):
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("torch has no CUDA here: nothing to load the GPU with")
    a = torch.randn(8192, 8192, device="cuda", dtype=torch.float16)

    def work():
        for _ in range(8):
            a @ a
        torch.cuda.synchronize()

    work()  # clocks up, kernels loaded
    idle = _window(sampler, 2.0)  # power samples lag the load by tens of ms at most (field 186)
    busy = _window(sampler, 3.0, work)
    idle_w, busy_w = idle.rail_average_mw()["gpu0"] / 1000, busy.rail_average_mw()["gpu0"] / 1000
    assert busy_w > 1.3 * idle_w, f"busy {busy_w:.0f} W vs idle {idle_w:.0f} W"
    assert busy.energy_mj > idle.energy_mj


def test_the_system_state_reads_the_gpus_clocks():
    state = system_state()
    nvml = state.get("nvml")
    if nvml is None:
        pytest.skip("NVML did not initialise here")
    assert nvml["sm_mhz"] > 0 and nvml["mem_mhz"] > 0
    assert isinstance(nvml.get("throttle_reasons"), (list, type(None)))
