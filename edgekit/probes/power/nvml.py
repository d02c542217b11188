"""NVIDIA GPU board power through NVML (``nvidia-ml-py``, imported as ``pynvml``).

Energy prefers ``nvmlDeviceGetTotalEnergyConsumption`` (mJ since driver load, Volta and newer),
differenced across the window. That counter advances in steps every ~20-100 ms, so a shorter
window reads 0: the trace says so instead of reporting 0 J, and falls back to the power samples.
Power per sample is the instant field (``NVML_FI_DEV_POWER_INSTANT`` = 186) where supported,
else the average field (185), else ``nvmlDeviceGetPowerUsage`` (a ~1 s moving average on Ampere
and newer except GA100).

NVML numbers every GPU on the host in PCI bus order and ignores ``CUDA_VISIBLE_DEVICES``; a
decode names its GPU as CUDA does (``cuda:0`` is the first *visible* device). ``cuda_to_nvml``
maps one to the other, so ``CUDA_VISIBLE_DEVICES=1 edgekit profile --power nvml`` reads the board
the decode ran on, not GPU 0; where the mapping cannot be known the probe is unavailable and says
why (never another GPU's power).

``pynvml`` is a parameter so tests pass a fake module with the same function names.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from types import ModuleType
from typing import Any

from edgekit._deps import require
from edgekit.errors import MissingDependency
from edgekit.probes.power.sampler import PowerSampler, Reading
from edgekit.probes.power.trace import Unavailable

FI_POWER_AVERAGE = 185
FI_POWER_INSTANT = 186
NVML_SUCCESS = 0
SCOPE_GPU = 0


def load_pynvml(pynvml: Any = None) -> ModuleType | Any:
    """The given module, or ``pynvml`` imported lazily (``MissingDependency`` names the extra)."""
    return pynvml if pynvml is not None else require("pynvml")


class UnmappedGpu(LookupError):
    """A CUDA device whose NVML board cannot be named; the message says why and the fix."""


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def visible_entries(value: str) -> list[str]:
    """``CUDA_VISIBLE_DEVICES`` as CUDA reads it: comma-separated indices or ``GPU-``/``MIG-`` UUIDs
    (a unique prefix is enough); CUDA stops at the first entry that is neither, and ``-1`` or an
    empty value hides every device."""
    entries = []
    for raw in value.split(","):
        entry = raw.strip()
        if entry.isdigit() or entry.startswith(("GPU-", "MIG-")):
            entries.append(entry)
        else:
            break
    return entries


def cuda_to_nvml(nvml: Any, cuda_index: int, env: Mapping[str, str] | None = None) -> tuple[int, str]:
    """(NVML index, how it was found) of CUDA's ``cuda:<cuda_index>`` on an initialised NVML.

    Raises ``UnmappedGpu`` where the board is unknowable: an index past the visible devices, a UUID
    no GPU has, a MIG instance (NVML's board power is the whole GPU's, shared with the other
    instances), or integer indices under CUDA's default fastest-first order on a host whose GPUs
    differ (NVML counts by PCI bus; the two orders agree only when the GPUs are alike)."""
    env = os.environ if env is None else env
    count = int(nvml.nvmlDeviceGetCount())
    visible = env.get("CUDA_VISIBLE_DEVICES")
    if visible is None:
        entry, how = str(cuda_index), f"cuda:{cuda_index} (CUDA_VISIBLE_DEVICES unset)"
    else:
        entries = visible_entries(visible)
        if cuda_index >= len(entries):
            raise UnmappedGpu(
                f"cuda:{cuda_index} is not a visible device: CUDA_VISIBLE_DEVICES={visible!r} makes "
                f"{len(entries)} visible; run the decode on one of them or widen CUDA_VISIBLE_DEVICES"
            )
        entry, how = entries[cuda_index], f"cuda:{cuda_index} (CUDA_VISIBLE_DEVICES={visible!r})"
    if entry.startswith("MIG-"):
        raise UnmappedGpu(
            f"cuda:{cuda_index} is MIG instance {entry}: NVML's board power is the whole GPU's, shared with "
            "the other instances, not this decode's; measure on a whole GPU"
        )
    if entry.startswith("GPU-"):
        uuids = [_text(nvml.nvmlDeviceGetUUID(nvml.nvmlDeviceGetHandleByIndex(i))) for i in range(count)]
        found = [i for i, uuid in enumerate(uuids) if uuid.startswith(entry)]
        if len(found) != 1:
            raise UnmappedGpu(
                f"CUDA_VISIBLE_DEVICES entry {entry!r} matches {len(found)} of NVML's GPUs ({', '.join(uuids)}); "
                "name one GPU by its full UUID (nvidia-smi -L)"
            )
        return found[0], how
    index = int(entry)
    if index >= count:
        raise UnmappedGpu(f"{how} is GPU {index}, but NVML sees {count} GPU(s)")
    if env.get("CUDA_DEVICE_ORDER") != "PCI_BUS_ID" and count > 1:
        names = {_text(nvml.nvmlDeviceGetName(nvml.nvmlDeviceGetHandleByIndex(i))) for i in range(count)}
        if len(names) > 1:
            kinds = ", ".join(sorted(names))
            raise UnmappedGpu(
                f"CUDA numbers GPUs fastest first and NVML by PCI bus, and this host's differ ({kinds}): "
                "set CUDA_DEVICE_ORDER=PCI_BUS_ID, or name the GPU in CUDA_VISIBLE_DEVICES by its UUID"
            )
    return index, how


def _field_reader(nvml: Any, handle: Any, field_id: int) -> Callable[[], float] | None:
    """A reader of one power field in mW, or None when the driver does not support it."""

    def read() -> float:
        (value,) = nvml.nvmlDeviceGetFieldValues(handle, [(field_id, SCOPE_GPU)])
        if value.nvmlReturn != NVML_SUCCESS:
            raise RuntimeError(f"NVML field {field_id} returned {value.nvmlReturn}")
        return float(value.value.uiVal)

    try:
        read()
    except Exception:  # noqa: BLE001 - older drivers raise, or return an error per field
        return None
    return read


class NvmlSampler(PowerSampler):
    probe = "nvml"
    default_interval_s = 0.05

    def __init__(
        self, pynvml: Any, index: int = 0, interval_s: float | None = None, *, cuda_index: int = 0, mapped: str = ""
    ):
        super().__init__(interval_s)
        self.nvml = pynvml
        self.index = index  # NVML's (PCI bus order, every GPU on the host)
        self.cuda_index = cuda_index  # the cuda:N whose board this is (scope.unseen_reason compares)
        self.handle = pynvml.nvmlDeviceGetHandleByIndex(index)
        self.device_name = _text(pynvml.nvmlDeviceGetName(self.handle))
        self.rail = f"gpu{index}"
        self.total_rail = self.rail
        self.total_source = f"NVML board power of GPU {index} ({self.device_name})"
        self.mapped = mapped or f"cuda:{cuda_index}"
        try:
            pynvml.nvmlDeviceGetTotalEnergyConsumption(self.handle)
            self.has_energy_counter = True
        except Exception:  # noqa: BLE001 - NVMLError_NotSupported before Volta
            self.has_energy_counter = False
        instant = _field_reader(pynvml, self.handle, FI_POWER_INSTANT)
        average = _field_reader(pynvml, self.handle, FI_POWER_AVERAGE)
        if instant is not None:
            self._power, self.power_method = instant, "field 186 NVML_FI_DEV_POWER_INSTANT"
        elif average is not None:
            self._power, self.power_method = average, "field 185 NVML_FI_DEV_POWER_AVERAGE"
        else:
            self._power = lambda: float(pynvml.nvmlDeviceGetPowerUsage(self.handle))
            self.power_method = "nvmlDeviceGetPowerUsage"

    def read(self) -> Reading:
        rails = {self.rail: self._power()}
        counters = {}
        if self.has_energy_counter:
            counters[self.rail] = float(self.nvml.nvmlDeviceGetTotalEnergyConsumption(self.handle))
        return Reading(rails, counters)

    def notes(self) -> list[str]:
        notes = [f"NVML GPU {self.index} ({self.device_name}) is {self.mapped}", f"power samples: {self.power_method}"]
        if self.has_energy_counter:
            notes.append("energy: nvmlDeviceGetTotalEnergyConsumption, which updates every ~20-100 ms")
        else:
            notes.append("energy: integrated power samples (no energy counter before Volta)")
        if self.power_method == "nvmlDeviceGetPowerUsage":
            notes.append("nvmlDeviceGetPowerUsage is a ~1 s moving average on Ampere and newer: short runs smear")
        return notes


def open_nvml(
    cuda_index: int = 0, interval_s: float | None = None, pynvml: Any = None, env: Mapping[str, str] | None = None
) -> NvmlSampler | Unavailable:
    """The board power of the GPU CUDA calls ``cuda:<cuda_index>`` (``cuda_to_nvml``), or why not."""
    try:
        nvml = load_pynvml(pynvml)
    except MissingDependency as exc:
        return Unavailable("nvml", str(exc))
    try:
        nvml.nvmlInit()
    except Exception as exc:  # noqa: BLE001 - NVMLError_LibraryNotFound, DriverNotLoaded, ...
        return Unavailable("nvml", f"NVML could not initialise ({exc}): no NVIDIA driver on this host")
    try:
        index, how = cuda_to_nvml(nvml, cuda_index, env)
        return NvmlSampler(nvml, index, interval_s, cuda_index=cuda_index, mapped=how)
    except UnmappedGpu as exc:
        return Unavailable("nvml", str(exc))
    except Exception as exc:  # noqa: BLE001
        return Unavailable("nvml", f"NVML query failed: {exc}")
