"""Accuracy regression checks between two variants of a bundle (FP32 vs INT8, torch vs ORT,
ORT vs TensorRT): per-kind metrics on whole decode trajectories under identical noise,
thresholds and baselines, verdicts, JUnit XML. numpy only; ``edgekit check`` is the CLI.

The metrics, thresholds, verdicts and the default gate itself are the evaluation every stage
shares (``edgekit.evaluate``: ``metrics``, ``thresholds``, ``verdict``, ``gate``); this stage
adds the variants, the baseline and JUnit files, and the document."""

from edgekit.check.junit import junit_xml, write_junit
from edgekit.check.stage import (
    DEFAULT_N,
    SCHEMA,
    CheckConfig,
    RuntimePrecision,
    check_bundle,
    demo_check,
    eval_rows,
    parse_variant,
)

__all__ = [
    "DEFAULT_N",
    "SCHEMA",
    "CheckConfig",
    "RuntimePrecision",
    "check_bundle",
    "demo_check",
    "eval_rows",
    "parse_variant",
    "junit_xml",
    "write_junit",
]
