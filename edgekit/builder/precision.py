"""``edgekit build --precision auto``: the fastest precision that meets the accuracy budget on the
target, and why, from what ``quantize`` recorded (its budget verdict, the CPU class its scheme is
exact on, INT8 vs FP32 per decode on the class it was timed on)."""

from __future__ import annotations

from edgekit.arithmetic import SCHEMES
from edgekit.bundle import Bundle
from edgekit.host import HostFacts
from edgekit.manifest_sections import SpeedRecord
from edgekit.targets import Target


def choose_precision(bundle: Bundle, target: Target, host: HostFacts | None = None) -> tuple[str, str]:
    """(precision, the one-line reason). INT8 when the bundle's int8 model met its budget, came
    from the target's quantization profile, cannot saturate the target CPU's kernels and was not
    measured slower than FP32 on the target's CPU class; else the target's best float precision."""
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
            (
                f"the int8 model met its budget ({target.quantization_profile} "
                "profile); INT8 is not timed before the device runs it"
            ),
        )
    isa = (host or HostFacts.detect()).isa_class if target.isa == "host" else target.isa
    recorded = q.arithmetic.scheme if q.arithmetic is not None else None
    scheme = SCHEMES.get(recorded if recorded is not None else "u8s8")
    if scheme is None or scheme.saturates_on(isa):
        return (
            fallback,
            (
                f"the int8 model's scheme saturates on {isa} CPUs (re-quantize with `edgekit quantize "
                f"{bundle.root} --target {target.name}`)"
            ),
        )
    speed = q.speed or SpeedRecord(False, None, None, None)
    ratio = speed.int8_speedup
    if speed.measured and speed.isa == isa and ratio is not None:
        if ratio > 1.0:
            return (
                "int8",
                (
                    f"INT8 met its budget and ran {ratio:.2f}x FP32 per "
                    f"decode on {isa} ({speed.runtime}, measured by quantize)"
                ),
            )
        return (
            fallback,
            (
                f"INT8 met its budget but ran {ratio:.2f}x FP32 per "
                f"decode on {isa} ({speed.runtime}): FP32 is faster there"
            ),
        )
    timed = f"timed on {speed.isa}" if speed.isa else "not timed"
    return "int8", (
        f"INT8 met its budget and is exact on {isa} ({scheme.name}); its speed was {timed}, not on {isa}: "
        f"confirm with `edgekit profile {bundle.root} --precision fp32,int8` there"
    )
