from __future__ import annotations

import time

import pytest

from edgekit.probes.power import jetson
from edgekit.probes.power.jetson import JetsonSampler, discover_ina3221, gpu_load, open_jetson, parse_nvpmodel
from edgekit.probes.power.trace import TOTAL_KEY, Unavailable

# Orin NX / Orin Nano on JetPack 5+: mainline hwmon driver. in4..in6 are shunt voltages (µV) and
# in7 their sum: they carry numbers (and here even labels) that must not become rails.
ORIN_NX_JP5 = {
    "/sys/bus/i2c/devices/1-0040/name": "ina3221",
    "/sys/bus/i2c/devices/1-0040/hwmon/hwmon3/name": "ina3221",
    "/sys/bus/i2c/devices/1-0040/hwmon/hwmon3/in1_label": "VDD_IN",
    "/sys/bus/i2c/devices/1-0040/hwmon/hwmon3/in1_input": 5048,
    "/sys/bus/i2c/devices/1-0040/hwmon/hwmon3/curr1_input": 1200,
    "/sys/bus/i2c/devices/1-0040/hwmon/hwmon3/curr1_max": 5000,
    "/sys/bus/i2c/devices/1-0040/hwmon/hwmon3/curr1_crit": 6000,
    "/sys/bus/i2c/devices/1-0040/hwmon/hwmon3/in2_label": "VDD_CPU_GPU_CV",
    "/sys/bus/i2c/devices/1-0040/hwmon/hwmon3/in2_input": 5040,
    "/sys/bus/i2c/devices/1-0040/hwmon/hwmon3/curr2_input": 400,
    "/sys/bus/i2c/devices/1-0040/hwmon/hwmon3/in3_label": "VDD_SOC",
    "/sys/bus/i2c/devices/1-0040/hwmon/hwmon3/in3_input": 5032,
    "/sys/bus/i2c/devices/1-0040/hwmon/hwmon3/curr3_input": 500,
    "/sys/bus/i2c/devices/1-0040/hwmon/hwmon3/in4_label": "VDD_IN",
    "/sys/bus/i2c/devices/1-0040/hwmon/hwmon3/in4_input": 6080,
    "/sys/bus/i2c/devices/1-0040/hwmon/hwmon3/in5_input": 2040,
    "/sys/bus/i2c/devices/1-0040/hwmon/hwmon3/in6_input": 2520,
    "/sys/bus/i2c/devices/1-0040/hwmon/hwmon3/in7_label": "sum of shunt voltages",
    "/sys/bus/i2c/devices/1-0040/hwmon/hwmon3/in7_input": 10640,
    # another i2c device on the bus that is not a power monitor
    "/sys/bus/i2c/devices/1-0050/name": "24c02",
}


def _agx_device(addr: str, channels: list[tuple[str, int, int]]) -> dict[str, str | int]:
    base = f"/sys/bus/i2c/devices/{addr}"
    files: dict[str, str | int] = {f"{base}/name": "ina3221"}
    hw = f"{base}/hwmon/hwmon{5 if addr.endswith('41') else 4}"  # the number differs per boot
    for n, (label, mv, ma) in enumerate(channels, start=1):
        files[f"{hw}/in{n}_label"] = label
        files[f"{hw}/in{n}_input"] = mv
        files[f"{hw}/curr{n}_input"] = ma
    return files


# AGX Orin: two devices, no input rail, NC channels on the second.
AGX_ORIN_JP5 = {
    **_agx_device("1-0040", [("VDD_GPU_SOC", 5000, 478), ("VDD_CPU_CV", 5000, 159), ("VIN_SYS_5V0", 5000, 704)]),
    **_agx_device("1-0041", [("NC", 0, 0), ("VDDQ_VDD2_1V8AO", 5000, 60), ("NC", 0, 0)]),
}

# Jetson Nano on JetPack 4: L4T iio driver, 0-based channels, power provided in mW.
NANO_JP4 = {
    "/sys/bus/i2c/devices/6-0040/name": "ina3221x",
    "/sys/bus/i2c/devices/6-0040/iio:device0/name": "ina3221x",
    "/sys/bus/i2c/devices/6-0040/iio:device0/rail_name_0": "POM_5V_IN",
    "/sys/bus/i2c/devices/6-0040/iio:device0/in_voltage0_input": 5024,
    "/sys/bus/i2c/devices/6-0040/iio:device0/in_current0_input": 600,
    "/sys/bus/i2c/devices/6-0040/iio:device0/in_power0_input": 3000,
    "/sys/bus/i2c/devices/6-0040/iio:device0/rail_name_1": "POM_5V_GPU",
    "/sys/bus/i2c/devices/6-0040/iio:device0/in_voltage1_input": 5016,
    "/sys/bus/i2c/devices/6-0040/iio:device0/in_current1_input": 40,
    "/sys/bus/i2c/devices/6-0040/iio:device0/in_power1_input": 200,
    "/sys/bus/i2c/devices/6-0040/iio:device0/rail_name_2": "POM_5V_CPU",
    "/sys/bus/i2c/devices/6-0040/iio:device0/in_voltage2_input": 5008,
    "/sys/bus/i2c/devices/6-0040/iio:device0/in_current2_input": 120,
    "/sys/bus/i2c/devices/6-0040/iio:device0/in_power2_input": 601,
}


