"""``edgekit build --precision auto``: the fastest precision that meets the accuracy budget on the
target, and why, from what ``quantize`` recorded (its budget verdict, the CPU class its scheme is
exact on, INT8 vs FP32 per decode on the class it was timed on, and whether that timing could
tell: within noise, the target's float precision is the safe choice)."""

from __future__ import annotations

from typing import Any

from edgekit.arithmetic import SCHEMES
from edgekit.bundle import Bundle
from edgekit.host import HostFacts
from edgekit.manifest_sections import SpeedRecord
from edgekit.targets import Target
from edgekit.vocabulary import SPEED_VERDICTS

WITHIN_NOISE = SPEED_VERDICTS[2]


def choose_precision(bundle: Bundle, target: Target, host: HostFacts | None = None) -> tuple[str, str]:
    """(precision, the one-line reason). INT8 when the bundle's int8 model met its budget, came
    from the target's quantization profile, cannot saturate the target CPU's kernels and was not
    measured slower than FP32 on the target's CPU class, nor within noise of it; else the target's
    best float precision."""
    fallback = next((p for p in target.precisions if p not in ("int8",)), "fp32")
    if "int8" not in target.precisions:
        return fallback, f"target {target.name} runs no int8"
    q = bundle.quantization
    if not bundle.has("int8") or q is None:
        return fallback, f"no int8 model (make one with `edgekit quantize {bundle.root} --target {target.name}`)"
    if q.profile != target.quantization_profile:
        return (
            fallback,
            f"the int8 model is profile {q.profile!r}; target {target.name} needs {target.quantization_profile!r}",
        )
    if not q.passed:
        return fallback, "the int8 model missed its accuracy budget"
    if not target.profile_facts.cpu_arithmetic:
        return (
            "int8",
            f"the int8 model met its budget ({target.quantization_profile} profile); "
            "INT8 is not timed before the device runs it",
        )
    isa = (host or HostFacts.detect()).isa_class if target.isa == "host" else target.isa
    recorded = q.arithmetic.scheme if q.arithmetic is not None else None
    scheme = SCHEMES.get(recorded if recorded is not None else "u8s8")
    if scheme is None or scheme.saturates_on(isa):
        return (
            fallback,
            f"the int8 model's scheme saturates on {isa} CPUs "
            f"(re-quantize with `edgekit quantize {bundle.root} --target {target.name}`)",
        )
    speed = q.speed or SpeedRecord(False, None, None, None)
    ratio = speed.int8_speedup
    if speed.measured and speed.isa == isa and ratio is not None:
        if speed.verdict == WITHIN_NOISE:
            return (
                fallback,
                f"INT8 met its budget and ran {ratio:.2f}x FP32 per decode on {isa} ({speed.runtime}), within noise "
                f"when quantize timed it ({'; '.join(speed.unsure) or 'unsure'}): {fallback}, the safe choice; "
                f"re-run `edgekit quantize {bundle.root}` on a quieter host",
            )
        # verdict None: quantize recorded neither the spread nor the load (an older edgekit).
        unknown = "" if speed.verdict else "; how it was measured is not recorded"
        if ratio > 1.0:
            return (
                "int8",
                f"INT8 met its budget and ran {ratio:.2f}x FP32 per decode on {isa} "
                f"({speed.runtime}, measured by quantize{unknown})",
            )
        return (
            fallback,
            f"INT8 met its budget but ran {ratio:.2f}x FP32 per decode on {isa} ({speed.runtime}): "
            "FP32 is faster there",
        )
    timed = f"timed on {speed.isa}" if speed.isa else "not timed"
    return "int8", (
        f"INT8 met its budget and is exact on {isa} ({scheme.name}); its speed was {timed}, not on {isa}: "
        f"confirm with `edgekit profile {bundle.root} --precision fp32,int8` there"
    )


def precision_evidence(bundle: Bundle) -> dict[str, Any] | None:
    """How quantize timed INT8 against FP32 (``probes.speed``: samples, spread, load, CPU class, the
    verdict), for the build document of ``--precision auto``; None where it was not recorded."""
    q = bundle.quantization
    speed = q.speed if q is not None else None
    if speed is None or not speed.measured:
        return None
    return {"verdict": speed.verdict, "unsure": list(speed.unsure), "int8_speedup": speed.int8_speedup} | (
        {"timing": speed.timing} if speed.timing else {}
    )
