from __future__ import annotations

import subprocess

import pytest

from edgekit.probes.power.rpi import RpiPmicSampler, open_rpi, parse_pmic_read_adc, parse_throttled
from edgekit.probes.power.trace import TOTAL_KEY, Unavailable

# `vcgencmd pmic_read_adc` on a Raspberry Pi 5 (right-aligned names, as printed).
PMIC = """\
   3V7_WL_SW_A current(0)=0.00390372A
     3V3_SYS_A current(1)=0.05172120A
     1V8_SYS_A current(2)=0.17471350A
    DDR_VDD2_A current(3)=0.02049600A
    DDR_VDDQ_A current(4)=0.00000000A
     1V1_SYS_A current(5)=0.18251040A
     0V8_SWT_A current(6)=0.30304800A
      VDD_CORE_A current(7)=0.74000000A
     3V3_DAC_A current(17)=0.00000000A
     3V3_ADC_A current(18)=0.00024420A
     0V8_AON_A current(16)=0.00402892A
        HDMI_A current(22)=0.01953000A
   3V7_WL_SW_V volt(8)=3.70019000V
     3V3_SYS_V volt(9)=3.31062400V
     1V8_SYS_V volt(10)=1.80219800V
    DDR_VDD2_V volt(11)=1.11160000V
    DDR_VDDQ_V volt(12)=0.60561600V
     1V1_SYS_V volt(13)=1.10548000V
     0V8_SWT_V volt(14)=0.80586000V
      VDD_CORE_V volt(15)=0.88000000V
     3V3_DAC_V volt(20)=3.30695000V
     3V3_ADC_V volt(21)=3.30878200V
     0V8_AON_V volt(19)=0.79975800V
        HDMI_V volt(23)=5.10600000V
       EXT5V_V volt(24)=5.12596000V
        BATT_V volt(25)=0.00000000V
"""


def test_parse_pmic_read_adc():
    r = parse_pmic_read_adc(PMIC)
    assert len(r.amps) == 12 and len(r.volts) == 14
    assert r.voltage_only == ["BATT", "EXT5V"]
    rails = r.rails_mw()
    assert "EXT5V" not in rails and "BATT" not in rails
    assert rails["VDD_CORE"] == pytest.approx(0.88 * 0.74 * 1000)
    assert sum(rails.values()) == pytest.approx(sum(r.volts[k] * r.amps[k] for k in r.amps) * 1000)


def test_sampler_with_an_injected_runner_and_the_5v_note():
    calls = []

    def runner(argv):
        calls.append(tuple(argv))
        return PMIC

    s = open_rpi(interval_s=0.01, run=runner)
    assert isinstance(s, RpiPmicSampler)
    assert calls == [("vcgencmd", "pmic_read_adc")]
    assert s.interval_s == 0.1  # clamped: one process per reading
    rails = s.read().rails_mw
    assert rails[TOTAL_KEY] == pytest.approx(sum(v for k, v in rails.items() if k != TOTAL_KEY))
    notes = " ".join(s.notes())
    assert "5 V loads" in notes and "not covered" in notes and "interval raised" in notes


def test_pmic_read_adc_failing_is_unavailable():
    def pi4(argv):
        raise subprocess.CalledProcessError(255, argv, output="", stderr='error=1 error_msg="Command not registered"')

    u = open_rpi(run=pi4)
    assert isinstance(u, Unavailable) and "Raspberry Pi 5 only" in u.reason
    assert isinstance(open_rpi(run=lambda argv: "nothing useful\n"), Unavailable)


def test_throttled_bits():
    assert parse_throttled("throttled=0x0\n") == {"raw": "0x0", "now": [], "since_boot": []}
    t = parse_throttled("throttled=0x50005\n")
    assert t["now"] == ["under-voltage detected", "currently throttled"]
    assert t["since_boot"] == ["under-voltage has occurred", "throttling has occurred"]
    assert parse_throttled("throttled=0xe000e")["now"] == [
        "arm frequency capped",
        "currently throttled",
        "soft temperature limit active",
    ]
    with pytest.raises(ValueError):
        parse_throttled("error")
