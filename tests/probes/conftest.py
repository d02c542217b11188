"""Fixtures for the probes: fake sysfs trees written under tmp_path, laid out as on the devices."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path

import pytest


@pytest.fixture
def write_tree(tmp_path: Path) -> Callable[[Mapping[str, str | int]], Path]:
    """Write ``{"/sys/...": content}`` under tmp_path and return tmp_path as the probe root."""

    def write(files: Mapping[str, str | int]) -> Path:
        for rel, content in files.items():
            path = tmp_path / rel.lstrip("/")
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(f"{content}\n")
        return tmp_path

    return write


class _FieldValue:
    def __init__(self, ret: int, mw: int):
        self.nvmlReturn = ret
        self.value = type("Value", (), {"uiVal": mw})()


class FakeNvml:
    """The pynvml functions the probes call, with the same names and return shapes.

    ``energy_mw`` makes the energy counter advance like a GPU drawing that power (None: no counter,
    as before Volta; 0: a counter that has not ticked yet). ``fields`` False makes field queries
    fail per field as older drivers do.
    """

    class NVMLError(Exception):
        pass

    def __init__(
        self, *, gpus=1, energy_mw=200_000.0, power_mw=150_000, fields=True, init_error=None, names=None, uuids=None
    ):
        import time

        self._t0 = time.monotonic()
        self.gpus, self.energy_mw, self.power_mw = gpus, energy_mw, power_mw
        # Per NVML index (PCI bus order); NVML returns bytes from older bindings, str from newer.
        self.names = names or [b"NVIDIA A10"] * gpus
        self.uuids = uuids or [f"GPU-{i:08x}-1111-2222-3333-444455556666" for i in range(gpus)]
        self.fields, self.init_error = fields, init_error
        self.throttle_mask = 0x4 | 0x1  # SwPowerCap + GpuIdle

    def nvmlInit(self):
        if self.init_error:
            raise self.NVMLError(self.init_error)

    def nvmlDeviceGetCount(self):
        return self.gpus

    def nvmlDeviceGetHandleByIndex(self, index):
        return f"handle{index}"

    def nvmlDeviceGetName(self, handle):
        return self.names[int(handle.removeprefix("handle"))]

    def nvmlDeviceGetUUID(self, handle):
        return self.uuids[int(handle.removeprefix("handle"))]

    def nvmlDeviceGetTotalEnergyConsumption(self, handle):
        import time

        if self.energy_mw is None:
            raise self.NVMLError("Not Supported")
        return int(1_000_000 + self.energy_mw * (time.monotonic() - self._t0))  # mJ since "driver load"

    def nvmlDeviceGetPowerUsage(self, handle):
        return self.power_mw

    def nvmlDeviceGetFieldValues(self, handle, field_ids):
        ((field_id, _scope),) = field_ids
        return [_FieldValue(0 if self.fields else 3, self.power_mw + (1 if field_id == 186 else 0))]

    def nvmlDeviceGetClockInfo(self, handle, clock):
        return {0: 1695, 1: 1695, 2: 6251}[clock]

    def nvmlDeviceGetTemperature(self, handle, sensor):
        return 61

    def nvmlDeviceGetCurrentClocksThrottleReasons(self, handle):
        return self.throttle_mask


@pytest.fixture
def fake_nvml(monkeypatch):
    # NVML's GPU is the one CUDA's cuda:0 is: the host's CUDA settings must not steer a test.
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    monkeypatch.delenv("CUDA_DEVICE_ORDER", raising=False)
    return FakeNvml
