"""`edgekit doctor`: what this host can run for a target and what is missing (``stage``), and its
console rendering (``render``)."""

from edgekit.doctor.stage import (
    DOCTOR_SCHEMA,
    PROVIDER_INSTALL,
    doctor,
    environment,
    target_report,
    trt_limits,
)

__all__ = ["DOCTOR_SCHEMA", "PROVIDER_INSTALL", "doctor", "environment", "target_report", "trt_limits"]
