from __future__ import annotations

import sys
import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from edgekit.probes.power.tegrastats import NOT_RAILS, TegrastatsSampler, parse_tegrastats_line
from edgekit.probes.power.trace import TOTAL_KEY

# Verbatim from shared/reference/probes.md (the "..." prefixes are in the reference too).
AGX_XAVIER_JP4 = "... GPU 1155/1155 CPU 385/385 SOC 2502/2502 CV 0/0 VDDRQ 192/192 SYS5V 2692/2692"
NANO_JP4 = "... thermal@23C POM_5V_IN 933/933 POM_5V_GPU 0/0 POM_5V_CPU 84/105"
AGX_ORIN_JP5 = (
    "... VDD_GPU_SOC 2390mW/2390mW VDD_CPU_CV 796mW/796mW VIN_SYS_5V0 3522mW/3522mW NC 0mW/0mW "
    "VDDQ_VDD2_1V8AO 301mW/301mW NC 0mW/0mW"
)
ORIN_NX_JP6 = (
    "11-15-2024 08:38:09 RAM 6185/7620MB (lfb 8x2MB) SWAP 851/3810MB (cached 1MB) "
    "CPU [15%@729,11%@729,14%@729,13%@729,11%@729,8%@729] EMC_FREQ 43%@2133 GR3D_FREQ 63%@[621] "
    "NVDEC off NVJPG off NVJPG1 off VIC off OFA off APE 200 cpu@53.968C soc2@52.437C soc0@50.75C "
    "gpu@53.343C tj@53.968C soc1@51.656C VDD_IN 12479mW/12479mW VDD_CPU_GPU_CV 4667mW/4667mW VDD_SOC 2817mW/2817mW"
)
# A full Nano line (JetPack 4.6), whose memory fields are bare numbers like the rails.
NANO_JP4_FULL = (
    "RAM 2448/3956MB (lfb 1x2MB) SWAP 0/1978MB (cached 0MB) IRAM 0/252kB(lfb 252kB) "
    "CPU [2%@102,1%@102,0%@102,0%@102] EMC_FREQ 0%@1600 GR3D_FREQ 0%@76 APE 25 PLL@24C CPU@26.5C "
    "PMIC@100C GPU@24C AO@31C thermal@25.5C POM_5V_IN 1209/1209 POM_5V_GPU 0/0 POM_5V_CPU 124/124"
)


@pytest.mark.parametrize(
    "line, expected",
    [
        (AGX_XAVIER_JP4, {"GPU": 1155, "CPU": 385, "SOC": 2502, "CV": 0, "VDDRQ": 192, "SYS5V": 2692}),
        (NANO_JP4, {"POM_5V_IN": 933, "POM_5V_GPU": 0, "POM_5V_CPU": 84}),
        (AGX_ORIN_JP5, {"VDD_GPU_SOC": 2390, "VDD_CPU_CV": 796, "VIN_SYS_5V0": 3522, "VDDQ_VDD2_1V8AO": 301}),
        (ORIN_NX_JP6, {"VDD_IN": 12479, "VDD_CPU_GPU_CV": 4667, "VDD_SOC": 2817}),
        (NANO_JP4_FULL, {"POM_5V_IN": 1209, "POM_5V_GPU": 0, "POM_5V_CPU": 124}),
    ],
)
def test_reference_lines(line, expected):
    assert parse_tegrastats_line(line) == expected


def test_more_than_two_values_per_rail_takes_the_current_one():
    line = "11-15-2024 08:38:09 RAM 6185/7620MB VDD_IN 12479mW/12100mW/13002mW VDD_SOC 2817mW/2817mW/2900mW"
    assert parse_tegrastats_line(line) == {"VDD_IN": 12479, "VDD_SOC": 2817}
    assert parse_tegrastats_line("POM_5V_IN 933/900/1000") == {"POM_5V_IN": 933}


def test_memory_and_frequency_fields_are_not_rails():
    assert parse_tegrastats_line("RAM 6185/7620MB (lfb 8x2MB) SWAP 851/3810MB (cached 1MB) EMC_FREQ 43%@2133") == {}
    assert parse_tegrastats_line("RAM 100/200 SWAP 0/0") == {}  # even without their units
    assert parse_tegrastats_line("") == {}


