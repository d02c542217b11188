"""x86 RAPL energy counters through powercap (Intel, and AMD Zen under the same names).

``/sys/class/powercap/intel-rapl:N`` is a ``package-N`` zone; ``intel-rapl:N:M`` its subzones
(``core``, ``uncore``, ``dram``) and, on client chips, a top-level ``psys`` zone. ``energy_uj``
is cumulative and wraps at ``max_energy_range_uj``; sampling every 50 ms sees every wrap.
Since Linux 5.10 (CVE-2020-8694, the PLATYPUS side channel) ``energy_uj`` is readable by root only.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from edgekit.probes._sysfs import read_int, read_text, under
from edgekit.probes.power.sampler import PowerSampler, Reading
from edgekit.probes.power.trace import TOTAL_KEY, Unavailable

POWERCAP = "/sys/class/powercap"
PERMISSION_REASON = (
    "energy_uj is readable by root only since Linux 5.10 (CVE-2020-8694): run as root or add a udev rule "
    '(ACTION=="add", SUBSYSTEM=="powercap", RUN+="/bin/chmod a+r /sys%p/energy_uj"); for this boot only: '
    "sudo chmod a+r /sys/class/powercap/intel-rapl:*/energy_uj /sys/class/powercap/intel-rapl:*:*/energy_uj"
)


def rapl_delta_uj(previous: int, current: int, max_energy_range_uj: int) -> int:
    """Energy between two readings of a counter that wraps to 0 after ``max_energy_range_uj``."""
    if current >= previous:
        return current - previous
    return current + max_energy_range_uj - previous


@dataclass(frozen=True)
class RaplZone:
    name: str  # "package-0", "package-0/core", "package-0/dram", "psys"
    path: Path
    max_energy_range_uj: int

    @property
    def top_level(self) -> bool:
        return "/" not in self.name


def discover_rapl(root: str | Path = "/") -> list[RaplZone]:
    base = under(root, POWERCAP)
    zones: list[RaplZone] = []
    parents: dict[str, str] = {}
    # intel-rapl:N before intel-rapl:N:M so a subzone can name its package.
    for zone in sorted(base.glob("intel-rapl:*"), key=lambda p: (p.name.count(":"), p.name)):
        try:
            name = read_text(zone / "name")
            max_range = read_int(zone / "max_energy_range_uj")
        except (OSError, ValueError):
            continue
        if not (zone / "energy_uj").exists():
            continue
        parent_id = zone.name.rsplit(":", 1)[0]
        if zone.name.count(":") >= 2 and parent_id in parents:
            name = f"{parents[parent_id]}/{name}"
        else:
            parents[zone.name] = name
        zones.append(RaplZone(name, zone, max_range))
    return zones


def total_parts(zones: list[RaplZone]) -> list[str]:
    """Zones whose sum is the total: packages plus DRAM (DRAM is outside the package domain).
    Core/uncore are inside their package; psys overlaps the packages, so it is kept as a rail only."""
    parts = [z.name for z in zones if z.top_level and z.name.startswith("package")]
    parts += [z.name for z in zones if z.name.endswith("dram")]
    return parts


class RaplSampler(PowerSampler):
    probe = "rapl"
    default_interval_s = 0.05
    power_from_counters = True

    def __init__(self, zones: list[RaplZone], interval_s: float | None = None):
        super().__init__(interval_s)
        self.zones = zones
        self.parts = total_parts(zones) or [z.name for z in zones if z.top_level]
        self.total_rail = TOTAL_KEY
        self.total_source = f"sum of RAPL zones {' + '.join(self.parts)}"
        self._last_raw: dict[str, int] = {}
        self._energy_uj: dict[str, int] = {z.name: 0 for z in zones}

    def read(self) -> Reading:
        for z in self.zones:
            raw = read_int(z.path / "energy_uj")
            if z.name in self._last_raw:
                self._energy_uj[z.name] += rapl_delta_uj(self._last_raw[z.name], raw, z.max_energy_range_uj)
            self._last_raw[z.name] = raw
        counters = {name: uj / 1000.0 for name, uj in self._energy_uj.items()}
        counters[TOTAL_KEY] = sum(counters[p] for p in self.parts)
        return Reading(counters_mj=counters)

    def notes(self) -> list[str]:
        notes = ["RAPL measures the CPU package (and DRAM where exposed), not the whole machine"]
        if any(z.name == "psys" for z in self.zones):
            notes.append("psys (platform) is reported as a rail; it overlaps the package zones")
        return notes


def open_rapl(root: str | Path = "/", interval_s: float | None = None) -> RaplSampler | Unavailable:
    zones = discover_rapl(root)
    if not zones:
        return Unavailable(
            "rapl",
            f"no {POWERCAP}/intel-rapl:* zones (not x86, a VM without RAPL, or the intel_rapl module is not loaded)",
        )
    try:
        for z in zones:
            read_int(z.path / "energy_uj")
    except PermissionError:
        return Unavailable("rapl", PERMISSION_REASON)
    except (OSError, ValueError) as exc:
        return Unavailable("rapl", f"RAPL energy_uj could not be read: {exc}")
    return RaplSampler(zones, interval_s)
