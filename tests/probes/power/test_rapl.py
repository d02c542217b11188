from __future__ import annotations

import pytest

from edgekit.probes.power import rapl
from edgekit.probes.power.rapl import RaplSampler, discover_rapl, open_rapl, rapl_delta_uj
from edgekit.probes.power.trace import TOTAL_KEY, Unavailable

PC = "/sys/class/powercap"
# A client Intel laptop: package with core/uncore/dram subzones, and a psys zone.
LAPTOP = {
    f"{PC}/intel-rapl/enabled": 1,  # the control type directory itself is not a zone
    f"{PC}/intel-rapl:0/name": "package-0",
    f"{PC}/intel-rapl:0/energy_uj": 900,
    f"{PC}/intel-rapl:0/max_energy_range_uj": 1000,
    f"{PC}/intel-rapl:0:0/name": "core",
    f"{PC}/intel-rapl:0:0/energy_uj": 10,
    f"{PC}/intel-rapl:0:0/max_energy_range_uj": 262143328850,
    f"{PC}/intel-rapl:0:1/name": "uncore",
    f"{PC}/intel-rapl:0:1/energy_uj": 20,
    f"{PC}/intel-rapl:0:1/max_energy_range_uj": 262143328850,
    f"{PC}/intel-rapl:0:2/name": "dram",
    f"{PC}/intel-rapl:0:2/energy_uj": 30,
    f"{PC}/intel-rapl:0:2/max_energy_range_uj": 262143328850,
    f"{PC}/intel-rapl:1/name": "psys",
    f"{PC}/intel-rapl:1/energy_uj": 40,
    f"{PC}/intel-rapl:1/max_energy_range_uj": 262143328850,
    f"{PC}/intel-rapl-mmio:0/name": "package-0",  # MMIO duplicate of the package: not read
    f"{PC}/intel-rapl-mmio:0/energy_uj": 5,
    f"{PC}/intel-rapl-mmio:0/max_energy_range_uj": 262143328850,
}


def test_delta_with_and_without_wraparound():
    assert rapl_delta_uj(100, 400, 1000) == 300
    assert rapl_delta_uj(900, 100, 1000) == 200  # 100 to the wrap, then 100 more
    assert rapl_delta_uj(262143328000, 500, 262143328850) == 850 + 500


def test_zones_named_from_their_name_files(write_tree):
    zones = discover_rapl(write_tree(LAPTOP))
    assert [z.name for z in zones] == ["package-0", "psys", "package-0/core", "package-0/uncore", "package-0/dram"]
    s = open_rapl(write_tree(LAPTOP))
    assert isinstance(s, RaplSampler)
    assert s.parts == ["package-0", "package-0/dram"]  # core/uncore inside the package, psys overlaps
    assert s.total_source == "sum of RAPL zones package-0 + package-0/dram"
    assert any("psys" in n for n in s.notes())


def test_sampler_counters_unwrap(write_tree):
    root = write_tree(LAPTOP)
    s = open_rapl(root)
    energy = root / "sys/class/powercap/intel-rapl:0/energy_uj"
    dram = root / "sys/class/powercap/intel-rapl:0:2/energy_uj"
    assert s.read().counters_mj["package-0"] == 0.0
    energy.write_text("100\n")  # wrapped: +200 µJ
    dram.write_text("1030\n")  # +1000 µJ
    c = s.read().counters_mj
    assert c["package-0"] == pytest.approx(0.2) and c["package-0/dram"] == pytest.approx(1.0)
    energy.write_text("400\n")  # +300 µJ
    c = s.read().counters_mj
    assert c["package-0"] == pytest.approx(0.5)
    assert c[TOTAL_KEY] == pytest.approx(0.5 + 1.0)


def test_permission_error_becomes_a_clear_unavailable(write_tree, monkeypatch):
    root = write_tree(LAPTOP)
    real = rapl.read_int

    def guarded(path):
        if str(path).endswith("energy_uj"):
            raise PermissionError(13, "Permission denied", str(path))
        return real(path)

    monkeypatch.setattr(rapl, "read_int", guarded)
    u = open_rapl(root)
    assert isinstance(u, Unavailable) and u.probe == "rapl"
    assert "root only since Linux 5.10" in u.reason and "CVE-2020-8694" in u.reason
    assert "udev rule" in u.reason and "chmod a+r" in u.reason


def test_no_powercap(tmp_path):
    u = open_rapl(tmp_path)
    assert isinstance(u, Unavailable) and "intel-rapl" in u.reason
