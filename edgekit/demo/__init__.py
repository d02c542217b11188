"""`edgekit demo`: the whole pipeline on the built-in models and the default CPU target, composed
from the stages (export, decode, quantize, check, build, profile). Nothing below imports it.

``stage``: the run and its sizes (``DemoConfig``, ``run_demo``, the NPU stage); ``clock``: wall
and CPU seconds per stage and the progress lines; ``render``: the console tables.
"""

from edgekit.demo.clock import StageClock
from edgekit.demo.render import print_demo, print_timing
from edgekit.demo.stage import DemoConfig, npu_stage, run_demo

__all__ = ["DemoConfig", "StageClock", "npu_stage", "print_demo", "print_timing", "run_demo"]
