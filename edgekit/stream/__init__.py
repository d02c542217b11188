"""`edgekit loadtest`: token -> frame streams decoded chunk by chunk on one shared device.

``policy``: fixed and adaptive (solver, steps) per chunk, the cost model and the quality ladder;
``pipeline``: the threads (token stage, chunked flow stage) and the device they share;
``stage``: the load test and its document; ``render``: the console tables and HTML report.
"""

from edgekit.stream.policy import POLICIES, AdaptivePolicy, CostModel, FixedPolicy, Rung, ladder, rung
from edgekit.stream.stage import ARRIVALS, LoadConfig, arrival_offsets, loadtest

__all__ = [
    "ARRIVALS",
    "POLICIES",
    "AdaptivePolicy",
    "CostModel",
    "FixedPolicy",
    "LoadConfig",
    "Rung",
    "arrival_offsets",
    "ladder",
    "loadtest",
    "rung",
]
