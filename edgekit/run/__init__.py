"""`edgekit run`: decode a bundle's model once on a runtime (``stage``), write the outputs
(``outputs``), pick a flow decode that fits a latency budget (``budget``); ``render``: the console
tables."""

from edgekit.run.budget import (
    Plan,
    QualityConfig,
    choose,
    measure_flow_quality,
    per_nfe_latency_ms,
    plan_for_budget,
    plan_for_request,
)
from edgekit.run.outputs import save_outputs
from edgekit.run.render import budget_doc, print_plan, print_run
from edgekit.run.stage import RunRequest, run_bundle

__all__ = [
    "Plan",
    "QualityConfig",
    "RunRequest",
    "choose",
    "measure_flow_quality",
    "per_nfe_latency_ms",
    "plan_for_budget",
    "plan_for_request",
    "budget_doc",
    "print_plan",
    "print_run",
    "run_bundle",
    "save_outputs",
]
