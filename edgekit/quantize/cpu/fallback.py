"""The ``cpu`` and ``trt`` profiles' hooks: ORT's QDQ quantizer on the weighted ops, and a budget
search that moves the most sensitive layers out of INT8 until the budget holds. What differs
between the two is their registry entries (``quantize/profiles.py``): settings, and the flags
read here (``cpu_arithmetic``, ``bucket_memory``, ``graph_rules``).

    prepare (quant_pre_process) -> analyse + select nodes -> calibrate once (cached ranges) ->
    quantize -> decode the held-out set -> budget? else rank by sensitivity and fall back ->
    (cpu_arithmetic) the fallback form (cpu/form.py) -> structure, range drift

A fallback leaves INT8 for plain FP32 on the cpu profile, then takes the form ``cpu/form.py``
chooses on this host: weight-only (INT8 weight + DQ, float compute: the smaller) unless it is
surely slower than FP32 or misses the budget (then weight-only with the next ranked layer or two
is tried before FP32 stays). The trt profile keeps weight-only fallbacks:
TensorRT folds the DQ into the layer at build time, and the INT8 file stays at ~0.3x the FP32 one.
"""

from __future__ import annotations

from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any

import numpy as np

from edgekit._sidefiles import model_bytes
from edgekit.arithmetic import SCHEMES
from edgekit.errors import EdgekitError
from edgekit.host import ISA_CLASSES, HostFacts
from edgekit.quantize.buckets.candidate import open_graph
from edgekit.quantize.buckets.state import BucketState
from edgekit.quantize.calibrate import range_drift
from edgekit.quantize.calibrator import CallRanges
from edgekit.quantize.config import WEIGHTED_OPS
from edgekit.quantize.context import QuantizeRun
from edgekit.quantize.cpu.candidates import CandidateWriter
from edgekit.quantize.cpu.form import FORM_EXTRA, choose_form
from edgekit.quantize.cpu.method import alternative_skipped, calibrate_live, choose_method, keeps_tails, tails_for
from edgekit.quantize.cpu.ptq import calibrate, prepare_model, supports_calibration_cache
from edgekit.quantize.cpu.search import (
    LARGE_BYTES,
    PATIENCE_LARGE,
    BudgetOutcome,
    fallback_until_within_budget,
    noisiest_first,
    rank_by_sensitivity,
    screen,
)
from edgekit.quantize.cpu.select import select_nodes, select_tables, weight_only_by_rule
from edgekit.quantize.cpu.sensitivity import isolated_output_sqnr, node_sensitivity
from edgekit.quantize.cpu.structure import qdq_structure
from edgekit.quantize.cpu.tables import tables_record
from edgekit.quantize.graph import analyse_graph
from edgekit.quantize.hooks import PlanExtras, SearchResult
from edgekit.quantize.names import Lineage
from edgekit.quantize.plan import Eta
from edgekit.quantize.ranges import LiveRanges, live_ranges
from edgekit.quantize.result import notable_float_ops
from edgekit.runtimes.base import Runtime
from edgekit.spec import KIND_IO

# At most this many weight-only fallbacks escalate to fully float (each re-runs the fallback loop,
# sensitivity ranking included: ~1 min on the flow demo).
MAX_FULL_FLOAT = 3


