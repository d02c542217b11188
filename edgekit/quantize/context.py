"""What every step of one quantize run shares, whatever the profile: the bundle and config, the
budget, the conditions, the FP32 trajectories and held-out reference, the scratch folder, the
clock, the warnings (which reach ``--json``), and ``measure``: one INT8 candidate decoded on the
held-out set and judged by the budget metrics and ``edgekit check``'s default gate."""

from __future__ import annotations

import contextlib
import shutil
import time
from collections.abc import Callable, Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Generic, TypeVar, overload

import numpy as np

from edgekit.bundle import Bundle
from edgekit.evaluate import gate_runtimes
from edgekit.quantize.budget import EvalRun, check, compare, decode_eval_set, gate_cannot_save
from edgekit.quantize.calibrate import Trajectories
from edgekit.quantize.conditions import gate_metrics
from edgekit.quantize.config import QuantizeConfig
from edgekit.quantize.early_stop import EARLY_MIN_ROWS, Hopeless, SnrWatch
from edgekit.quantize.graph import GraphPlan
from edgekit.quantize.plan import Eta, Plan
from edgekit.runtimes.base import Runtime
from edgekit.runtimes.memo import MemoRuntime

Say = Callable[[str], None]
T = TypeVar("T")


class SetBy(Generic[T]):
    """A ``QuantizeRun`` value that one step sets and later steps read (stage.py runs the steps in
    order). Read before it is set, it names the step that sets it: a bug in that order, said as
    one (not an AttributeError on None a few lines on)."""

    def __init__(self, step: str, doc: str) -> None:
        self.step, self.__doc__ = step, doc

    def __set_name__(self, owner: type, name: str) -> None:
        self.name = name

    @overload
    def __get__(self, obj: None, owner: type | None = None) -> SetBy[T]: ...
    @overload
    def __get__(self, obj: object, owner: type | None = None) -> T: ...
    def __get__(self, obj: object | None, owner: type | None = None) -> SetBy[T] | T:
        if obj is None:
            return self
        value = obj.__dict__.get(self.name)
        if value is None:
            raise RuntimeError(f"QuantizeRun.{self.name} was read before {self.step} set it")
        return value

    def __set__(self, obj: object, value: T) -> None:
        obj.__dict__[self.name] = value


