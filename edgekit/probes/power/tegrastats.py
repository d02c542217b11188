"""Jetson power from ``tegrastats`` lines (when the INA3221 sysfs is not readable, or as a check).

Rails print as ``NAME cur/avg`` in mW: JetPack 4 bare numbers, JetPack 5+ with ``mW`` and a
leading ``MM-DD-YYYY HH:MM:SS``; newer releases may print more than two values per rail (the first
is the current reading). Memory fields look alike (``RAM 6185/7620MB``, ``SWAP 851/3810MB``,
``IRAM 0/252kB``): a rail's last value must end the token, so a unit such as ``MB`` rules it out.
"""

from __future__ import annotations

import re
import subprocess
import time
from collections.abc import Sequence

from edgekit.probes.power.sampler import PowerSampler, Reading, with_sum_total
from edgekit.probes.power.trace import TOTAL_KEY

INPUT_RAILS = ("VDD_IN", "POM_5V_IN")
# Memory counters share the NAME a/b shape; they never carry mW but a bare JP4 line could.
NOT_RAILS = frozenset({"RAM", "SWAP", "IRAM", "NC"})

_RAIL = re.compile(
    r"(?:^|(?<=\s))"  # the name starts a token
    r"(?P<name>[A-Z][A-Z0-9_]*)\s+"
    r"(?P<cur>\d+)(?P<unit>mW)?"  # current reading
    r"(?P<rest>(?:/\d+(?:mW)?)+)"  # average (and more values on newer releases)
    r"(?=\s|$)"  # ...and nothing glued after the last value (rules out MB, kB)
)


def parse_tegrastats_line(line: str) -> dict[str, float]:
    """``{rail: current mW}`` from one tegrastats line; ``{}`` when it has no rails."""
    rails: dict[str, float] = {}
    for m in _RAIL.finditer(line):
        name = m.group("name")
        if name in NOT_RAILS:
            continue
        # JP5+ marks every value with mW; a mix means this is not a power field.
        if m.group("unit") and m.group("rest").count("mW") != m.group("rest").count("/"):
            continue
        if not m.group("unit") and "mW" in m.group("rest"):
            continue
        rails[name] = float(m.group("cur"))
    return rails


def total_of(rails: dict[str, float]) -> tuple[str, str]:
    found = next((r for r in INPUT_RAILS if r in rails), None)
    if found:
        return found, f"board input rail {found} (tegrastats)"
    return TOTAL_KEY, f"sum of tegrastats rails {', '.join(sorted(rails))} (no VDD_IN/POM_5V_IN rail)"


class TegrastatsSampler(PowerSampler):
    """Runs ``tegrastats --interval <ms>`` and timestamps each line as it arrives."""

    probe = "tegrastats"
    default_interval_s = 0.1

    def __init__(self, interval_s: float | None = None, command: Sequence[str] | None = None):
        super().__init__(interval_s)
        ms = max(1, round(self.interval_s * 1000))
        self.command = list(command) if command else ["tegrastats", "--interval", str(ms)]
        self.total_rail = None
        self.total_source = "no tegrastats line with power rails was read"
        self._proc: subprocess.Popen[str] | None = None
        self._last_other = ""

    def _begin(self) -> None:
        self._last_other = ""
        try:
            # stderr merged: an error message arrives as a line without rails and is kept.
            self._proc = subprocess.Popen(
                self.command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, bufsize=1
            )
        except OSError as exc:
            self._proc = None
            self.record_error(exc)

    def _loop(self) -> None:
        proc = self._proc
        if proc is None or proc.stdout is None:
            return
        for line in proc.stdout:
            t_ns = time.monotonic_ns()
            if self._stop.is_set():
                break
            rails = parse_tegrastats_line(line)
            if not rails:
                if line.strip():
                    self._last_other = line.strip()
                continue
            if self.total_rail is None:
                self.total_rail, self.total_source = total_of(rails)
            self.add_reading(t_ns, Reading(rails if self.total_rail != TOTAL_KEY else with_sum_total(rails)))

    def _halt(self) -> None:
        proc = self._proc
        if proc is None:
            return
        exited_early = proc.poll() is not None
        if exited_early and proc.returncode != 0:
            last = self._last_other or "no output"
            self.record_error(f"{' '.join(self.command)} exited with {proc.returncode}: {last}")
        if not exited_early:
            proc.terminate()
        try:
            proc.wait(timeout=2.0)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()

    def _end(self) -> None:
        if not self._samples and self._last_other:
            self.record_error(f"no power rails in tegrastats output; last line: {self._last_other}")
        if self._proc is not None and self._proc.stdout is not None:
            self._proc.stdout.close()
        self._proc = None

    def notes(self) -> list[str]:
        return ["tegrastats prints once per interval; samples start one interval after the window opens"]
