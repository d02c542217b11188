"""INT8 post-training quantization calibrated on decode trajectories, with an accuracy budget.

Built on ``onnxruntime.quantization`` (quant_pre_process, quantize_static in QDQ format, its
calibrators, qdq_loss_debug, write_calibration_table); importing this package imports neither
onnx nor onnxruntime.

    from edgekit.quantize import QuantizeConfig, quantize_bundle
    summary = quantize_bundle("bundles/masked", QuantizeConfig(profile="trt"))

A profile is one entry of ``registry`` (settings, budgets, hooks behind ``ProfileHooks``, what
it does); the built-in ones register in ``profiles``, which this package imports first.
"""

from __future__ import annotations

# ruff: noqa: I001 -- the built-in profiles register before anything reads the registry
from edgekit.quantize import profiles  # noqa: F401  (registers the built-in profiles)
from edgekit.arithmetic import PAIR_LIMIT, SCHEMES, arithmetic_for, host_warning
from edgekit.quantize.buckets.ranges import MAX_BUCKETS
from edgekit.quantize.config import (
    BUDGET_RULES,
    DEFAULT_BUDGETS,
    METHODS,
    QuantizeConfig,
    parse_budget,
)
from edgekit.quantize.memory import tensor_bytes
from edgekit.quantize.names import module_labels
from edgekit.quantize.taps import graph_without_weights
from edgekit.quantize.overrides import SCHEMA as OVERRIDES_SCHEMA
from edgekit.quantize.overrides import overrides_document
from edgekit.quantize.cpu.ptq import quantize_unbudgeted
from edgekit.quantize.hooks import ProfileHooks, SearchResult
from edgekit.quantize.registry import (
    ProfileSettings,
    QuantizeProfile,
    profile_help,
    quantize_profile,
    register_profile,
    unregister_profile,
)
from edgekit.quantize.registry import names as profile_names
from edgekit.quantize.stage import demo_quantize, quantize_bundle

__all__ = [
    "PAIR_LIMIT",
    "SCHEMES",
    "arithmetic_for",
    "host_warning",
    "BUDGET_RULES",
    "DEFAULT_BUDGETS",
    "MAX_BUCKETS",
    "METHODS",
    "OVERRIDES_SCHEMA",
    "ProfileHooks",
    "ProfileSettings",
    "QuantizeProfile",
    "SearchResult",
    "QuantizeConfig",
    "demo_quantize",
    "graph_without_weights",
    "module_labels",
    "overrides_document",
    "parse_budget",
    "profile_help",
    "profile_names",
    "quantize_bundle",
    "quantize_profile",
    "quantize_unbudgeted",
    "register_profile",
    "tensor_bytes",
    "unregister_profile",
]