@dataclass
class QuantizeRun:
    bundle: Bundle
    cfg: QuantizeConfig
    tmp: Path  # scratch folder of this run (owned_tempdir: swept if the process dies)
    budget: dict[str, float]
    say: Say
    sink: Say  # where warnings are shown (the CLI's warning line)
    calib_rows: dict[str, np.ndarray] | None  # real condition rows, or None: the bundle's seeded rule
    eval_rows: dict[str, np.ndarray] | None
    cond_doc: dict[str, Any]
    start: float = field(default_factory=time.perf_counter)
    warnings: list[str] = field(default_factory=list)
    clock: dict[str, float] = field(default_factory=dict)
    preprocess: dict[str, Any] = field(default_factory=dict)
    reader: Any = None  # rewindable calibration reader over ``traj``
    call_ranges: Any = None  # calibrator.CallRanges: each recorded call's max |x| per calibrated tensor
    live_ranges: Any = None  # ranges.CallRanges the FP32 calibration decodes kept as they ran (stage.record_fp32)
    # Set by one step and read by the later ones (not dataclass fields: no annotation).
    prepared = SetBy[Path]("the profile's prepare step", "the graph the profile quantizes (pre-processed fp32)")
    plan = SetBy[GraphPlan]("the profile's prepare step", "what graph.analyse_graph read of prepared")
    traj = SetBy[Trajectories]("the FP32 decodes (stage.record_fp32)", "every call of the calibration decodes")
    reference = SetBy[EvalRun]("the FP32 decodes (stage.record_fp32)", "FP32 decodes of the held-out set")
    fp32_rt = SetBy[MemoRuntime]("the FP32 answers (stage.fp32_answers)", "FP32, answering what it was asked before")
    history: list[dict[str, Any]] = field(default_factory=list)  # every budget measurement, in order
    schedule: Plan | None = None  # the decodes this run makes (plan.Plan), and one FP32 decode's seconds
    decode_s: float | None = None
    heldout_s: list[float] = field(default_factory=list)  # each held-out FP32 decode's seconds (graph batches)
    candidates: int = 0  # INT8 candidates measured
    calls_run: int = 0  # their network calls run, and answered again from what was kept
    calls_answered: int = 0

    @property
    def kind(self) -> str:
        return self.bundle.kind

    @property
    def fp32_path(self) -> Path:
        return self.bundle.path_of("fp32")

    @property
    def n_calib(self) -> int:
        return self.cfg.samples[0] if self.calib_rows is None else len(next(iter(self.calib_rows.values())))

    @property
    def n_eval(self) -> int:
        return self.cfg.samples[1] if self.eval_rows is None else len(next(iter(self.eval_rows.values())))

    def warn(self, message: str) -> None:
        """A warning kept in the summary (so ``--json`` carries it) and shown once."""
        self.warnings.append(message)
        self.sink(message)

    @contextlib.contextmanager
    def timed(self, key: str) -> Iterator[None]:
        t0 = time.perf_counter()
        try:
            yield
        finally:
            self.clock[key] = self.clock.get(key, 0.0) + time.perf_counter() - t0

    def snr_watch(self, min_rows: int | None = None) -> SnrWatch | None:
        """A watch that stops a candidate's held-out decode once its ``snr_db`` cannot reach the
        budget (``early_stop``), after ``min_rows`` rows at least (default EARLY_MIN_ROWS); None
        where the budget has no pooled SNR to bound (token kinds, ``snr_db`` not budgeted)."""
        if self.kind != "flow" or "snr_db" not in self.budget:
            return None
        limit = float(self.budget["snr_db"])
        return SnrWatch(self.reference.sampled["output"], limit, EARLY_MIN_ROWS if min_rows is None else min_rows)

    def measure(
        self, runtime: Runtime, gate: bool = True, lane: Runtime | None = None, watch: SnrWatch | None = None
    ) -> dict[str, Any]:
        """The budget metrics (and, with ``gate``, ``check``'s default gate on the same rows, seed
        and decode settings: budget met means check passes) of ``runtime`` against FP32.
        ``lane``: a second open copy of the candidate (closed here): the gate's decodes run on it
        in a second thread while the budget's run on ``runtime``, sharing their answers (for a
        runtime that computes on one thread, the HTP backend's x86 emulation). ``watch``
        (``snr_watch``; not with ``lane``): the held-out decode stops once the budget's SNR cannot
        hold, and the metrics are its rows' (``early_stop.SnrWatch.metrics``); each row's powers
        are kept in ``row_power`` either way."""
        cfg = self.cfg
        # The budget and the gate ask the candidate the same questions twice (its own decode; its
        # answers on FP32's trajectory): each is run once (runtimes.memo).
        self.candidates += 1
        watch = None if lane is not None else watch  # the lane's gate runs beside: nothing to stop
        folder = self.tmp / f"candidate-{self.candidates}-answers"
        candidate = MemoRuntime(runtime, folder=folder, name=runtime.name)
        second = candidate.lane(lane) if lane is not None and gate else None
        try:
            eta = (
                # With a lane, the budget's decodes are the ones counted: the gate's run beside them.
                Eta(
                    f"candidate {self.candidates}: INT8 decode",
                    self.schedule.per_candidate // (2 if second is not None else 1),
                    self.say,
                )
                if self.schedule
                else None
            )

            def budget() -> EvalRun:
                return decode_eval_set(
                    self.bundle,
                    candidate,
                    self.n_eval,
                    cfg.eval_seed,
                    cfg.decode,
                    reference=self.fp32_rt,
                    rows=self.eval_rows,
                    each_batch=eta,
                    after_batch=None if watch is None else watch.after_batch,
                )

            if second is None:
                try:
                    metrics = compare(self.kind, self.reference, budget())
                    if watch is not None:
                        metrics["row_power"] = [list(p) for p in watch.row_power]
                except Hopeless as stop:
                    metrics = stop.metrics
                    self.say(f"candidate {self.candidates} stopped {metrics['stopped_early']}")
                skipped = gate_cannot_save(metrics, self.budget) if gate else None
                if skipped:
                    metrics["check_skipped"] = skipped
                elif gate:
                    metrics |= self._judged_by_check(candidate, eta)
            else:
                # The gate leads with its teacher-forced calls (FP32's trajectory), which the budget's
                # decode never asks: by the time it decodes on its own, the budget has answered most of it.
                with ThreadPoolExecutor(max_workers=1) as pool:
                    ahead = pool.submit(budget)
                    checked = self._judged_by_check(second, None)
                    metrics = compare(self.kind, self.reference, ahead.result()) | checked
        finally:
            if lane is not None:
                (second or lane).close()
            shutil.rmtree(folder, ignore_errors=True)
        for memo in (candidate, second):
            if memo is not None:
                self.calls_run += memo.misses
                self.calls_answered += memo.hits
        return metrics

    def _judged_by_check(self, runtime: Any, eta: Eta | None) -> dict[str, Any]:
        """``check``'s default gate of ``runtime`` on the held-out rows, counted on ``eta`` after the
        budget's decodes (its teacher-forced calls are the gate's time: Sana-600M's 16 rows ran 76 s
        with no word); None where it runs beside them (a lane) or there is no plan."""
        cfg = self.cfg
        first = -(-self.n_eval // self.bundle.batch)
        each = None if eta is None else (lambda i: eta(first + i))
        gate = gate_runtimes(
            self.bundle, self.fp32_rt, runtime, self.n_eval, cfg.eval_seed, cfg.decode, self.eval_rows, each_batch=each
        )
        return gate_metrics(gate)

    def judge(self, metrics: Mapping[str, Any]) -> tuple[bool, list[dict[str, Any]]]:
        return check(metrics, self.budget)
