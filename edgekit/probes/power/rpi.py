"""Raspberry Pi 5 PMIC rails through ``vcgencmd pmic_read_adc``, and throttling bits.

The PMIC ADC prints right-aligned lines ``<RAIL>_A current(<ch>)=<amps>A`` and
``<RAIL>_V volt(<ch>)=<volts>V``. Power is the sum of V x A over rails that have both; ``EXT5V``
and ``BATT`` have a voltage only, so loads on the 5 V rail (USB devices, fan, HATs) are not
covered. Each reading spawns a process: at most 10 Hz.
"""

from __future__ import annotations

import re
import shutil
from dataclasses import dataclass
from typing import Any

from edgekit.probes._sysfs import CommandRunner, run_command
from edgekit.probes.power.sampler import PowerSampler, Reading, with_sum_total
from edgekit.probes.power.trace import Unavailable

PMIC_COMMAND = ("vcgencmd", "pmic_read_adc")
THROTTLED_COMMAND = ("vcgencmd", "get_throttled")
MIN_INTERVAL_S = 0.1  # vcgencmd costs a process spawn per reading; faster sampling loads the CPU

_ADC = re.compile(r"^\s*(?P<rail>\S+)_(?P<kind>[AV])\s+(?:current|volt)\((?P<ch>\d+)\)=(?P<value>[-+0-9.eE]+)[AV]\s*$")

# get_throttled bits: 0-3 describe now, 16-19 whether it happened since boot.
THROTTLE_BITS = {
    0: "under-voltage detected",
    1: "arm frequency capped",
    2: "currently throttled",
    3: "soft temperature limit active",
    16: "under-voltage has occurred",
    17: "arm frequency capping has occurred",
    18: "throttling has occurred",
    19: "soft temperature limit has occurred",
}


@dataclass(frozen=True)
class PmicReading:
    amps: dict[str, float]
    volts: dict[str, float]

    def rails_mw(self) -> dict[str, float]:
        return {r: self.volts[r] * self.amps[r] * 1000.0 for r in sorted(self.amps) if r in self.volts}

    @property
    def voltage_only(self) -> list[str]:
        return sorted(set(self.volts) - set(self.amps))


def parse_pmic_read_adc(text: str) -> PmicReading:
    amps: dict[str, float] = {}
    volts: dict[str, float] = {}
    for line in text.splitlines():
        m = _ADC.match(line)
        if m:
            (amps if m.group("kind") == "A" else volts)[m.group("rail")] = float(m.group("value"))
    return PmicReading(amps, volts)


def parse_throttled(text: str) -> dict[str, Any]:
    """``throttled=0x50005`` -> the raw value and the names of the set bits, now and since boot."""
    m = re.search(r"throttled=(0x[0-9a-fA-F]+|\d+)", text)
    if not m:
        raise ValueError(f"unexpected get_throttled output: {text.strip()!r}")
    value = int(m.group(1), 0)
    return {
        "raw": hex(value),
        "now": [name for bit, name in THROTTLE_BITS.items() if bit < 16 and value & (1 << bit)],
        "since_boot": [name for bit, name in THROTTLE_BITS.items() if bit >= 16 and value & (1 << bit)],
    }


class RpiPmicSampler(PowerSampler):
    probe = "rpi"
    default_interval_s = 0.2

    def __init__(self, interval_s: float | None = None, run: CommandRunner = run_command):
        super().__init__(interval_s)
        self._clamped = self.interval_s < MIN_INTERVAL_S
        self.interval_s = max(self.interval_s, MIN_INTERVAL_S)
        self._run = run
        self.total_rail = "total"
        self.total_source = "sum of V x A over the PMIC rails (vcgencmd pmic_read_adc)"

    def read(self) -> Reading:
        rails = parse_pmic_read_adc(self._run(PMIC_COMMAND)).rails_mw()
        if not rails:
            raise ValueError("vcgencmd pmic_read_adc printed no rail with both current and voltage")
        return Reading(with_sum_total(rails))

    def notes(self) -> list[str]:
        notes = [
            "PMIC rails only: EXT5V and BATT have a voltage but no current, "
            "so 5 V loads (USB, fan, HATs) are not covered"
        ]
        if self._clamped:
            notes.append(f"interval raised to {MIN_INTERVAL_S:.1f} s: each reading spawns vcgencmd")
        return notes


def open_rpi(interval_s: float | None = None, run: CommandRunner | None = None) -> RpiPmicSampler | Unavailable:
    if run is None:
        if shutil.which("vcgencmd") is None:
            return Unavailable("rpi", "vcgencmd is not on PATH (not a Raspberry Pi OS install)")
        run = run_command
    sampler = RpiPmicSampler(interval_s, run)
    try:
        sampler.read()
    except Exception as exc:  # noqa: BLE001 - CalledProcessError, timeout, parse failure all mean "no"
        return Unavailable("rpi", f"vcgencmd pmic_read_adc failed (Raspberry Pi 5 only): {exc}")
    return sampler
