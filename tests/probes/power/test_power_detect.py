from __future__ import annotations

import pytest

from edgekit.errors import EdgekitError
from edgekit.probes.power import AUTO_ORDER, CHOICES, PowerSampler, Unavailable, detect
from edgekit.probes.power.android import BatterySampler
from edgekit.probes.power.jetson import JetsonSampler
from edgekit.probes.power.nvml import NvmlSampler
from edgekit.probes.power.rapl import RaplSampler
from edgekit.probes.power.rpi import RpiPmicSampler


def no_vcgencmd(argv):
    raise FileNotFoundError(2, "No such file or directory", argv[0])


def test_unknown_name_lists_valid_ones():
    with pytest.raises(EdgekitError) as err:
        detect("intel")
    assert "'intel'" in str(err.value)
    for name in CHOICES:
        assert name in str(err.value)


def test_off_is_unavailable_without_probing():
    u = detect("off")
    assert isinstance(u, Unavailable) and u.probe == "off"


def test_auto_with_nothing_lists_every_reason(tmp_path, fake_nvml):
    u = detect("auto", tmp_path, pynvml=fake_nvml(init_error="Driver Not Loaded"), run_command=no_vcgencmd)
    assert isinstance(u, Unavailable) and u.probe == "auto"
    for name in AUTO_ORDER:
        assert f"{name}: " in u.reason
    assert u.to_json() == {"probe": "auto", "available": False, "reason": u.reason}


def test_auto_prefers_nvml_then_jetson(write_tree, fake_nvml):
    root = write_tree(
        {
            "/sys/bus/i2c/devices/1-0040/name": "ina3221",
            "/sys/bus/i2c/devices/1-0040/hwmon/hwmon1/in1_label": "VDD_IN",
            "/sys/bus/i2c/devices/1-0040/hwmon/hwmon1/in1_input": 5000,
            "/sys/bus/i2c/devices/1-0040/hwmon/hwmon1/curr1_input": 1000,
        }
    )
    assert isinstance(detect("auto", root, pynvml=fake_nvml()), NvmlSampler)
    assert isinstance(detect("auto", root, pynvml=fake_nvml(gpus=0)), JetsonSampler)
    assert isinstance(detect("jetson", root), JetsonSampler)


def test_auto_skips_unreadable_rapl_and_keeps_its_reason(write_tree, fake_nvml, monkeypatch):
    from edgekit.probes.power import rapl

    root = write_tree(
        {
            "/sys/class/powercap/intel-rapl:0/name": "package-0",
            "/sys/class/powercap/intel-rapl:0/energy_uj": 1,
            "/sys/class/powercap/intel-rapl:0/max_energy_range_uj": 1000,
        }
    )
    no_gpu = fake_nvml(gpus=0)
    assert isinstance(detect("auto", root, pynvml=no_gpu, run_command=no_vcgencmd), RaplSampler)

    real = rapl.read_int

    def root_only(path):
        if path.name == "energy_uj":
            raise PermissionError(13, "Permission denied", str(path))
        return real(path)

    monkeypatch.setattr(rapl, "read_int", root_only)
    u = detect("auto", root, pynvml=no_gpu, run_command=no_vcgencmd)
    assert isinstance(u, Unavailable) and "CVE-2020-8694" in u.reason


def test_explicit_choices_on_fake_platforms(write_tree, fake_nvml):
    root = write_tree(
        {
            "/sys/class/power_supply/battery/current_now": 400000,
            "/sys/class/power_supply/battery/voltage_now": 3900000,
        }
    )
    assert isinstance(detect("auto", root, pynvml=fake_nvml(gpus=0), run_command=no_vcgencmd), BatterySampler)
    pmic = "  VDD_CORE_A current(7)=1.0A\n  VDD_CORE_V volt(15)=0.9V\n"
    assert isinstance(detect("rpi", root, run_command=lambda argv: pmic), RpiPmicSampler)
    assert isinstance(detect("odpm", root), Unavailable)


def test_this_host_gives_an_honest_answer():
    found = detect("auto")
    if isinstance(found, PowerSampler):
        found.start()
        trace = found.stop()
        assert trace.probe == found.probe
    else:
        assert found.probe == "auto" and all(f"{n}: " in found.reason for n in AUTO_ORDER)
