"""NVIDIA GPU board power through NVML (``nvidia-ml-py``, imported as ``pynvml``).

Energy prefers ``nvmlDeviceGetTotalEnergyConsumption`` (mJ since driver load, Volta and newer),
differenced across the window. That counter advances in steps every ~20-100 ms, so a shorter
window reads 0: the trace says so instead of reporting 0 J, and falls back to the power samples.
Power per sample is the instant field (``NVML_FI_DEV_POWER_INSTANT`` = 186) where supported,
else the average field (185), else ``nvmlDeviceGetPowerUsage`` (a ~1 s moving average on Ampere
and newer except GA100).

``pynvml`` is a parameter so tests pass a fake module with the same function names.
"""

from __future__ import annotations

from collections.abc import Callable
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

    def __init__(self, pynvml: Any, index: int = 0, interval_s: float | None = None):
        super().__init__(interval_s)
        self.nvml = pynvml
        self.index = index
        self.handle = pynvml.nvmlDeviceGetHandleByIndex(index)
        name = pynvml.nvmlDeviceGetName(self.handle)
        self.device_name = name.decode() if isinstance(name, bytes) else str(name)
        self.rail = f"gpu{index}"
        self.total_rail = self.rail
        self.total_source = f"NVML board power of GPU {index} ({self.device_name})"
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
        notes = [f"power samples: {self.power_method}"]
        if self.has_energy_counter:
            notes.append("energy: nvmlDeviceGetTotalEnergyConsumption, which updates every ~20-100 ms")
        else:
            notes.append("energy: integrated power samples (no energy counter before Volta)")
        if self.power_method == "nvmlDeviceGetPowerUsage":
            notes.append("nvmlDeviceGetPowerUsage is a ~1 s moving average on Ampere and newer: short runs smear")
        return notes


def open_nvml(index: int = 0, interval_s: float | None = None, pynvml: Any = None) -> NvmlSampler | Unavailable:
    try:
        nvml = load_pynvml(pynvml)
    except MissingDependency as exc:
        return Unavailable("nvml", str(exc))
    try:
        nvml.nvmlInit()
    except Exception as exc:  # noqa: BLE001 - NVMLError_LibraryNotFound, DriverNotLoaded, ...
        return Unavailable("nvml", f"NVML could not initialise ({exc}): no NVIDIA driver on this host")
    try:
        count = nvml.nvmlDeviceGetCount()
        if index >= count:
            return Unavailable("nvml", f"GPU index {index} requested but NVML sees {count} GPU(s)")
        return NvmlSampler(nvml, index, interval_s)
    except Exception as exc:  # noqa: BLE001
        return Unavailable("nvml", f"NVML query failed: {exc}")
