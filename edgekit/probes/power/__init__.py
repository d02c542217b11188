"""Power and energy samplers, one module per platform, and ``detect`` to pick one.

Every sampler runs on its own daemon thread between ``start()`` and ``stop() -> PowerTrace``; a
platform without a usable sensor gives ``Unavailable(probe, reason)`` and the report prints the
reason, never a made-up figure. ``scope`` says which devices each probe sees: a decode on a device
its probe does not read gets no energy figure.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

from edgekit.errors import UsageError
from edgekit.probes._sysfs import CommandRunner
from edgekit.probes.power.android import open_android, open_odpm
from edgekit.probes.power.jetson import open_jetson
from edgekit.probes.power.nvml import open_nvml
from edgekit.probes.power.rapl import open_rapl
from edgekit.probes.power.rpi import open_rpi
from edgekit.probes.power.sampler import PowerSampler, Reading, measure_idle
from edgekit.probes.power.scope import unseen_reason
from edgekit.probes.power.tegrastats import TegrastatsSampler
from edgekit.probes.power.trace import (
    EnergyPerDecode,
    PowerSample,
    PowerTrace,
    Unavailable,
    energy_per_decode_mj,
)
from edgekit.targets import POWER_PROBES

CHOICES = POWER_PROBES  # the names a target file may give (edgekit.targets validates them)
# Most specific and most complete first: a discrete GPU's board power, then Jetson's input rail,
# then CPU package counters, phone sensors, and the Pi PMIC (which spawns a process per reading).
AUTO_ORDER = ("nvml", "jetson", "rapl", "android", "odpm", "rpi")

__all__ = [
    "AUTO_ORDER",
    "CHOICES",
    "EnergyPerDecode",
    "PowerSample",
    "PowerSampler",
    "PowerTrace",
    "Reading",
    "Unavailable",
    "detect",
    "energy_per_decode_mj",
    "measure_idle",
    "unseen_reason",
]


def _open_tegrastats(interval_s: float | None) -> PowerSampler | Unavailable:
    if shutil.which("tegrastats") is None:
        return Unavailable("tegrastats", "tegrastats is not on PATH (not a Jetson, or JetPack tools not installed)")
    return TegrastatsSampler(interval_s)


def detect(
    choice: str = "auto",
    root: str | Path = "/",
    *,
    interval_s: float | None = None,
    pynvml: Any = None,
    run_command: CommandRunner | None = None,
) -> PowerSampler | Unavailable:
    """The sampler for ``choice``, or ``Unavailable`` with the reason.

    ``auto`` tries ``AUTO_ORDER`` and, when nothing works, returns ``Unavailable("auto", ...)``
    listing every probe's reason. ``root`` re-roots the sysfs paths (tests); ``pynvml`` and
    ``run_command`` replace the NVML module and the ``vcgencmd`` runner.
    """
    if choice not in CHOICES:
        raise UsageError(f"unknown power probe {choice!r}; valid: {', '.join(CHOICES)}")
    openers: dict[str, Callable[[], PowerSampler | Unavailable]] = {
        "nvml": lambda: open_nvml(interval_s=interval_s, pynvml=pynvml),
        "jetson": lambda: open_jetson(root, interval_s),
        "tegrastats": lambda: _open_tegrastats(interval_s),
        "rapl": lambda: open_rapl(root, interval_s),
        "android": lambda: open_android(root, interval_s),
        "odpm": lambda: open_odpm(root, interval_s),
        "rpi": lambda: open_rpi(interval_s, run_command),
    }
    if choice == "off":
        return Unavailable("off", "power measurement turned off")
    if choice != "auto":
        return openers[choice]()
    reasons = []
    for name in AUTO_ORDER:
        found = openers[name]()
        if isinstance(found, PowerSampler):
            return found
        reasons.append(f"{name}: {found.reason}")
    return Unavailable("auto", "no power sensor found; " + "; ".join(reasons))