def test_jp5_hwmon_channels_1_to_3_only(write_tree):
    root = write_tree(ORIN_NX_JP5)
    channels = discover_ina3221(root)
    assert [c.rail for c in channels] == ["VDD_IN", "VDD_CPU_GPU_CV", "VDD_SOC"]
    s = open_jetson(root)
    assert isinstance(s, JetsonSampler)
    assert s.total_rail == "VDD_IN" and "board input rail VDD_IN" in s.total_source
    rails = s.read().rails_mw
    assert rails == {
        "VDD_IN": pytest.approx(5048 * 1200 / 1000),
        "VDD_CPU_GPU_CV": pytest.approx(5040 * 400 / 1000),
        "VDD_SOC": pytest.approx(5032 * 500 / 1000),
    }


def test_jp4_iio_channels_use_the_power_file(write_tree):
    s = open_jetson(write_tree(NANO_JP4))
    assert isinstance(s, JetsonSampler)
    assert s.total_rail == "POM_5V_IN"
    assert s.read().rails_mw == {"POM_5V_IN": 3000.0, "POM_5V_GPU": 200.0, "POM_5V_CPU": 601.0}


def test_agx_orin_two_devices_summed_and_nc_skipped(write_tree):
    s = open_jetson(write_tree(AGX_ORIN_JP5))
    assert isinstance(s, JetsonSampler)
    assert {c.device for c in s.channels} == {"1-0040", "1-0041"}
    assert "NC" not in {c.rail for c in s.channels}
    rails = s.read().rails_mw
    assert s.total_rail == TOTAL_KEY and "sum of INA3221 rails" in s.total_source
    assert rails[TOTAL_KEY] == pytest.approx(5 * (478 + 159 + 704 + 60))
    assert set(rails) == {"VDD_GPU_SOC", "VDD_CPU_CV", "VIN_SYS_5V0", "VDDQ_VDD2_1V8AO", TOTAL_KEY}
    assert any("sum of the INA3221 rails" in n for n in s.notes())


def test_rails_that_disappear_and_appear_between_samples(write_tree, monkeypatch):
    root = write_tree(AGX_ORIN_JP5)
    s = JetsonSampler(root)
    assert len(s.read().rails_mw) == 5
    vddq = root / "sys/bus/i2c/devices/1-0041/hwmon/hwmon5/in2_input"
    vddq.unlink()
    rails = s.read().rails_mw  # no exception: the rail is simply absent from this sample
    assert "VDDQ_VDD2_1V8AO" not in rails and rails[TOTAL_KEY] == pytest.approx(5 * (478 + 159 + 704))
    vddq.write_text("5000\n")
    assert "VDDQ_VDD2_1V8AO" in s.read().rails_mw
    # A rail that appears later is found by the periodic rediscovery.
    monkeypatch.setattr(jetson, "REDISCOVER_S", 0.0)
    write_tree(
        {
            "/sys/bus/i2c/devices/1-0041/hwmon/hwmon5/in3_label": "VDD_NEW",
            "/sys/bus/i2c/devices/1-0041/hwmon/hwmon5/in3_input": 1000,
            "/sys/bus/i2c/devices/1-0041/hwmon/hwmon5/curr3_input": 10,
        }
    )
    time.sleep(0.001)
    assert s.read().rails_mw["VDD_NEW"] == pytest.approx(10.0)


def test_sampler_thread_over_a_fake_tree(write_tree):
    s = JetsonSampler(write_tree(ORIN_NX_JP5), interval_s=0.01)
    s.start()
    time.sleep(0.05)
    t = s.stop()
    assert t.errors == () and len(t.samples) >= 3
    assert t.total_average_mw == pytest.approx(5048 * 1.2)


def test_not_a_jetson(tmp_path, write_tree):
    assert isinstance(open_jetson(tmp_path), Unavailable)
    only_eeprom = write_tree({"/sys/bus/i2c/devices/1-0050/name": "24c02"})
    u = open_jetson(only_eeprom)
    assert isinstance(u, Unavailable) and "no INA3221 rails" in u.reason


NVPMODEL_Q = """NVPM WARN: fan mode is not set!
NV Power Mode: MAXN
0
"""


def test_parse_nvpmodel_output_with_warning_line():
    assert parse_nvpmodel(NVPMODEL_Q) == {"mode": "MAXN", "id": 0}
    assert parse_nvpmodel("NV Power Mode: 15W\n2\n") == {"mode": "15W", "id": 2}
    assert parse_nvpmodel("garbage") == {"mode": None, "id": None}


def test_gpu_load_from_devfreq(write_tree):
    root = write_tree(
        {
            "/sys/class/devfreq/17000000.ga10b/device/load": 634,
            "/sys/class/devfreq/ff000000.emc/device/load": 999,  # not the GPU
        }
    )
    assert gpu_load(root) == pytest.approx(63.4)
    assert gpu_load(root / "nothing") is None
