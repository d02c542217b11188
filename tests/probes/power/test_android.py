from __future__ import annotations

import pytest

from edgekit.probes.power.android import (
    BatterySampler,
    OdpmSampler,
    open_android,
    open_odpm,
    parse_battery,
    parse_odpm,
)
from edgekit.probes.power.trace import TOTAL_KEY, Unavailable


@pytest.mark.parametrize("current", ["-1234567", "1234567"])  # vendors disagree on the sign
def test_battery_microamps_by_abi_sign_from_status(current):
    r = parse_battery(current, "3850000", "Discharging")
    assert r.current_unit == "uA" and r.current_ma == pytest.approx(1234.567)
    assert r.voltage_mv == pytest.approx(3850.0)
    assert r.power_mw == pytest.approx(1234.567 * 3.85)


def test_battery_small_values_are_milliamps():
    r = parse_battery("850", "3850000", "Discharging")
    assert r.current_unit == "mA" and r.current_ma == 850.0
    assert r.power_mw == pytest.approx(850 * 3.85)
    assert parse_battery("9999", "3850000").current_unit == "mA"
    assert parse_battery("10000", "3850000").current_unit == "uA"


def test_battery_charging_is_negative_discharge_power():
    r = parse_battery("1500000", "4200000", "Charging\n")
    assert r.charging and r.power_mw == pytest.approx(-6300.0)


def test_battery_sampler_notes_charging(write_tree):
    root = write_tree(
        {
            "/sys/class/power_supply/battery/current_now": -500000,
            "/sys/class/power_supply/battery/voltage_now": 4000000,
            "/sys/class/power_supply/battery/status": "Charging",
        }
    )
    s = open_android(root)
    assert isinstance(s, BatterySampler) and s.total_rail == "battery"
    assert s.read().rails_mw == {"battery": pytest.approx(-2000.0)}
    assert any("charging" in n for n in s.notes())


def test_not_android(tmp_path):
    assert isinstance(open_android(tmp_path), Unavailable)


# A Pixel 6 energy_value file (iio:device0, the main PMIC).
ODPM_MAIN = """t=473848
CH0(T=473848)[S10M_VDD_TPU], 3161249
CH1(T=473848)[VSYS_PWR_MODEM], 48480309
CH2(T=473848)[VSYS_PWR_RFFE], 9594441
CH3(T=473848)[S2M_VDD_CPUCL2], 28071784
CH4(T=473848)[S3M_VDD_CPUCL1], 17477251
CH5(T=473848)[S4M_VDD_CPUCL0], 113209776
CH6(T=473848)[S5M_VDD_INT], 88619194
CH7(T=473848)[S1M_VDD_MIF], 56783067
"""
ODPM_SUB = """t=473850
CH0(T=473850)[VSYS_PWR_DISPLAY], 100000000
CH1(T=473850)[L2S_VDD_AOC_RET], 1000
"""


def test_parse_odpm():
    t_ms, channels = parse_odpm(ODPM_MAIN)
    assert t_ms == 473848 and len(channels) == 8
    assert (channels[0].index, channels[0].rail, channels[0].t_ms) == (0, "S10M_VDD_TPU", 473848)
    assert channels[0].energy_mj == pytest.approx(3161.249)  # µW·s = µJ
    assert parse_odpm("garbage\n") == (None, [])


def test_odpm_sampler_sums_both_pmics_as_counters(write_tree):
    root = write_tree(
        {
            "/sys/bus/iio/devices/iio:device0/energy_value": ODPM_MAIN,
            "/sys/bus/iio/devices/iio:device1/energy_value": ODPM_SUB,
            "/sys/bus/iio/devices/iio:device2/name": "not odpm",
        }
    )
    s = open_odpm(root)
    assert isinstance(s, OdpmSampler) and s.power_from_counters
    c = s.read().counters_mj
    assert c["VSYS_PWR_DISPLAY"] == pytest.approx(100_000.0)
    assert c[TOTAL_KEY] == pytest.approx(sum(ch.energy_mj for ch in parse_odpm(ODPM_MAIN)[1]) + 100_001.0)
    assert any("not the whole-device draw" in n for n in s.notes())


def test_no_odpm(tmp_path):
    u = open_odpm(tmp_path)
    assert isinstance(u, Unavailable) and "energy_value" in u.reason
