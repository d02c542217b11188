"""Accuracy regression checks between two variants of a bundle (FP32 vs INT8, torch vs ORT,
ORT vs TensorRT): per-kind metrics on whole decode trajectories under identical noise,
thresholds and baselines, verdicts, JUnit XML. numpy only; ``edgekit check`` is the CLI."""

from edgekit.check.junit import junit_xml, write_junit
from edgekit.check.metrics import (
    ShadowRecorder,
    accumulator_for,
    load_metric_hook,
    quality_drops,
)
from edgekit.check.stage import (
    DEFAULT_N,
    SCHEMA,
    CheckConfig,
    RuntimePrecision,
    check_bundle,
    demo_check,
    eval_rows,
    gate_runtimes,
    parse_variant,
)
from edgekit.check.thresholds import (
    DEFAULTS,
    QUALITY_DROP_DEFAULTS,
    Baseline,
    Rule,
    Thresholds,
    default_thresholds,
    load_baseline,
    load_thresholds,
    save_baseline,
)
from edgekit.check.verdict import Row, Verdict, compare

__all__ = [
    "DEFAULT_N",
    "SCHEMA",
    "CheckConfig",
    "RuntimePrecision",
    "check_bundle",
    "demo_check",
    "eval_rows",
    "gate_runtimes",
    "parse_variant",
    "ShadowRecorder",
    "accumulator_for",
    "load_metric_hook",
    "quality_drops",
    "DEFAULTS",
    "QUALITY_DROP_DEFAULTS",
    "Baseline",
    "Rule",
    "Thresholds",
    "default_thresholds",
    "load_baseline",
    "load_thresholds",
    "save_baseline",
    "Row",
    "Verdict",
    "compare",
    "junit_xml",
    "write_junit",
]
