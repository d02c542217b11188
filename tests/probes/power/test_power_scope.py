"""Which device each power probe sees: a probe's readings are a decode's energy only where the
probe reads the device the decode ran on (``Runtime.device`` as each runtime sets it)."""

from __future__ import annotations

import pytest

from edgekit.probes.power import CHOICES, unseen_reason
from edgekit.probes.power.scope import READS

NVIDIA = ["CUDAExecutionProvider", "TensorrtExecutionProvider", "cuda:0", "cuda:1", "cuda", "CUDAExecutionProvider:1"]
# ORT on the CPU, OpenVINO's execution devices (one or several), QNN's HTP line, a runtime's default,
# and a name that only starts like torch's.
ELSEWHERE = [
    "CPUExecutionProvider",
    "CPU",
    "GPU.0",
    "NPU",
    "CPU,GPU.0",
    "QNNExecutionProvider HTP v73 QDQ int8/int16 (x86 emulation)",
    "cpu",
    "cudaish",
    "CUDAExecutionProviderX",
]
BOARDS = ["jetson", "tegrastats", "android", "odpm", "rpi"]


@pytest.mark.parametrize("device", NVIDIA)
def test_nvml_sees_cuda_and_tensorrt_and_rapl_does_not(device):
    assert unseen_reason("nvml", device) is None
    reason = unseen_reason("rapl", device)
    assert reason is not None and device in reason and "--power nvml" in reason


@pytest.mark.parametrize("device", ELSEWHERE)
def test_nvml_sees_nothing_off_the_nvidia_gpu_and_rapl_sees_it(device):
    assert unseen_reason("rapl", device) is None
    reason = unseen_reason("nvml", device)
    assert reason is not None
    assert reason.startswith("nvml reads one NVIDIA GPU's board power, but this decode ran on " + device)
    assert "--power rapl" in reason and "--runtime trt" in reason


@pytest.mark.parametrize("device", NVIDIA + ELSEWHERE)
@pytest.mark.parametrize("probe", BOARDS)
def test_whole_board_probes_see_every_device(probe, device):
    assert unseen_reason(probe, device) is None


def test_every_probe_a_user_can_name_says_what_it_reads():
    # A new probe must say what it reads (and, where it is not the whole board, what it misses).
    assert set(READS) == set(CHOICES) - {"auto", "off"}
    assert set(BOARDS) | {"nvml", "rapl"} == set(READS)


@pytest.mark.parametrize(
    ("device", "ordinal"),
    [("cuda:0", 0), ("cuda", 0), ("CUDAExecutionProvider", 0), ("cuda:2", 2), ("TensorrtExecutionProvider:1", 1)],
)
def test_nvml_sees_only_the_gpu_whose_board_it_reads(device, ordinal):
    # The sampler reads one board (cuda:1's); a decode on any other GPU gets no energy from it.
    assert (unseen_reason("nvml", device, probe_cuda_index=1) is None) == (ordinal == 1)
    if ordinal != 1:
        reason = unseen_reason("nvml", device, probe_cuda_index=1)
        assert reason.startswith(f"nvml reads the board of cuda:1, but this decode ran on {device} (cuda:{ordinal})")
        assert "CUDA_VISIBLE_DEVICES" in reason
