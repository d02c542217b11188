"""`edgekit demo`'s clock: wall and CPU seconds per stage, and progress lines stamped with the
time the run has taken so far."""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from typing import Any

from edgekit.host import cpu_identity


class StageClock:
    """Wall and CPU seconds per demo stage, and progress lines that say how long the run has
    taken so far (``[1:23] quantize ...``): the demo took minutes with no word of where."""

    def __init__(self, say: Callable[[str], None]):
        self.say = say
        self.t0, self.cpu0 = time.perf_counter(), time.process_time()
        self.stages: dict[str, dict[str, float]] = {}
        self.current: str | None = None
        self._seen: set[str] = set()

    def _stamp(self) -> str:
        m, s = divmod(int(time.perf_counter() - self.t0), 60)
        return f"[{m}:{s:02d}]"

    def start(self, stage: str) -> None:
        """Close the running stage (if another) and open ``stage``."""
        if stage == self.current:
            return
        now, cpu = time.perf_counter(), time.process_time()
        if self.current is not None:
            self.stages[self.current]["wall_s"] += now - self.stages[self.current].pop("_wall")
            self.stages[self.current]["cpu_s"] += cpu - self.stages[self.current].pop("_cpu")
        self.current = stage
        entry = self.stages.setdefault(stage, {"wall_s": 0.0, "cpu_s": 0.0})
        entry["_wall"], entry["_cpu"] = now, cpu

    def step(self, message: str, stage: str | None = None) -> None:
        if stage is not None:
            self.start(stage)
        self.say(f"{self._stamp()} {message}")

    def detail(self, message: str) -> None:
        """A line inside the running stage (a model being quantized, an NPU step)."""
        self.say(f"{self._stamp()}   {message}")

    def profile_detail(self, label: str, done: int, total: int) -> None:
        """The profiler's progress(label, done, total): one line per label."""
        if label not in self._seen:
            self._seen.add(label)
            self.detail(label)

    def finish(self) -> dict[str, Any]:
        """{"stages": {name: {wall_s, cpu_s}}, "wall_s", "cpu_s", "cpu", "cores", "load_avg"}."""
        self.start("_end")
        self.stages.pop("_end")
        cpu = cpu_identity()
        try:
            load = [round(x, 2) for x in os.getloadavg()]
        except OSError:
            load = None
        return {
            "stages": self.stages,
            "wall_s": time.perf_counter() - self.t0,
            "cpu_s": time.process_time() - self.cpu0,
            "cpu": cpu["model"],
            "cores": cpu["cores"],
            "load_avg_end": load,
        }
