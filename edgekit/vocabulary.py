"""The names every room shares: edgekit's runtimes and the precisions a model runs in.

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

__all__ = ["PRECISIONS", "PRECISION_NOTES", "RUNTIMES", "TARGET_RUNTIMES"]
