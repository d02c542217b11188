"""The ``qnn`` quantization profile: full-integer QDQ for Qualcomm's HTP (Hexagon NPU), mixed
8/16-bit activations, the budget measured on the HTP backend itself.

An NPU has no float fallback, so every op is quantized (LayerNorm, Softmax, GELU, the attention
core, the flow time embedding too) with onnxruntime's QNN rules
(``quantization.execution_providers.qnn.get_qnn_qdq_config``: uint8 activations; MatMul weights
int8 per output channel, other constants uint8 per tensor). A flow model's time angle and its
frequency table are 16-bit by rule (``qnn.graph.time_angle_tensors``). Instead of falling back
to float, the most sensitive tensors are promoted to uint16 (tensor quant overrides; ORT inserts
the 8<->16-bit converts): ranked once by how much each one alone at 8 bit moves the network's
outputs (``sensitivity.output_sensitivity`` on recorded decode feeds, per step bucket), ordered
by that noise per activation the promotion puts at 16 bit, ties included
(``qnn.graph.promotion_ties``), then promoted in the smallest count of that order that holds the
budget, searched on the CPU EP's QDQ simulation from the count the ranking predicts, within
``qnn.search.SearchBounds``, and **decided on the HTP backend** (``runtimes.qnn``; x86 emulation
here, ~50x the simulation per forward, so it decodes only the count the search settles on, on
two sessions at once): the simulation is not the NPU's arithmetic everywhere (masked demo,
8-bit: top-1 0.908 on CPU vs 0.875 on the HTP backend), so each candidate is checked on one
recorded call per step bucket first, and the graph avoids what the HTP computes unlike QDQ
(``qnn.graph.with_tanh_outputs``).

    prepare (qnn_preprocess_model) -> [the shared pipeline: FP32 trajectories and held-out set] ->
    all-8-bit model -> forced set judged on the simulation -> rank by output sensitivity ->
    the count searched on the simulation -> decided on the HTP backend -> promotions and 8-bit
    share in the summary

``QnnProfile`` holds these hooks, run by ``stage.quantize_bundle`` as the cpu and trt profiles' are.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from edgekit._sidefiles import model_bytes
from edgekit.errors import EdgekitError
from edgekit.quantize.buckets.state import BucketState
from edgekit.quantize.context import QuantizeRun
from edgekit.quantize.graph import analyse_graph
from edgekit.quantize.hooks import PlanExtras, SearchResult
from edgekit.quantize.names import Lineage, module_labels
from edgekit.quantize.overrides import tensor_overrides
from edgekit.quantize.plan import Eta
from edgekit.quantize.qnn.graph import (
    GraphFacts,
    activation_tensors,
    prepare_qnn,
    producer_labels,
    promotion_ties,
    quantize_qnn_model,
    time_angle_tensors,
)
from edgekit.quantize.qnn.refusals import disagreeing, refuse
from edgekit.quantize.qnn.search import Promotion, SearchBounds, needed_gain_db, promote, tensors_in
from edgekit.quantize.qnn.sensitivity import (
    RANK_FEEDS_PER_FEED,
    Sensitivity,
    bucket_promotion_order,
    output_sensitivity_per_graph,
    predicted_count,
    predicted_gains_db,
    price_line,
    promotion_order,
    ranking_calls,
    ranking_workers,
    spread,
    step_weights,
)
from edgekit.quantize.qnn.summary import search_result
from edgekit.runtimes.base import Runtime
from edgekit.runtimes.ort import OrtOptions, OrtRuntime
from edgekit.runtimes.qnn import QnnOptions, QnnRuntime, emulated, qnn_options_for
from edgekit.spec import KIND_IO
from edgekit.targets import load_target

# ``--step-buckets auto`` goes on to 8 here (``buckets.ranges.AUTO_COUNTS`` stops at 4): where no
# count meets the budget, the search keeps the best margin, and every 16-bit promotion after it
# costs the NPU time at every call, where a bucket costs only its scales (the weights are one
# set). On the flow demo (8 ODE steps), the CPU simulation met the budget with 88 activations at
# 16 bit with 8 buckets, against 128 on the HTP backend with 4. The cpu profile stops at 4: there
# each bucket is one more session or compiled model, whose memory counts against the 1.2x bound.
AUTO_COUNTS_QNN: tuple[int, ...] = (1, 2, 4, 8)


class QnnProfile:
    """Hooks of the qnn profile for one quantize run: full-integer QDQ by the QNN rules, the most
    sensitive tensors promoted to 16 bit until the budget holds on the HTP backend."""

    def __init__(self, run: QuantizeRun):
        self.run = run
        # The HTP the budget is measured on: the --target's SoC (htp_arch, soc_model), else the default.
        self.htp = qnn_options_for(load_target(run.cfg.target), "int8") if run.cfg.target else QnnOptions()
        self.builds = iter(range(10**6))
        self.tensors: list[str] = []  # activation tensors of the all-8-bit model
        self.weights: list[str] = []  # MatMul weights and Gather tables (promotable to 16 bit)
        self.labels: dict[str, str] = {}
        self.forced: list[str] = []  # at 16 bit from the start: by rule and by --overrides
        self.by_rule: dict[str, str] = {}  # tensor at 16 bit by rule -> why ("rule: time angle", "rule: logits")
        self.facts = GraphFacts({}, {}, (), frozenset())  # the prepared graph's, read in prepare()
        self.built: dict[tuple[Any, ...], Path] = {}  # (promoted, buckets) -> the candidate build() wrote
        self.refused: list[dict[str, Any]] = []  # promotions the HTP backend computes unlike its simulation
        self.refused_like: list[dict[str, Any]] = []  # left at 8 bit with one of those: its kind, its ties
        self.ties: Mapping[str, frozenset[str]] = {}  # what each promotion takes to 16 bit with it
        self.base_gaps: dict[Any, dict[int, float]] = {}  # the HTP's gap below QDQ with no promotion, per forced set
        self.base_gap_db: float | None = None  # where that gap was over refusals.HTP_AGREE_DB
        self.ranked_calls: list[int] = []  # recorded calls the ranking ran, per step bucket
        self.rank_price: dict[str, Any] = {}  # the ranking's forwards and one forward's time, as said
        self.buckets = BucketState(run, auto=AUTO_COUNTS_QNN)
        self.bounds = SearchBounds()  # what the promotion search may spend (qnn.search)
        self.clock: Callable[[], float] = time.perf_counter
        self.simulated: dict[Path, tuple[bool, dict[str, Any], list[dict[str, Any]]]] = {}  # by candidate

    def check(self) -> None:
        if any(o.get("node") for o in self.run.cfg.overrides):
            raise EdgekitError(
                "node overrides (float, weight-only) do not apply to --profile qnn: the NPU has no float fallback",
                hint='the qnn profile takes tensor overrides: {"tensor": NAME, "action": "int16"}',
            )
        if self.run.cfg.exclude:
            raise EdgekitError(
                "--exclude does not apply to --profile qnn: the NPU has no float fallback",
                hint="the profile promotes sensitive tensors to 16 bit instead; drop --exclude",
            )

    def prepare(self) -> None:
        run = self.run
        run.say("prepare graph (qnn_preprocess_model)")
        run.prepared = prepare_qnn(run.fp32_path, run.tmp / "prepared.onnx")
        run.preprocess = {"applied": True, "skipped_because": None, "tool": "qnn_preprocess_model + Gemm as MatMul"}
        self.labels = module_labels(run.fp32_path)
        self.facts = GraphFacts.read(run.prepared)
        run.plan = analyse_graph(run.prepared, None, lineage=Lineage.read(run.fp32_path, run.prepared))

    def calibrate(self) -> None:
        pass  # get_qnn_qdq_config calibrates every build from the reader

    def plan_extras(self) -> PlanExtras:
        return PlanExtras()  # no fallbacks' form to choose, no second set of ranges

    def budget_runtime(self, model: Path, spin: bool = True, bucket: bool = False) -> Runtime:
        """One graph on the HTP backend (its threads do not spin: ``spin`` and ``bucket`` change nothing)."""
        return QnnRuntime(model, self.htp, threads=self.run.cfg.threads)

    def build(self, promoted: Sequence[Promotion]) -> Path:
        """The QDQ model by the QNN rules with ``promoted`` at 16 bit (one graph per step bucket,
        each calibrated on its bucket's calls; the first is returned). A promotion is a tensor (at
        16 bit in every bucket) or (bucket, tensor) (in that bucket's graph only). A set built before with the
        same buckets is not built again: the search asks for the same candidate more than once
        (the bucket choice and the first HTP decode; the CPU search, the HTP check and the HTP
        decode)."""
        key = (tuple(promoted), self.buckets.current)
        if key not in self.built:
            self.built[key] = self._build(promoted)
        return self.built[key]

    def _build(self, promoted: Sequence[Promotion]) -> Path:
        every_activation = bool(self.tensors) and set(self.tensors) <= {p for p in promoted if isinstance(p, str)}

        def one(bucket: int, reader: Any) -> Path:
            out = self.run.tmp / f"qnn-{next(self.builds)}.onnx"
            mine = list(dict.fromkeys(tensors_in(promoted, bucket)))
            return quantize_qnn_model(
                self.run.prepared,
                out,
                reader,
                mine,
                self.run.cfg.calibrator,
                every_activation,
                per_channel=self.run.cfg.settings.per_channel,
                facts=self.facts,
            )

        return self.buckets.graphs(one)

    def open_candidate(self, model: Path, spin: bool | None = None) -> Runtime:
        """The runtime that decodes candidate ``model`` on the HTP backend (every bucket's graph behind one)."""
        return self.buckets.open(model, self.budget_runtime)

    def open_simulation(self, model: Path) -> Runtime:
        """Candidate ``model`` on the CPU EP's QDQ simulation, which narrows the search (the HTP decides).

        The simulation runs with basic graph optimization only: every Q/DQ pair as written, the
        ops between them in float. ORT's QDQ fusions would run int8 CPU kernels instead, whose
        arithmetic is the host's: on x86 without VNNI u8 x s8 sums saturate, and a per-channel
        int8 MatMul simulated 2.2 dB below its QDQ semantics (30.7 dB; the HTP backend: 32.3)."""
        options = OrtOptions(intra_op_threads=self.run.cfg.threads, graph_optimization="basic")
        return self.buckets.open(model, lambda p: OrtRuntime(p, options))

    def measure(
        self, model: Path, promoted: Sequence[Promotion], backend: str = "htp"
    ) -> tuple[bool, dict[str, Any], list[dict[str, Any]]]:
        """Decode the held-out set with ``model`` on the HTP backend, with check's gate (budget met
        means `check --candidate qnn:int8` passes: a flow model met snr_db at 33 dB while check's
        velocity SNR was 23 dB); or on the CPU EP's QDQ simulation, which only narrows the search."""
        run = self.run
        if backend != "htp" and model in self.simulated:  # the bucket choice decoded the forced set already
            return self.simulated[model]
        if backend == "htp":
            run.say(f"decode the held-out set on the HTP backend ({len(promoted)} tensor(s) at 16 bit)")
        with self.open_candidate(model) if backend == "htp" else self.open_simulation(model) as rt:
            lane = self.open_candidate(model) if backend == "htp" and self.htp_lanes() > 1 else None
            metrics = run.measure(rt, gate=backend == "htp", lane=lane)
        passed, rows = run.judge(metrics)
        run.history.append(
            {
                "backend": "qnn-htp" if backend == "htp" else "ort-cpu (search only)",
                "promoted": len(promoted),
                **{k: metrics.get(k) for k in run.budget},
                "passed": passed,
            }
        )
        if backend != "htp":
            self.simulated[model] = (passed, metrics, rows)
        return passed, metrics, rows

    def htp_lanes(self) -> int:
        """Sessions that decode one candidate on the HTP backend at once: 2 where the backend is
        x86 emulation (one thread per session; the flow demo's held-out decodes are ~50x the CPU
        simulation's) on a host of 2 cores or more, else 1 (a device has one NPU)."""
        return 2 if emulated() and (os.cpu_count() or 1) >= 2 else 1

    def search(self) -> SearchResult:
        run = self.run
        run.say("quantize every op: 8-bit activations and weights (QNN rules)")
        eight_bit = self.build(())
        self.tensors = activation_tensors(eight_bit)
        # Promotable constants: MatMul weights, and Gather tables (embeddings; the HTP gathers at 16 bit).
        self.weights = [*self.facts.matmul_weights, *self.facts.gather_tables]
        self.by_rule = self._by_rule()
        self.forced = list(dict.fromkeys([*self.by_rule, *self._forced()]))
        known = producer_labels(run.prepared, self.labels)  # tensors of the float graph (the QDQ one renames outputs)
        self.buckets.measure_drift([t for t in self.tensors if t in known])
        # Chosen on the CPU EP's QDQ simulation (cheap); the HTP backend then measures that count.
        self.buckets.choose(
            lambda: self.build(self.forced),
            lambda m: self.measure(m, self.forced, backend="cpu")[1],
            note="ort-cpu (search only)",
        )
        # The simulation judges the forced set first (the bucket choice decoded it already): the
        # HTP backend decodes only the count the search settles on (``qnn.search.promote``), or
        # the forced set where the simulation passed it (it does not measure check's margin).
        start = self.measure(self.build(self.forced), self.forced, backend="cpu")
        decided = None
        if start[0] or not run.cfg.fallback:
            model = self.build(self.forced)
            decided = self.measure(model, self.forced)
            if decided[0] or not run.cfg.fallback:
                return search_result(self, model, list(self.forced), {}, *decided)
        ranking: dict[Promotion, float] = {}
        order: list[Promotion] = []
        noise: Sequence[Mapping[str, float]]
        guess = None
        if run.cfg.fallback:
            parts = self.rank(eight_bit)
            ties = self.ties = promotion_ties(run.prepared, self.tensors, self.facts)
            if len(parts) == 1:
                ranking = {t: db for t, db in parts[0].snr_db().items()}  # dict() would make it dict[str, float]
                order = list(promotion_order(parts[0].noise, ties, self.tensors, self.forced))
                noise, weight = [parts[0].noise], [1.0]
            else:
                ranking = {(b, t): v for b, part in enumerate(parts) for t, v in part.snr_db().items()}
                noise, weight, share = self.bucket_noise(parts)
                order = list(bucket_promotion_order(noise, weight, share, ties, self.tensors, self.forced))
            guess = self.first_guess(predicted_gains_db(noise, weight, ties, order, self.forced), start[1])
        model, promoted, passed, metrics, rows = self.promote(order, start[:2], guess, decided)
        return search_result(self, model, promoted, ranking, passed, metrics, rows)

    def first_guess(self, gains: Sequence[float], start: Mapping[str, Any]) -> int | None:
        """The count the search tries first: where the ranking's predicted gain (dB off the outputs'
        noise, ``sensitivity.predicted_gains_db``) covers what the simulation's metrics of the
        forced set still need (``qnn.search.needed_gain_db``: flow's ``snr_db`` and ground-truth
        drop); None (galloping from 1) for token kinds. A flow decode's output error is the sum
        of its steps' velocity errors times their step sizes (``step_weights``), so it moves in
        dB as the weighted noise does."""
        needed = needed_gain_db(start, self.run.budget)
        if needed is None:
            return None
        count = predicted_count(gains, needed)
        self.run.say(
            f"the ranking predicts the budget from {count} promotion(s) ({needed:.1f} dB to gain): "
            "the search starts there"
        )
        return count

    def bucket_noise(self, parts: Sequence[Sensitivity]) -> tuple[list[dict[str, float]], list[float], list[float]]:
        """(noise, weight, share) per step bucket for ``sensitivity.bucket_promotion_order``:
        each bucket's noise per ranked call, weighted by its calls' weight in the decode's result
        (``step_weights``: a flow step's size squared) and costed by its share of the calls.

        One set for every bucket spent 16-bit activations where they do not pay: the flow demo's
        first steps (t < 0.08) are integrated over steps of 0.038 against 0.19 for the last, so
        their output error reaches the result 25x weaker in power. Predicted from the ranking (8
        buckets, 16 calls), the weighted noise that one set reached with 88 activations at 16 bit
        takes 64 on average per call by bucket."""
        run = self.run
        calls = run.traj.calls
        weights = step_weights(run.kind, [c.position for c in calls])
        by_bucket = self.buckets.calls_by_bucket(self.buckets.in_use())
        count = [len(mine) for mine in by_bucket]
        share = [c / max(len(calls), 1) for c in count]
        weight = [float(np.mean([weights[i] for i in mine])) if mine else 0.0 for mine in by_bucket]
        noise = [{t: v / max(self.ranked_calls[b], 1) for t, v in part.noise.items()} for b, part in enumerate(parts)]
        return noise, [w * c for w, c in zip(weight, count)], share

    def _by_rule(self) -> dict[str, str]:
        """{tensor at 16 bit by rule: why}: a flow model's time angle
        (``time_angle_tensors``); a masked or AR model's logits output. The decode's decisions
        are read off the logits (argmax, top-k, the confidence ranking), and at 8 bit their step,
        1/255 of the range, flips near-ties that no SQNR ranking sees (the logits' energy is in
        the large entries). On the 20,000-step masked demo, all 8-bit on the HTP backend: top-1
        agreement 0.879 (check's floor 0.90) and logits KL over check's limit; the search then
        promoted 47, 94, 171 tensors without meeting the budget, since the logits (a graph
        output, renamed in the QDQ graph) could not be promoted at all. The logits alone at 16
        bit: top-1 0.904, lockstep 0.953, 151 of 152 activations at 8 bit."""
        quantized = set(self.tensors) | self.facts.floats
        if self.run.kind == "flow":
            return {
                t: "rule: time angle"
                for t in time_angle_tensors(self.run.prepared, KIND_IO["flow"][0][1])
                if t in quantized
            }
        logits = KIND_IO[self.run.kind][1][0]  # "logits", the first output of the masked and ar contracts
        return {logits: "rule: logits"} if logits in quantized else {}

    def _forced(self) -> list[str]:
        """Tensors an override puts at 16 bit from the start (``--overrides``, ``debug --fix``)."""
        known = set(self.tensors) | set(self.weights)
        forced = tensor_overrides(self.run.cfg.overrides)
        unknown = [t for t in forced if t not in known]
        if unknown:
            raise EdgekitError(
                f"override tensor {unknown[0]!r} is not an activation or MatMul weight of this graph",
                hint="re-run `edgekit debug BUNDLE --fix` on this bundle, or fix the file",
            )
        return forced

    def rank(self, eight_bit: Path) -> list[Sensitivity]:
        """Each activation's, MatMul weight's and Gather table's output noise alone at 8 bit
        (``sensitivity.output_sensitivity_per_graph``; by own SQNR the flow demo's residual sums
        ranked among the last), one ``Sensitivity`` per step bucket (one when one scale), on that
        bucket's all-8-bit graph and recorded feeds: ``sensitivity.ranking_calls`` of them, spread
        over the loop, split evenly between the buckets (``ranked_calls``: how many each got)."""
        run = self.run
        graph = eight_bit if self.buckets.current is None else self.build(())
        buckets = self.buckets.for_model(graph)
        feeds = run.traj.feeds
        ranked = len(self.tensors) + len(self.weights)
        n = ranking_calls(ranked, RANK_FEEDS_PER_FEED * run.cfg.sensitivity_feeds, len(feeds))
        if buckets is None:
            groups = [(graph, [feeds[i] for i in spread(range(len(feeds)), n)])]
        else:
            groups = [
                (path, [feeds[i] for i in spread(mine, min(len(mine), -(-n // buckets.n)))])
                for path, mine in zip(self.buckets.paths(graph), self.buckets.calls_by_bucket(buckets))
            ]
        self.ranked_calls = [len(g[1]) for g in groups]
        total = sum(self.ranked_calls)
        run.say(f"rank {ranked} tensors by their effect on the outputs ({total} recorded calls)")
        workers, threads = ranking_workers(model_bytes(run.prepared), run.cfg.threads, os.cpu_count())

        def price(seconds: float) -> None:  # said before the first candidate runs
            self.rank_price = {"forwards": (ranked + 1) * total, "sessions": workers, "forward_s": round(seconds, 4)}
            run.say(price_line(ranked, total, workers, seconds))

        with run.timed("rank_s"):
            return output_sensitivity_per_graph(
                run.prepared,
                groups,
                [*self.tensors, *self.weights],
                threads,
                workers=workers,
                each_feed=Eta("rank: recorded call", total, run.say),
                first_forward=price,
            )

    def promote(
        self,
        order: Sequence[Promotion],
        start: tuple[bool, dict[str, Any]],
        guess: int | None = None,
        decided: tuple[bool, dict[str, Any], list[dict[str, Any]]] | None = None,
    ):
        """``qnn.search.promote``: the smallest prefix of ``order`` that holds the budget, within
        ``self.bounds`` on ``self.clock``."""
        return promote(self, order, start, guess, self.bounds, self.clock, decided)

    def disagreeing(self, forced: list[Promotion], candidates: Sequence[Promotion]) -> tuple[Promotion, float] | None:
        """``qnn.refusals.disagreeing``: the first candidate the HTP backend computes unlike its simulation."""
        return disagreeing(self, forced, candidates)

    def refuse(self, bad: tuple[Promotion, float], order: list[Promotion]) -> list[Promotion]:
        """``qnn.refusals.refuse``: ``order`` without ``bad``'s tensor and what goes with it."""
        return refuse(self, bad, order)
