"""Jetson on-board INA3221 power monitors read from sysfs.

JetPack 5 and later (mainline hwmon driver): ``/sys/bus/i2c/devices/*/name`` is ``ina3221``;
``hwmon/hwmon*/inN_label`` names the rail, ``inN_input`` is bus mV and ``currN_input`` mA, for
N = 1..3 only (``in4..6`` are shunt voltages in µV and ``in7`` their sum). JetPack 4 (L4T iio
driver): name ``ina3221x``; ``iio:device*/rail_name_N``, ``in_voltageN_input`` (mV),
``in_currentN_input`` (mA), ``in_powerN_input`` (mW). Labels ``NC`` are unconnected channels.

The total is the board input rail (``VDD_IN``, or ``POM_5V_IN`` on the Nano) where there is one,
otherwise the sum of rails (AGX Xavier, AGX Orin with its two devices 1-0040 and 1-0041).
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass
from pathlib import Path

from edgekit.probes._sysfs import read_int, read_text, under
from edgekit.probes.power.sampler import PowerSampler, Reading, with_sum_total
from edgekit.probes.power.trace import TOTAL_KEY, Unavailable

I2C_DEVICES = "/sys/bus/i2c/devices"
INPUT_RAILS = ("VDD_IN", "POM_5V_IN")
HWMON_CHANNELS = (1, 2, 3)
# Rails can appear (a driver binding late) or vanish; look again at most this often.
REDISCOVER_S = 2.0


@dataclass(frozen=True)
class Ina3221Channel:
    rail: str
    device: str  # i2c device directory name, e.g. "1-0040"
    voltage_path: Path  # mV
    current_path: Path  # mA
    power_path: Path | None = None  # mW (JetPack 4 only)

    def read_mw(self) -> float:
        if self.power_path is not None and self.power_path.exists():
            return float(read_int(self.power_path))
        return read_int(self.voltage_path) * read_int(self.current_path) / 1000.0


def discover_ina3221(root: str | Path = "/") -> list[Ina3221Channel]:
    """Every labelled, connected INA3221 channel under ``root`` (JetPack 4 and 5+ layouts)."""
    channels: list[Ina3221Channel] = []
    for name_file in sorted(under(root, I2C_DEVICES).glob("*/name")):
        try:
            if "ina3221" not in read_text(name_file):
                continue
        except OSError:
            continue
        dev = name_file.parent
        channels += _hwmon_channels(dev) + _iio_channels(dev)
    # The same label on two devices would collide in the trace: qualify it with the device.
    counts: dict[str, int] = {}
    for c in channels:
        counts[c.rail] = counts.get(c.rail, 0) + 1
    return [
        Ina3221Channel(f"{c.rail}@{c.device}", c.device, c.voltage_path, c.current_path, c.power_path)
        if counts[c.rail] > 1
        else c
        for c in channels
    ]


def _label(path: Path) -> str | None:
    try:
        label = read_text(path)
    except OSError:
        return None
    return None if not label or label.upper() == "NC" else label


def _hwmon_channels(dev: Path) -> list[Ina3221Channel]:
    out = []
    for hwmon in sorted(dev.glob("hwmon/hwmon*")):
        for n in HWMON_CHANNELS:
            label = _label(hwmon / f"in{n}_label")
            if label:
                out.append(Ina3221Channel(label, dev.name, hwmon / f"in{n}_input", hwmon / f"curr{n}_input"))
    return out


def _iio_channels(dev: Path) -> list[Ina3221Channel]:
    out = []
    for iio in sorted(dev.glob("iio:device*")):
        for rail_file in sorted(iio.glob("rail_name_*")):
            n = rail_file.name.rsplit("_", 1)[-1]
            label = _label(rail_file)
            if label and n.isdigit():
                out.append(
                    Ina3221Channel(
                        label,
                        dev.name,
                        iio / f"in_voltage{n}_input",
                        iio / f"in_current{n}_input",
                        iio / f"in_power{n}_input",
                    )
                )
    return out


class JetsonSampler(PowerSampler):
    probe = "jetson"
    default_interval_s = 0.05  # sysfs reads cost microseconds; INA3221 converts every ~1 ms

    def __init__(self, root: str | Path = "/", interval_s: float | None = None):
        super().__init__(interval_s)
        self.root = root
        self.channels = discover_ina3221(root)
        self._discovered_at = time.monotonic()
        self._rediscover = False
        rails = {c.rail for c in self.channels}
        found = next((r for r in INPUT_RAILS if r in rails), None)
        if found:
            self.total_rail, self.total_source = found, f"board input rail {found} (INA3221)"
        else:
            self.total_rail = TOTAL_KEY
            self.total_source = f"sum of INA3221 rails {', '.join(sorted(rails))} (no VDD_IN/POM_5V_IN rail)"

    def read(self) -> Reading:
        now = time.monotonic()
        if self._rediscover or now - self._discovered_at > REDISCOVER_S:
            self.channels = discover_ina3221(self.root)
            self._discovered_at, self._rediscover = now, False
        rails: dict[str, float] = {}
        for c in self.channels:
            try:
                rails[c.rail] = c.read_mw()
            except FileNotFoundError:
                self._rediscover = True  # the rail went away: leave it out of this sample
            except ValueError:
                continue  # a channel mid-update can read empty; skip it this once
        if not rails:
            raise OSError(f"no readable INA3221 channel under {under(self.root, I2C_DEVICES)}")
        return Reading(rails if self.total_rail != TOTAL_KEY else with_sum_total(rails))

    def notes(self) -> list[str]:
        if self.total_rail == TOTAL_KEY:
            return [
                "total is the sum of the INA3221 rails; on AGX boards the rails do not cover every load on the module"
            ]
        return []


def open_jetson(root: str | Path = "/", interval_s: float | None = None) -> JetsonSampler | Unavailable:
    if not any(under(root, I2C_DEVICES).glob("*/name")):
        return Unavailable("jetson", f"no I2C devices under {I2C_DEVICES} (not a Jetson)")
    sampler = JetsonSampler(root, interval_s)
    if not sampler.channels:
        return Unavailable(
            "jetson", f"no INA3221 rails under {I2C_DEVICES} (not a Jetson, or the ina3221 driver is not loaded)"
        )
    try:
        sampler.read()
    except PermissionError as exc:
        return Unavailable(
            "jetson", f"INA3221 sysfs is not readable ({exc}): run as root or as a member of the i2c group"
        )
    except OSError as exc:
        return Unavailable("jetson", f"INA3221 channels could not be read: {exc}")
    return sampler


# ----------------------------------------------------------------------------------------------
# Power mode and GPU load (logged with every run by probes.system)

_GPU_DEVFREQ = re.compile(r"(gv11b|gp10b|ga10b|gb10b|gm20b|\.gpu$)")


def parse_nvpmodel(text: str) -> dict[str, object]:
    """``nvpmodel -q`` output -> ``{"mode": "MAXN", "id": 0}`` (warnings lines ignored)."""
    mode: str | None = None
    mode_id: int | None = None
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    for i, line in enumerate(lines):
        if line.startswith("NV Power Mode:"):
            mode = line.split(":", 1)[1].strip()
            if i + 1 < len(lines) and lines[i + 1].isdigit():
                mode_id = int(lines[i + 1])
    return {"mode": mode, "id": mode_id}


def gpu_load(root: str | Path = "/") -> float | None:
    """Jetson GPU load in percent from ``/sys/class/devfreq/*/device/load`` (0-1000); None if absent."""
    for dev in sorted(under(root, "/sys/class/devfreq").glob("*")):
        if _GPU_DEVFREQ.search(dev.name):
            try:
                return read_int(dev / "device" / "load") / 10.0
            except (OSError, ValueError):
                continue
    return None
