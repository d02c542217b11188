"""The names every room shares: edgekit's runtimes, the precisions a model runs in, and what a
speed decision can conclude.

Defined once, here in the hallway: target files are checked against them (``targets``), the
runtime registry has one entry per runtime (``edgekit.runtimes.registry``, which also holds what
each one runs and needs), and the CLI's ``--runtime``/``--precision`` choices come from that
registry. Data only.
"""

from __future__ import annotations

# The built-in backends, in the order help texts list them (edgekit.runtimes.registry has one
# entry each; a plugin backend registered there adds its own name).
RUNTIMES: tuple[str, ...] = ("ort", "torch", "trt", "openvino", "qnn", "aihub")
# Runtimes a target file may list: torch runs the PyTorch module inside edgekit's own process
# (the reference and eager baseline), so there is no engine or device to target.
TARGET_RUNTIMES: tuple[str, ...] = tuple(r for r in RUNTIMES if r != "torch")
# Every precision a runtime can run a bundle's model in (fp16/bf16: the fp32 model computed at
# that precision; int8: the model `edgekit quantize` made).
PRECISIONS: tuple[str, ...] = ("fp32", "fp16", "int8", "bf16")
# What a precision means, said once wherever it is offered (CLI help).
PRECISION_NOTES: dict[str, str] = {
    "fp32": "the exported model",
    "fp16": "the fp32 model computed in float16",
    "int8": "the model `edgekit quantize` made",
    "bf16": "the fp32 model computed in bfloat16",
}

# What timing A against B can conclude (``probes.speed``): "within noise" where the samples' spread
# is not below the difference, or the host was busier than its cores while they were taken. A
# manifest and every report that records a speed decision use these words.
SPEED_VERDICTS: tuple[str, ...] = ("faster", "slower", "within noise")

__all__ = ["PRECISIONS", "PRECISION_NOTES", "RUNTIMES", "SPEED_VERDICTS", "TARGET_RUNTIMES"]
