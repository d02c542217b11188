"""The quantization profiles a target file may name, and what each means to the stages below
quantize (lint, build), which read these facts and never the name."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass


@dataclass(frozen=True)
class ProfileFacts:
    """What a quantization profile a target may name means to the stages that judge a bundle for
    the target without quantizing (lint, ``build --precision auto``, the int8 host warning of run,
    check and profile): they read these facts, never the name. Its quantize registry entry
    (``quantize/profiles.py``) says the same (``tests/quantize/test_registry.py`` holds them equal)."""

    # Its int8 model runs on a CPU's int8 kernels with the scheme chosen for the CPU class
    # (``arithmetic.SCHEMES``): the class it was validated on, and whether it saturates, matter.
    cpu_arithmetic: bool = False
    # Its graphs meet TensorRT's QDQ rules, which lint checks on the target's graphs.
    tensorrt_qdq: bool = False


# The quantization profiles a target file may name (`quantization_profile`), and their facts.
QUANTIZATION_PROFILES: Mapping[str, ProfileFacts] = {
    "cpu": ProfileFacts(cpu_arithmetic=True),
    "trt": ProfileFacts(tensorrt_qdq=True),
    "qnn": ProfileFacts(),
}
