"""The ``[qnn]`` table of a Snapdragon target (Qualcomm's HTP through onnxruntime-qnn): its
settings and their checks. Data only, as the rest of ``targets``."""

from __future__ import annotations

from dataclasses import dataclass

from edgekit.errors import UsageError

# htp_performance_mode values the QNN EP accepts (onnxruntime-qnn's QNN-ExecutionProvider.md).
QNN_PERFORMANCE_MODES: tuple[str, ...] = (
    "burst",
    "balanced",
    "default",
    "high_performance",
    "high_power_saver",
    "low_balanced",
    "extreme_power_saver",
    "low_power_saver",
    "power_saver",
    "sustained_high_performance",
)


@dataclass(frozen=True)
class QnnSettings:
    # Hexagon NPU generation (73 = v73: 8 Gen 2, X Elite; 75: 8 Gen 3; 79: 8 Elite); 0 = unset.
    htp_arch: int = 0
    # QNN SoC model id (QnnTypes.h QNN_SOC_MODEL_*): 43 SM8550, 57 SM8650, 69 SM8750, 60 SC8380XP.
    # A context binary compiled for one SoC model is refused by another.
    soc_model: int = 0
    # htp_performance_mode: the clock/voltage vote while the NPU runs (burst for benchmarks).
    performance_mode: str = "burst"
    # VTCM megabytes to reserve (the NPU's on-chip scratch memory); 0 = the backend's default.
    vtcm_mb: int = 0


def check_qnn(q: QnnSettings, used: bool, source: str) -> None:
    """One clear error for a bad ``[qnn]`` value; a target that runs qnn must name its SoC."""
    if q.performance_mode not in QNN_PERFORMANCE_MODES:
        raise UsageError(
            f"target file {source}: qnn.performance_mode = {q.performance_mode!r} is invalid;"
            f" valid: {', '.join(QNN_PERFORMANCE_MODES)}"
        )
    for key in ("htp_arch", "soc_model", "vtcm_mb"):
        if getattr(q, key) < 0:
            raise UsageError(f"target file {source}: qnn.{key} must be >= 0 (0 = unset)")
    if used and not (q.htp_arch and q.soc_model):
        raise UsageError(
            f"target file {source}: a qnn target needs qnn.htp_arch and qnn.soc_model (e.g. 75 and 57 for SM8650)"
        )
