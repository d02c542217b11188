"""Measurement: latency timing and statistics, memory, power and energy, system state.

Probes wrap calls; runtimes never time themselves. Everything returns dataclasses (or plain
dicts for system state) with ``to_json()``; the report layer renders them.
"""

from edgekit.probes.latency import (
    BreakdownStats,
    DecodeTiming,
    LatencyStats,
    MeasureConfig,
    Measurement,
    TimedRuntime,
    measure,
    summarize,
)
from edgekit.probes.memory import (
    MemorySnapshot,
    RssReport,
    RssTracker,
    file_sizes,
    memory_snapshot,
)

__all__ = [
    "BreakdownStats",
    "DecodeTiming",
    "LatencyStats",
    "MeasureConfig",
    "Measurement",
    "MemorySnapshot",
    "RssReport",
    "RssTracker",
    "TimedRuntime",
    "file_sizes",
    "measure",
    "memory_snapshot",
    "summarize",
]
