"""A power probe's readings are a variant's energy only where the probe reads the device the
decode ran on: NVML (one NVIDIA GPU's board) watching a CPU decode gives the trace and the reason,
never an energy figure or an energy ratio (seen on an H100 host: the board's idle 70 W divided by
CPU decodes). A stand-in pynvml (``tests/probes/conftest.py``) drives the real NVML sampler."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pytest

from edgekit.probes.power.nvml import open_nvml
from edgekit.profile import ProfileConfig, profile_bundle
from edgekit.profile.table import summary_rows
from edgekit.runtimes import open_runtime
from edgekit.runtimes.base import RuntimeProxy
from tests.probes.conftest import FakeNvml

CPU_REASON = (
    "nvml reads one NVIDIA GPU's board power, but this decode ran on CPUExecutionProvider: the GPU's draw is "
    "not its energy; use --power rapl for a decode on the x86 CPU, or run the decode on the GPU (--runtime trt)"
)


class ReportsCuda(RuntimeProxy):
    """The ORT runtime, reporting the device a CUDA session would (this host has no GPU)."""

    reported = "CUDAExecutionProvider"

    @property
    def device(self) -> str:
        return self.reported


class ReportsSecondGpu(ReportsCuda):
    reported = "CUDAExecutionProvider:1"  # a target file's provider options chose device_id 1


def _profile(bundle, kit, power: str, *, cuda: bool | type = False) -> dict[str, Any]:
    proxy = cuda if isinstance(cuda, type) else ReportsCuda
    with pytest.MonkeyPatch.context() as mp:
        # Two alike boards, nothing hidden: the sampler reads cuda:0's (NVML GPU 0).
        nvml = lambda choice, root: open_nvml(pynvml=FakeNvml(gpus=2), env={})  # noqa: E731
        mp.setattr("edgekit.profile.measure.detect", nvml)
        if cuda:
            mp.setattr("edgekit.profile.measure.open_runtime", lambda *a, **k: proxy(open_runtime(*a, **k)))
        return profile_bundle(bundle, ProfileConfig(measure=kit.FAST, power=power, idle_seconds=0.05))


@pytest.fixture(scope="module")
def nvml_on_cpu(tiny, kit) -> Mapping[str, dict[str, Any]]:
    return {power: _profile(tiny["masked8"], kit, power) for power in ("nvml", "auto")}


@pytest.mark.parametrize("power", ["nvml", "auto"])
def test_nvml_watching_a_cpu_decode_gives_the_trace_and_the_reason_not_an_energy(nvml_on_cpu, power):
    doc = nvml_on_cpu[power]
    assert doc["power"]["available"] is True and doc["power"]["probe"] == "nvml"
    picked = " (--power auto picked nvml, the first probe this host has)" if power == "auto" else ""
    assert [v["id"] for v in doc["variants"]] == ["ort fp32", "ort int8"]
    for v in doc["variants"]:
        assert v["device"] == "CPUExecutionProvider"
        assert v["energy"] == {"available": False, "probe": "nvml", "reason": CPU_REASON + picked}
        # The readings are real and kept: the GPU board's 150 W, sampled across the decodes.
        trace = v["power_trace"]
        assert trace["probe"] == "nvml" and len(trace["samples"]) >= 2
        assert trace["samples"][0]["rails_mw"] == {"gpu0": 150_001}
    (r,) = doc["ratios"]
    assert r["name"] == "int8/fp32 (ort)" and r["energy_per_decode"] is None
    assert r["median_latency"] is not None  # the rest of the ratio stands


def test_the_tables_say_why_there_is_no_energy(nvml_on_cpu):
    tables = summary_rows(nvml_on_cpu["nvml"])
    rows = {row[0]: row[1:] for row in tables["variants"]["rows"]}
    assert rows["mJ / decode"] == rows["mJ / decode > idle"] == ["unavailable", "unavailable"]
    assert f"ort fp32: energy unavailable: {CPU_REASON}" in tables["power"]
    assert f"ort int8: energy unavailable: {CPU_REASON}" in tables["power"]


def test_nvml_watching_a_cuda_decode_gives_its_energy(tiny, kit):
    # The same probe and stand-in board, the decode reported on CUDA: now the draw is the decode's.
    doc = _profile(tiny["masked"], kit, "nvml", cuda=True)
    (v,) = doc["variants"]
    e = v["energy"]
    assert v["device"] == "CUDAExecutionProvider"
    assert e["available"] is True and e["probe"] == "nvml"
    # The stand-in's energy counter advances at 200 W: mJ = 200_000 mW x window s / decodes, in
    # whole mJ steps (the counter is read as an integer; a busy host skews the reads' timestamps).
    window_s = v["power_trace"]["duration_s"]
    assert e["gross_mj"] == pytest.approx(200_000 * window_s / e["n_decodes"], rel=0.2)


def test_nvml_reading_one_gpu_gives_no_energy_to_a_decode_on_another(tiny, kit):
    doc = _profile(tiny["masked"], kit, "nvml", cuda=ReportsSecondGpu)
    (v,) = doc["variants"]
    assert v["device"] == "CUDAExecutionProvider:1"
    assert v["energy"]["available"] is False and "gross_mj" not in v["energy"]
    assert v["energy"]["reason"].startswith(
        "nvml reads the board of cuda:0, but this decode ran on CUDAExecutionProvider:1 (cuda:1)"
    )
    assert v["power_trace"]["samples"][0]["rails_mw"] == {"gpu0": 150_001}  # the readings stay, real
