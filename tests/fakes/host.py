"""A stand-in host for speed decisions (``edgekit.probes.speed``): a clock that moves only when a
timed callable says how long it "took", a load average read from a script, and this process's CPU
time. Nothing is timed for real, so no test asserts a time and no verdict depends on the machine
running the tests."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from itertools import cycle

from edgekit.probes.speed import HostProbe


class StandInHost:
    """``probe`` reads this host. ``call(name, ms)`` makes a callable that advances the clock by
    the next of ``ms`` (cycled) and counts its calls; ``loads``: the load average each reading
    returns in turn (the last repeats); ``own_cores``: this process's CPU use, in cores, while
    the clock moves."""

    def __init__(self, loads: Sequence[float | None] = (0.2,), own_cores: float = 1.0, cores: int = 2):
        self.now_ns = 0
        self.cpu_s = 0.0
        self.own_cores = own_cores
        self._loads = list(loads)
        self.load_reads = 0
        self.calls: dict[str, int] = {}
        self.probe = HostProbe(
            clock=lambda: self.now_ns, load=self._load, cpu_time=lambda: self.cpu_s, cores=cores, cpu_class="avx2"
        )

    def _load(self) -> float | None:
        value = self._loads[min(self.load_reads, len(self._loads) - 1)]
        self.load_reads += 1
        return value

    def advance(self, ms: float) -> None:
        self.now_ns += int(ms * 1e6)
        self.cpu_s += ms / 1e3 * self.own_cores

    def call(self, name: str, ms: Iterable[float]) -> Callable[[], None]:
        durations = cycle(ms)
        self.calls[name] = 0

        def fn() -> None:
            self.calls[name] += 1
            self.advance(next(durations))

        return fn