RAIL_NAME = st.from_regex(r"[A-Z][A-Z0-9_]{1,14}", fullmatch=True).filter(lambda n: n not in NOT_RAILS)
NOISE = st.sampled_from(
    [
        "RAM 6185/7620MB (lfb 8x2MB)",
        "SWAP 851/3810MB (cached 1MB)",
        "IRAM 0/252kB(lfb 252kB)",
        "EMC_FREQ 43%@2133",
        "GR3D_FREQ 63%@[621]",
        "CPU [15%@729,11%@729]",
        "APE 200",
        "cpu@53.968C",
        "NVDEC off",
        "thermal@23C",
    ]
)


@settings(max_examples=150, deadline=None)
@given(
    rails=st.dictionaries(RAIL_NAME, st.integers(0, 99_999), min_size=1, max_size=8),
    mw=st.booleans(),
    extra=st.integers(1, 3),
    noise=st.lists(NOISE, max_size=5),
    stamp=st.booleans(),
)
def test_parser_recovers_generated_rails_among_noise(rails, mw, extra, noise, stamp):
    unit = "mW" if mw else ""
    fields = [f"{n} {v}{unit}" + f"/{v + 1}{unit}" * extra for n, v in rails.items()]
    line = ("11-15-2024 08:38:09 " if stamp else "") + " ".join(noise + fields)
    assert parse_tegrastats_line(line) == {n: float(v) for n, v in rails.items()}


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=200))
def test_parser_never_raises_on_arbitrary_text(text):
    assert isinstance(parse_tegrastats_line(text), dict)


def _script(lines: list[str], then_sleep: float = 30.0, exit_code: int = 0) -> list[str]:
    code = (
        "import sys, time\n"
        f"for line in {lines!r}:\n"
        "    print(line, flush=True)\n"
        "    time.sleep(0.02)\n"
        f"time.sleep({then_sleep})\n"
        f"sys.exit({exit_code})\n"
    )
    return [sys.executable, "-c", code]


def wait_for(condition, timeout_s=10.0):
    deadline = time.monotonic() + timeout_s
    while not condition() and time.monotonic() < deadline:
        time.sleep(0.01)


def test_sampler_reads_a_tegrastats_process_and_terminates_it():
    s = TegrastatsSampler(interval_s=0.02, command=_script([ORIN_NX_JP6] * 5))
    s.start()
    wait_for(lambda: s.sample_count >= 5)
    began = time.monotonic()
    t = s.stop()
    assert time.monotonic() - began < 2.5  # the process was terminated, not waited for
    assert len(t.samples) == 5 and t.errors == ()
    assert t.total_rail == "VDD_IN" and "board input rail VDD_IN" in t.total_source
    assert t.rail_average_mw()["VDD_IN"] == pytest.approx(12479.0)
    assert all(t.start_ns <= x.t_ns <= t.stop_ns for x in t.samples)


def test_sampler_sums_rails_without_an_input_rail():
    s = TegrastatsSampler(command=_script([AGX_ORIN_JP5] * 3, then_sleep=0))
    s.start()
    wait_for(lambda: s.sample_count >= 3)
    t = s.stop()
    assert t.total_rail == TOTAL_KEY
    assert t.samples[0].rails_mw[TOTAL_KEY] == pytest.approx(2390 + 796 + 3522 + 301)


def test_sampler_records_a_failing_or_missing_command():
    s = TegrastatsSampler(command=_script(["tegrastats: permission denied"], then_sleep=0, exit_code=1))
    s.start()
    wait_for(lambda: s._proc.poll() is not None)  # let it fail on its own before stop()
    t = s.stop()
    assert t.samples == () and "exited with 1" in t.errors[0] and "permission denied" in t.errors[0]
    assert "no power rails in tegrastats output" in t.errors[1]
    assert t.energy_mj is None

    missing = TegrastatsSampler(command=["/nonexistent/tegrastats"])
    missing.start()
    t = missing.stop()
    assert t.samples == () and "FileNotFoundError" in t.errors[0]
