"""Which device's power each probe reads, so a profile never calls one device's draw another
device's decode energy (an idle H100 board's 70 W divided by CPU decodes).

``nvml`` reads one NVIDIA GPU's board: it sees decodes on CUDA or TensorRT and nothing else.
``rapl`` reads the x86 CPU package (on client chips that includes the integrated GPU): it sees
everything but a discrete NVIDIA GPU. The board probes (Jetson INA3221 and tegrastats, the Android
battery and ODPM rails, the Pi 5 PMIC) read the whole board: every device on it.
"""

from __future__ import annotations

import re

# ``Runtime.device`` of a decode on an NVIDIA GPU: ORT's CUDA and TensorRT execution providers,
# edgekit's TensorRT runtime (``cuda:0``), torch (``cuda``, ``cuda:1``).
# ORT's runtime appends ":N" where the provider options chose device_id N (not 0).
_TORCH_CUDA = re.compile(r"cuda(:\d+)?")
_PROVIDER_ORDINAL = re.compile(r"(CUDAExecutionProvider|TensorrtExecutionProvider)(:\d+)?")

# What each probe reads, in the words a report uses.
READS: dict[str, str] = {
    "nvml": "one NVIDIA GPU's board power",
    "rapl": "the x86 CPU package (with its integrated GPU)",
    "jetson": "the whole Jetson board (INA3221)",
    "tegrastats": "the whole Jetson board (tegrastats)",
    "android": "the whole phone (battery)",
    "odpm": "the whole phone (ODPM rails)",
    "rpi": "the whole Raspberry Pi board (PMIC)",
}


def on_nvidia_gpu(device: str) -> bool:
    """Whether ``device`` (a ``Runtime.device``) names an NVIDIA GPU."""
    return _PROVIDER_ORDINAL.fullmatch(device) is not None or _TORCH_CUDA.fullmatch(device) is not None


def cuda_index(device: str) -> int:
    """The CUDA ordinal of an NVIDIA ``device``: ``cuda:N`` and ``<provider>:N`` name it; a bare
    provider or ``cuda`` is CUDA's current device, 0 unless the process chose another."""
    _, _, tail = device.partition(":")
    return int(tail) if tail.isdigit() else 0


def unseen_reason(probe: str, device: str, probe_cuda_index: int | None = None) -> str | None:
    """None where ``probe`` reads the power of ``device``, the one a decode ran on; else one line:
    what the probe reads, where the decode ran, and the fix. ``probe_cuda_index``: the ``cuda:N``
    whose board an nvml probe reads (``NvmlSampler.cuda_index``). A probe not in ``READS`` (a
    test's stand-in) is taken at its word."""
    if probe == "nvml" and not on_nvidia_gpu(device):
        return (
            f"nvml reads {READS['nvml']}, but this decode ran on {device}: the GPU's draw is not its energy; "
            "use --power rapl for a decode on the x86 CPU, or run the decode on the GPU (--runtime trt)"
        )
    ran = cuda_index(device)
    if probe == "nvml" and probe_cuda_index is not None and ran != probe_cuda_index:
        return (
            f"nvml reads the board of cuda:{probe_cuda_index}, but this decode ran on {device} (cuda:{ran}): "
            f"another GPU's draw is not its energy; run the decode on cuda:{probe_cuda_index}, or make its GPU "
            "the only visible one (CUDA_VISIBLE_DEVICES)"
        )
    if probe == "rapl" and on_nvidia_gpu(device):
        return (
            f"rapl reads {READS['rapl']}, but this decode ran on an NVIDIA GPU ({device}): "
            "the package's draw is not its energy; use --power nvml"
        )
    return None
