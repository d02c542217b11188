"""Android power: the battery fuel gauge, and the Pixel on-device power monitor (ODPM).

Battery: ``/sys/class/power_supply/battery/current_now`` is µA by the kernel ABI (some vendors
write mA) and ``voltage_now`` µV. The sign convention differs by vendor, so the magnitude is used
and the direction comes from ``status``. Fuel gauges update slowly (often once a second or
slower, some report a running average): use long runs.

ODPM (root only): ``/sys/bus/iio/devices/iio:device*/energy_value`` holds ``t=<ms>`` then one
line per channel ``CH<i>(T=<ms>)[<RAIL>], <cumulative µW·s>``. Its rails are the PMIC rails it is
wired to: their sum is not the whole-device draw at the battery.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from edgekit.probes._sysfs import read_text, under
from edgekit.probes.power.sampler import PowerSampler, Reading
from edgekit.probes.power.trace import TOTAL_KEY, Unavailable

BATTERY = "/sys/class/power_supply/battery"
IIO_DEVICES = "/sys/bus/iio/devices"
# |current_now| below this is taken as mA: 10 mA in µA is a phone asleep, not running a model.
MA_THRESHOLD = 10_000
# voltage_now below this is taken as mV (a Li-ion cell is ~3.0-4.5 V = 3e6-4.5e6 µV).
MV_THRESHOLD = 100_000


@dataclass(frozen=True)
class BatteryReading:
    current_ma: float  # magnitude
    voltage_mv: float
    status: str  # Charging, Discharging, Not charging, Full, Unknown
    current_unit: str  # the unit current_now was read in: "uA" or "mA"

    @property
    def charging(self) -> bool:
        return self.status.strip().lower() == "charging"

    @property
    def power_mw(self) -> float:
        """Discharge power: positive while the battery feeds the device, negative while charging."""
        magnitude = self.current_ma * self.voltage_mv / 1000.0
        return -magnitude if self.charging else magnitude


def parse_battery(current_now: str, voltage_now: str, status: str = "Unknown") -> BatteryReading:
    current = int(current_now.strip())
    if abs(current) < MA_THRESHOLD:
        current_ma, unit = float(abs(current)), "mA"
    else:
        current_ma, unit = abs(current) / 1000.0, "uA"
    voltage = int(voltage_now.strip())
    voltage_mv = float(voltage) if voltage < MV_THRESHOLD else voltage / 1000.0
    return BatteryReading(current_ma, voltage_mv, status.strip() or "Unknown", unit)


class BatterySampler(PowerSampler):
    probe = "android"
    default_interval_s = 0.1

    def __init__(self, root: str | Path = "/", interval_s: float | None = None):
        super().__init__(interval_s)
        self.dir = under(root, BATTERY)
        self.total_rail = "battery"
        self.total_source = "battery discharge power = |current_now| x voltage_now (fuel gauge)"
        self._saw_charging = False

    def read(self) -> Reading:
        status_path = self.dir / "status"
        status = read_text(status_path) if status_path.exists() else "Unknown"
        reading = parse_battery(read_text(self.dir / "current_now"), read_text(self.dir / "voltage_now"), status)
        self._saw_charging |= reading.charging
        return Reading({"battery": reading.power_mw})

    def notes(self) -> list[str]:
        notes = ["fuel-gauge current updates slowly (often >= 1 s, sometimes averaged): prefer runs of 10 s or more"]
        if self._saw_charging:
            notes.append(
                "the battery was charging during the window: the reading is charge flow, not consumption; "
                "unplug and rerun"
            )
        return notes


def open_android(root: str | Path = "/", interval_s: float | None = None) -> BatterySampler | Unavailable:
    d = under(root, BATTERY)
    if not (d / "current_now").exists() or not (d / "voltage_now").exists():
        return Unavailable("android", f"no {BATTERY}/current_now and voltage_now (not an Android device)")
    sampler = BatterySampler(root, interval_s)
    try:
        sampler.read()
    except PermissionError:
        return Unavailable("android", f"{BATTERY}/current_now is not readable: run under adb shell or as root")
    except (OSError, ValueError) as exc:
        return Unavailable("android", f"battery fuel gauge could not be read: {exc}")
    return sampler


# ----------------------------------------------------------------------------------------------
# Pixel ODPM

_ODPM_T = re.compile(r"^t=(\d+)")
_ODPM_CH = re.compile(r"^CH(\d+)\(T=(\d+)\)\[([^\]]+)\],\s*(\d+)")


@dataclass(frozen=True)
class OdpmChannel:
    index: int
    rail: str
    t_ms: int
    energy_uws: int  # cumulative µW·s = µJ

    @property
    def energy_mj(self) -> float:
        return self.energy_uws / 1000.0


def parse_odpm(text: str) -> tuple[int | None, list[OdpmChannel]]:
    """``(t_ms, channels)`` from the text of an ``energy_value`` file."""
    t_ms: int | None = None
    channels: list[OdpmChannel] = []
    for line in text.splitlines():
        line = line.strip()
        if m := _ODPM_T.match(line):
            t_ms = int(m.group(1))
        elif m := _ODPM_CH.match(line):
            channels.append(OdpmChannel(int(m.group(1)), m.group(3), int(m.group(2)), int(m.group(4))))
    return t_ms, channels


class OdpmSampler(PowerSampler):
    probe = "odpm"
    default_interval_s = 0.1
    power_from_counters = True

    def __init__(self, files: list[Path], interval_s: float | None = None):
        super().__init__(interval_s)
        self.files = files
        self.total_rail = TOTAL_KEY
        self.total_source = "sum of ODPM rails on " + ", ".join(f.parent.name for f in files)

    def read(self) -> Reading:
        counters: dict[str, float] = {}
        for f in self.files:
            _, channels = parse_odpm(read_text(f))
            for ch in channels:
                key = ch.rail if ch.rail not in counters else f"{ch.rail}@{f.parent.name}"
                counters[key] = ch.energy_mj
        if not counters:
            raise ValueError(f"no ODPM channels in {', '.join(map(str, self.files))}")
        counters[TOTAL_KEY] = sum(counters.values())
        return Reading(counters_mj=counters)

    def notes(self) -> list[str]:
        return ["ODPM covers the PMIC rails it is wired to; the sum is not the whole-device draw at the battery"]


def open_odpm(root: str | Path = "/", interval_s: float | None = None) -> OdpmSampler | Unavailable:
    files = sorted(under(root, IIO_DEVICES).glob("iio:device*/energy_value"))
    if not files:
        return Unavailable("odpm", f"no {IIO_DEVICES}/iio:device*/energy_value (Pixel on-device power monitor)")
    sampler = OdpmSampler(files, interval_s)
    try:
        sampler.read()
    except PermissionError:
        return Unavailable("odpm", "energy_value is readable by root only: run under `adb root` or su")
    except (OSError, ValueError) as exc:
        return Unavailable("odpm", f"ODPM energy_value could not be read: {exc}")
    return sampler