class FallbackProfile:
    """Hooks of the cpu and trt profiles for one quantize run."""

    def __init__(self, run: QuantizeRun):
        self.run = run
        self.selected: list[str] = []
        self.floated: dict[str, str] = {}
        self.tables: list[str] = []
        self.float_tables: dict[str, str] = {}
        self.cache: Path | None = None
        self.builds = iter(range(10**6))
        self.full_float: list[str] = []  # fallbacks whose weight-only form was not enough
        self.buckets = BucketState(run)
        self.method_choice: dict[str, Any] | None = None  # --method auto's record (cpu/method.py)

    def check(self) -> None:
        pass

    def prepare(self) -> None:
        run = self.run
        prepared, skipped, how = prepare_model(run.fp32_path, run.tmp / "prepared.onnx", run.cfg.preprocess)
        if skipped is None:  # over 2 GiB the same optimization runs from files (cpu/optimize.py)
            run.say(
                "prepared the graph with "
                + (
                    "ORT's graph optimization from files (over 2 GiB)"
                    if how == "ort-optimization"
                    else "quant_pre_process"
                )
            )
        elif how == "ort-optimization":  # the one warning line: what failed, and what ran instead
            run.warn(f"{skipped}: prepared the graph with ORT's graph optimization alone (no symbolic shapes)")
        elif run.cfg.preprocess:
            run.warn(f"{skipped}: quantizing without pre-processing (MatMul+Add stay unfused; INT8 may run slower)")
        run.prepared = prepared
        run.preprocess = {"applied": how != "none", "skipped_because": skipped, "how": how}
        time_input = KIND_IO["flow"][0][1] if run.kind == "flow" else None
        run.plan = analyse_graph(prepared, time_input, lineage=Lineage.read(run.fp32_path, prepared))
        self.selected, self.floated = select_nodes(run.plan, run.cfg)
        # Embedding tables int8 in every candidate, so the budget judges the model as written.
        self.tables, self.float_tables = select_tables(run.plan, run.cfg)

        def path(prefix: str) -> Path:
            return run.tmp / f"{prefix}-{next(self.builds)}.onnx"

        self.writer = CandidateWriter(prepared, run.cfg, run.plan, self.selected, path, tables=self.tables)
        if not self.selected:
            ops = "/".join(run.cfg.op_types)
            raise EdgekitError(
                f"nothing to quantize in {run.bundle.name}: every {ops} node is excluded or kept float",
                hint="drop some --exclude values",
            )

    def calibration_runtime(self) -> AbstractContextManager[LiveRanges] | None:
        """Where the FP32 calibration decodes may gather the minmax ranges as they run (``ranges.
        LiveRanges``: the prepared graph with its taps), so ``calibrate`` replays no call; None where
        the ranges come another way (histogram methods, step buckets' own, no calibration cache)."""
        run, cfg = self.run, self.run.cfg
        if cfg.calibrator not in ("minmax", "percentile") or cfg.step_buckets is not None:
            return None
        if not supports_calibration_cache():
            return None
        return live_ranges(
            run.prepared,
            cfg.op_types,
            cfg.settings.quantized_outputs,
            run.bundle.inputs,
            run.bundle.outputs,
            cfg.threads,
            tails_for(run),  # the percentile ranges' largest |x|, where they may follow
        )

    def calibrate(self) -> None:
        run = self.run
        self.cache = run.tmp / "calibration.json"
        if run.live_ranges is not None:  # gathered during the FP32 calibration decodes
            calibrate_live(run, self.cache)
        else:
            run.say(f"calibrate ({run.cfg.calibrator}) on {len(run.traj.feeds)} recorded network calls")
            run.call_ranges = CallRanges()
            passes = 1 if run.cfg.calibrator == "minmax" else 2  # histograms: the range first, then the counts
            eta = Eta(f"calibrate ({run.cfg.calibrator}): recorded call", passes * len(run.traj.feeds), run.say)
            calibrate(run.prepared, run.reader, run.cfg, self.cache, run.call_ranges, each=eta)
        by_name = run.plan.by_name()
        self.buckets.measure_drift(sorted({a for n in self.selected for a in by_name[n].activations}))

    def budget_runtime(self, model: Path, spin: bool = True, bucket: bool = False) -> Runtime:
        """The runtime that decodes an INT8 candidate for the budget (``cfg.runtime``; how each graph
        opens: ``buckets.candidate.open_graph``)."""
        return open_graph(self.run.cfg.runtime, model, self.run.cfg.threads, spin, bucket)

    # ---- one candidate -------------------------------------------------------------------------
    def build(self, nodes: list[str], weight_only_fallback: bool | None = None) -> Path:
        """The QDQ model with exactly ``nodes`` in INT8; the other selected nodes are budget
        fallbacks, weight-only or fully float as the profile (or ``weight_only_fallback``) says.
        With step buckets: one graph per bucket (the first is returned; ``buckets.paths`` has all)."""
        run, s = self.run, self.run.cfg.settings
        wo_fallback = s.weight_only_fallback if weight_only_fallback is None else weight_only_fallback
        wo = weight_only_by_rule(self.floated, run.cfg) + (
            [n for n in self.selected if n not in self.full_float] if wo_fallback else []
        )
        current = self.buckets.current
        tag = "" if current is None else "-".join(f"{b:.6g}" for b in current.boundaries)

        def one(bucket: int, reader: Any) -> Path:
            # Each bucket's ranges are computed once (ORT saves them where the cache is missing).
            cache = self.cache if current is None else run.tmp / f"calibration-{abs(hash(tag))}-{bucket}.json"
            return self.writer.write(nodes, wo, reader, cache, scales=(tag, bucket))

        return self.buckets.graphs(one)

    def open_candidate(self, model: Path, spin: bool | None = None) -> Runtime:
        """The runtime that decodes candidate ``model`` for the budget (its bucket graphs behind one).
        ``spin`` None: as deployed (a one-graph model's threads spin between runs too; bucket
        sessions, which take turns, inside runs only); False: inside runs only (timed side by side
        with another session: TIMED_SPIN, quantize/speed.py)."""
        single = len(self.buckets.paths(model)) == 1
        return self.buckets.open(
            model, lambda path: self.budget_runtime(path, spin=spin is not False, bucket=not single)
        )

    def measure(self, model: Path, watch: Any = None) -> dict[str, Any]:
        """``run.measure`` of ``model``; ``watch``: an ``early_stop.SnrWatch`` (``run.snr_watch``)."""
        with self.open_candidate(model) as rt:
            return self.run.measure(rt, watch=watch)

    def sensitivity(self, model: Path, nodes: list[str]) -> dict[str, dict[str, float]]:
        run = self.run
        feeds = run.traj.feeds
        pick = np.linspace(0, len(feeds) - 1, min(run.cfg.sensitivity_feeds, len(feeds))).round().astype(int)
        chosen = [feeds[i] for i in sorted(set(pick.tolist()))]
        by_name = run.plan.by_name()
        # Ranked on one scale: a heuristic, cheaper N times over.
        current, self.buckets.current = self.buckets.current, None
        try:
            single = self.build(nodes) if current is not None else model
            scores = node_sensitivity(
                run.prepared,
                single,
                chosen,
                {n: by_name[n] for n in nodes},
                each=Eta("noise each node adds: graph run", 2 * len(chosen), run.say),
            )
            suspects = screen(scores, nodes, model_bytes(run.fp32_path))
            if len(suspects) < len(nodes):
                run.say(
                    f"screened {len(nodes)} nodes by the noise each adds (whole tensors and per row, one pass): "
                    f"the {len(suspects)} noisiest are measured one at a time"
                )
            alone = isolated_output_sqnr(
                run.prepared,
                self.build,
                noisiest_first(scores, suspects),
                chosen,
                KIND_IO[run.kind][1][0],
                each=Eta("output SQNR with one node INT8: node", len(suspects), run.say),
                race=model_bytes(run.fp32_path) > LARGE_BYTES,  # each one-node model a session of it all
            )
        finally:
            self.buckets.current = current
        return {n: scores.get(n, {}) | alone.get(n, {}) for n in nodes}

    # ---- the search ----------------------------------------------------------------------------
    def plan_extras(self) -> PlanExtras:
        cfg = self.run.cfg  # search() runs the form choice where cpu_arithmetic and a fallback
        return PlanExtras(
            form=FORM_EXTRA if cfg.entry.cpu_arithmetic and cfg.fallback else 0,
            method_alternative=alternative_skipped(cfg, buckets=cfg.step_buckets not in (None, 1)) is None,
            percentile_pass=not keeps_tails(cfg),
        )

    def _loop(self, first: tuple[Path, dict[str, Any]] | None = None) -> tuple[Path, BudgetOutcome]:
        run, s = self.run, self.run.cfg.settings
        labels = {n.name: n.label for n in run.plan.nodes}
        return fallback_until_within_budget(
            self.selected,
            run.budget,
            self.build,
            self.measure,
            self.sensitivity,
            enabled=run.cfg.fallback,
            max_fallback=run.cfg.max_fallback,
            # A model over LARGE_BYTES stops when fallbacks stop helping, unless the user bounded it.
            patience=PATIENCE_LARGE
            if run.cfg.max_fallback is None and model_bytes(run.fp32_path) > LARGE_BYTES
            else None,
            labels=labels,
            progress=run.say,
            fallback_to="weight-only" if s.weight_only_fallback else "float",
            first=first,
        )

    def search(self) -> SearchResult:
        run, s = self.run, self.run.cfg.settings
        # bucket_memory (cpu): every bucket is one more session (ORT) or compiled model (OpenVINO)
        # in memory, and auto is bounded by what they add on the budget runtime (--bucket-memory).
        # trt deploys TensorRT plans, whose memory the budget runtime (ORT) does not show: no bound.
        weighed = run.cfg.runtime if run.cfg.entry.bucket_memory else None
        self.buckets.choose(lambda: self.build(self.selected), self.measure, memory=weighed)
        n = 1 if self.buckets.current is None else self.buckets.current.n
        run.say(
            f"quantize {len(self.selected)} nodes ({run.cfg.profile} profile{', ' + s.scheme if s.scheme else ''}, "
            f"{run.cfg.calibrator}{f', {n} step buckets' if n > 1 else ''}) and decode the held-out set in INT8"
        )
        judged, self.method_choice = choose_method(self)
        if judged is None and run.cfg.fallback and run.cfg.max_fallback != 0:
            # Judged as --method auto judges its candidates: a hopeless all-INT8 model stops its
            # held-out decode early (Sana-600M --method percentile: 16 rows where 4 told).
            all_int8 = self.build(self.selected)
            judged = (all_int8, self.measure(all_int8, watch=run.snr_watch()))
        model, outcome = self._loop(judged)
        escalated: dict[str, str] = {}
        # Weight-only fallbacks cannot remove weight-quantization noise: when the loop ran out with
        # the budget still failing, the first (most sensitive) fallback goes fully float and the
        # loop runs again (flow demo, batch 2: every node weight-only still lost > 1 dB).
        while (
            not outcome.passed
            and run.cfg.fallback
            and s.weight_only_fallback
            and outcome.fallback
            and len(self.full_float) < MAX_FULL_FLOAT
        ):
            first = next((f for f in outcome.fallback if f["node"] not in self.full_float), None)
            if first is None:
                break
            self.full_float.append(first["node"])
            escalated[first["node"]] = first["reason"] + "; weight-only was not enough: fully float"
            run.say(
                f"budget still not met with weight-only fallbacks: {first['label']} -> fully float, fall back again"
            )
            model, outcome = self._loop()
        outcome.fallback = [
            f | {"reason": escalated[f["node"]]} if f["node"] in escalated else f for f in outcome.fallback
        ]
        form = self.choose_fallback_form(model, outcome) if run.cfg.entry.cpu_arithmetic and outcome.fallback else None
        if form is not None and form["chosen"] == "weight-only":
            model = form.pop("model")
        return self.result(model, outcome, form)

    def choose_fallback_form(self, model: Path, outcome: BudgetOutcome) -> dict[str, Any]:
        """The ``fallback_form`` record (``cpu.form.choose_form``) for FP32 fallbacks ``model``."""
        return choose_form(self, model, outcome)

    # ---- what it made --------------------------------------------------------------------------
    def result(self, model: Path, outcome: BudgetOutcome, form: dict[str, Any] | None) -> SearchResult:
        run, cfg = self.run, self.run.cfg
        structure = qdq_structure(model)
        rules = cfg.entry.graph_rules
        violations = rules(model) if rules is not None else []
        if violations:  # a profile that breaks its own rules is a bug here, not a user error
            raise RuntimeError(f"{cfg.profile} profile produced a graph its rules reject: {violations[:3]}")
        by_name = run.plan.by_name()
        # What ORT really quantized of what was asked (Conv outputs' consumers also read a DQ).
        int8 = sorted(set(outcome.quantized) & set(structure["quantized_nodes"]))
        weight_only = set(structure["weight_only_nodes"]) - set(int8)
        readers = {a: f"{by_name[n].label} input" for n in reversed(int8) for a in by_name[n].activations}
        tensors = sorted(readers)
        with run.timed("range_drift_s"):
            drift = range_drift(run.prepared, tensors, run.traj, cfg.threads, labels=readers, recorded=run.call_ranges)
        rows = self._float_rows(outcome, weight_only)
        total_mm, total_w = run.plan.matmul_flops(), run.plan.matmul_flops(ops=WEIGHTED_OPS)
        extras: dict[str, Any] = {}
        if cfg.entry.cpu_arithmetic:
            scheme = SCHEMES[cfg.settings.scheme]
            # validated_on: the class whose kernels decoded the budget (this host: run, check and
            # profile warn when they run the model on another class; lint checks a target's).
            extras["arithmetic"] = {
                "isa": cfg.arithmetic,
                "scheme": scheme.to_json(),
                "validated_on": HostFacts.detect().isa_class,
                "saturates_on": [c for c in ISA_CLASSES if scheme.saturates_on(c)],
            }
            extras["fallback_form"] = form or {"chosen": "none", "why": "no budget fallback"}
        extras["gather_tables"] = tables_record(run.plan, self.float_tables, model)
        extras["step_buckets"] = self.buckets.to_json(model)
        extras["candidates"] = self.writer.to_json()
        extras["method_choice"] = self.method_choice
        return SearchResult(
            model=model,
            passed=outcome.passed,
            metrics=outcome.metrics,
            checks=outcome.checks,
            int8_nodes=int8,
            float_rows=rows,
            fallback=outcome.fallback,
            sensitivity={n: outcome.ranking[n] for n in rank_by_sensitivity(outcome.ranking)[:10]},
            history=outcome.history,
            float_by_op_type=notable_float_ops(run),
            int8_flop_share={
                "matmul": run.plan.matmul_flops(int8) / total_mm if total_mm else None,
                "weighted": run.plan.matmul_flops(int8, ops=WEIGHTED_OPS) / total_w if total_w else None,
            },
            structure={
                "ops": structure["ops"],
                "qdq_nodes": len(structure["qdq"]),
                # the key keeps its name (the trt profile's rules) in the edgekit.quantize/1 document
                "trt_rules": "pass" if rules is not None else f"not checked ({cfg.profile} profile)",
            },
            drift=drift,
            tensors=tensors,
            cache=self.cache,
            budget_extra={"search_stopped": outcome.stopped} if outcome.stopped else {},
            extras=extras,
            bucket_models=self.buckets.paths(model),
        )

    def _float_rows(self, outcome: BudgetOutcome, weight_only: set[str]) -> list[dict[str, Any]]:
        by_name = self.run.plan.by_name()

        def row(name: str, reason: str, source: str) -> dict[str, Any]:
            # precision: "weight-only" = INT8 weight + DQ, float activations and compute; "float" = FP32.
            wo = name in weight_only
            return {
                "node": name,
                "label": by_name[name].label,
                "op": by_name[name].op_type,
                "source": source,
                "precision": "weight-only" if wo else "float",
                "reason": reason + ("; weights stored INT8, computed in float" if wo else ""),
            }

        def source(reason: str) -> str:
            return "user" if reason.startswith("excluded") else "override" if reason.startswith("override ") else "rule"

        return [row(n, r, source(r)) for n, r in self.floated.items()] + [
            row(f["node"], f["reason"], "budget") for f in outcome.fallback
        ]
