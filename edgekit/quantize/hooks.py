"""What a quantization profile plugs into the one pipeline (``stage.quantize_bundle``): the hooks
it makes for a run (``ProfileHooks``, one signature each) and what its search hands back
(``SearchResult``). A profile's registry entry (``registry.QuantizeProfile``) names the class
that makes its hooks."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from edgekit.quantize.calibrate import RangeDrift
from edgekit.runtimes.base import Runtime


class ProfileHooks(Protocol):
    """What the pipeline calls on one run's hooks (``QuantizeProfile.hooks(run)`` makes them), in
    this order: check, prepare, (FP32 decodes), calibrate, search, and ``open_candidate`` for
    the speed comparison. Everything the hooks share with the pipeline lives on the run
    (``context.QuantizeRun``). Optional, not declared here: ``calibration_runtime() ->
    AbstractContextManager[Runtime] | None``, the runtime the FP32 calibration decodes run on where
    it gathers the ranges as they run (``ranges.LiveRanges``; without it, or None, the FP32 model's
    session, and ``calibrate`` replays the recorded calls: ``stage.calibration_taps``)."""

    def check(self) -> None:
        """Refuse the options this profile cannot honour, before any work (an ``EdgekitError``)."""

    def prepare(self) -> None:
        """Write the graph it quantizes: ``run.prepared``, ``run.preprocess`` and ``run.plan``."""

    def calibrate(self) -> None:
        """Ranges over the FP32 trajectories (``run.traj``, ``run.reader``), where it keeps them."""

    def budget_runtime(self, model: Path, spin: bool = True, bucket: bool = False) -> Runtime:
        """One graph of a candidate, opened where the budget is measured. ``spin``: the runtime's
        threads may spin between runs; ``bucket``: one of several step-bucket graphs that take
        turns in one decode (a runtime without such threads ignores both)."""

    def open_candidate(self, model: Path, spin: bool | None = None) -> Runtime:
        """Candidate ``model`` (every step bucket's graph behind one runtime) on the budget runtime.
        ``spin`` None: as deployed; False: threads spin inside runs only (timed side by side)."""

    def plan_extras(self) -> PlanExtras:
        """What its search may run beyond the first candidate and the fallbacks, for the plan
        quantize states before it starts (``plan.Plan``), from the config alone. Optional: hooks
        without it add nothing to the plan (``stage.plan_extras``)."""

    def search(self) -> SearchResult:
        """Quantize, decode the held-out set (``run.measure``) and change what the budget needs
        until it holds: the chosen model and what the summary records."""


@dataclass(frozen=True)
class PlanExtras:
    """Work a profile's search may add to the plan (``ProfileHooks.plan_extras``)."""

    form: int = 0  # candidates the fallbacks' form may add (cpu/form.py), each one candidate's decodes
    method_alternative: bool = False  # --method auto may calibrate and judge a second set of ranges
    # that second set takes a pass over the calls (else: cut from what the calibration decodes kept)
    percentile_pass: bool = True


@dataclass
class SearchResult:
    """What a profile's search hands the pipeline: the chosen model and what the summary records."""

    model: Path  # the chosen INT8 graph (in the run's scratch folder)
    passed: bool
    metrics: dict[str, Any]
    checks: list[dict[str, Any]]
    int8_nodes: list[str]  # nodes computed in INT8 (activation and weight Q/DQ)
    # One row per node left out of INT8: {node, label, op, source (user|override|rule|budget), precision
    # ("weight-only" | "float"), reason}.
    float_rows: list[dict[str, Any]] = field(default_factory=list)
    fallback: list[dict[str, Any]] = field(default_factory=list)  # budget fallbacks in order, with why
    sensitivity: dict[str, dict[str, Any]] = field(default_factory=dict)  # the ten most sensitive, scores
    history: list[dict[str, Any]] = field(default_factory=list)
    int8_flop_share: dict[str, Any] = field(default_factory=dict)
    float_by_op_type: dict[str, int] = field(default_factory=dict)  # ops users ask about that stayed float
    structure: dict[str, Any] = field(default_factory=dict)
    drift: RangeDrift | None = None
    tensors: list[str] = field(default_factory=list)  # calibrated activation tensors (the TensorRT table's)
    cache: Path | None = None  # ORT's calibration cache, where the profile keeps one
    budget_extra: dict[str, Any] = field(default_factory=dict)  # e.g. measured_on
    extras: dict[str, Any] = field(
        default_factory=dict
    )  # profile keys: qnn, arithmetic, fallback_form, step_buckets, speed
    bucket_models: list[Path] = field(default_factory=list)  # step buckets: every bucket's graph (model first)
