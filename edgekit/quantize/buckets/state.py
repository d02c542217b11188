"""Step buckets inside one quantize run (``--step-buckets N|auto``): the measured range drift that
places the boundaries, the recorded feeds that calibrate each bucket, the candidates' bucket
graphs, and the runtime that decodes a candidate (``runtimes.bucketed.BucketedRuntime``).

Profiles call ``graphs(build_one)`` where they built one graph: with buckets it builds one per
bucket from that bucket's calibration reader and returns the first; ``open`` then opens them all
behind one runtime. Without buckets both are the single-graph path."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from edgekit.evaluate import snr_db
from edgekit.quantize.buckets.candidate import added_rss
from edgekit.quantize.buckets.ranges import (
    AUTO_COUNTS,
    StepBuckets,
    choose_buckets,
    split_feeds,
)
from edgekit.quantize.buckets.shared import shared_copies
from edgekit.quantize.budget import worst_margin
from edgekit.quantize.calibrate import RangeDrift, calibration_reader, range_drift
from edgekit.quantize.context import QuantizeRun
from edgekit.runtimes.bucketed import BucketedRuntime
from edgekit.runtimes.ort import OrtOptions, OrtRuntime


class BucketState:
    def __init__(self, run: QuantizeRun, auto: tuple[int, ...] = AUTO_COUNTS):
        self.run = run
        self.auto = auto  # the counts ``--step-buckets auto`` tries, cheapest first
        self.drift: RangeDrift | None = None
        self.current: StepBuckets | None = None  # None: one scale (the default)
        self.siblings: dict[Path, list[Path]] = {}  # a candidate's first graph -> every bucket's graph
        self.made_with: dict[Path, StepBuckets] = {}  # a candidate's first graph -> its buckets
        self.tried: list[dict[str, Any]] = []
        self.single: Path | None = None  # the one-scale candidate the search built first (per-step comparison)
        self.single_rss: int | None = None  # bytes opening and running ``single`` adds (memory_ratio)

    @property
    def requested(self) -> int | str | None:
        return self.run.cfg.step_buckets

    def measure_drift(self, tensors: Sequence[str]) -> None:
        """Per-call ranges of ``tensors`` over the FP32 trajectories: where the boundaries go."""
        if self.requested in (None, 1) or self.drift is not None:
            return
        with self.run.timed("range_drift_s"):
            self.drift = range_drift(
                self.run.prepared, list(tensors), self.run.traj, self.run.cfg.threads, recorded=self.run.call_ranges
            )

    def counts(self) -> tuple[int, ...]:
        """The bucket counts the search tries: the one asked for, or ``auto``'s, cheapest first."""
        req = self.requested
        if req in (None, 1):
            return (1,)
        return self.auto if req == "auto" else (int(req),)

    def use(self, n: int) -> StepBuckets | None:
        """Quantize the next candidates with ``n`` buckets (1: one scale)."""
        if n <= 1 or self.drift is None:
            self.current = None
        else:
            self.current = choose_buckets(self.run.kind, self.drift.positions, self.drift.amax, n)
            if self.current.n == 1:
                self.current = None
        return self.current

    def choose(
        self,
        build: Callable[[], Path],
        measure: Callable[[Path], dict[str, Any]],
        note: str = "",
        memory: str | None = None,
    ) -> None:
        """Pick the bucket count the search goes on with (a knob before any fallback or 16-bit
        promotion: a bucket costs the scales' memory, those cost speed at every call). Each count
        of ``counts`` is built (``build``: the candidate with the current buckets) and measured
        (``measure``: its budget metrics); ``auto`` keeps the smallest that meets the budget, else
        the best margin. The one-scale graph is built either way for the per-step comparison.
        ``memory``: the runtime whose resident memory bounds ``auto`` (``cfg.bucket_memory``, a
        ratio over one scale, measured: ``buckets.candidate.added_rss``); a count past it is not decoded,
        nor is any larger one (each bucket adds a graph). An explicit count past it is warned about."""
        run = self.run
        counts = self.counts()
        if counts == (1,):
            return
        if 1 not in counts:
            self.use(1)
            self.single = build()
        bound = float(getattr(run.cfg, "bucket_memory", 0) or 0) if memory else 0.0
        asked = self.requested != "auto"  # --step-buckets N: measured and warned about, taken as asked
        best: tuple[int, float] | None = None
        for n in counts:
            buckets = self.use(n)
            if n > 1 and buckets is None:
                continue  # fewer distinct positions than buckets
            edges = (
                "one scale"
                if buckets is None
                else f"{buckets.by} edges " + ", ".join(f"{b:.3g}" for b in buckets.boundaries)
            )
            run.say(f"step buckets: {n} ({edges})")
            model = build()
            if n == 1:
                self.single = model
            row: dict[str, Any] = {"n": n, "boundaries": list(buckets.boundaries) if buckets else []}
            if n > 1 and bound and memory:  # bound is 0 without memory: this narrows its type
                ratio = self.memory_ratio(model, memory)
                row["memory_ratio"] = ratio
                if ratio is None:
                    run.say(
                        f"step buckets: {n}: memory not measured (this host's "
                        "process RSS is unreadable): no --bucket-memory bound"
                    )
                elif ratio > bound and asked:
                    run.warn(
                        f"--step-buckets {n}: on {memory} the {n} bucket "
                        f"graphs add {ratio:.2f}x the memory of one scale "
                        f"(over --bucket-memory {bound:g}; --step-buckets auto keeps within it)"
                    )
                elif ratio > bound:
                    run.say(
                        f"step buckets: {n} not tried: on {memory} they add {ratio:.2f}x the memory of one scale "
                        f"(--bucket-memory {bound:g})"
                    )
                    self.tried.append(row | {"passed": False, "skipped": f"memory > {bound:g}x"})
                    break
            metrics = measure(model)
            passed, _ = run.judge(metrics)
            margin = worst_margin(metrics, run.budget)
            self.tried.append(
                row
                | {
                    "passed": passed,
                    "margin": margin,
                    **({"measured_on": note} if note else {}),
                    **{k: metrics.get(k) for k in run.budget},
                }
            )
            if best is None or margin > best[1] or passed:
                best = (n, margin)
            if passed:
                break
        self.use(best[0] if best else 1)

    def memory_ratio(self, model: Path, runtime: str) -> float | None:
        """Resident memory that opening and running candidate ``model`` (every bucket's graph, each
        on a recorded call of its range) adds on ``runtime``, over what the one-scale graph adds;
        None where it cannot be read (no /proc)."""
        if self.single is None:
            return None
        if self.single_rss is None:
            self.single_rss = added_rss(runtime, [self.single], [self.run.traj.feeds[0]], self.run.cfg.threads) or 0
        if not self.single_rss:
            return None
        buckets = self.for_model(model)
        firsts = [mine[0] if mine else 0 for mine in self.calls_by_bucket(buckets)] if buckets else [0]
        # As the bundle will store them: one weights file every bucket's graph maps.
        stored = shared_copies(self.paths(model), self.run.tmp / f"memory-{model.stem}")
        mine = added_rss(runtime, stored, [self.run.traj.feeds[i] for i in firsts], self.run.cfg.threads)
        return None if mine is None else mine / self.single_rss

    def in_use(self) -> StepBuckets:
        """``current``, read by a step that runs only with step buckets (``use(n)``, n > 1, set them)."""
        if self.current is None:
            raise RuntimeError("no step buckets in use: BucketState.use(n) with n > 1 must run first")
        return self.current

    def readers(self) -> list[Any]:
        """One rewindable calibration reader per bucket of ``current`` (its calls' feeds)."""
        traj = self.run.traj
        parts = split_feeds(traj.feeds, [c.position for c in traj.calls], self.in_use())
        return [calibration_reader(p or traj.feeds, self.run.bundle.inputs) for p in parts]

    def graphs(self, build_one: Callable[[int, Any], Path]) -> Path:
        """Build the candidate: ``build_one(bucket, reader)`` per bucket (one scale: bucket 0 with
        the run's reader). Returns the first graph; ``paths`` gives them all."""
        if self.current is None:
            return build_one(0, self.run.reader)
        paths = [build_one(i, reader) for i, reader in enumerate(self.readers())]
        self.siblings[paths[0]] = paths
        self.made_with[paths[0]] = self.current
        return paths[0]

    def paths(self, model: Path) -> list[Path]:
        return self.siblings.get(model, [model])

    def open(self, model: Path, open_one: Callable[[Path], Any]) -> Any:
        """The runtime that decodes candidate ``model`` (every bucket's graph behind one)."""
        paths = self.paths(model)
        if len(paths) == 1:
            return open_one(model)
        buckets = self.made_with[model]  # several graphs: ``graphs`` built them with these buckets
        return BucketedRuntime([open_one(p) for p in paths], buckets.boundaries, self.run.kind, self.run.bundle.meta)

    def calls_by_bucket(self, buckets: StepBuckets) -> list[list[int]]:
        """The recorded calls' indices (into ``run.traj.calls`` and ``feeds``) in each of ``buckets``."""
        out: list[list[int]] = [[] for _ in range(buckets.n)]
        for i, c in enumerate(self.run.traj.calls):
            out[buckets.index(c.position)].append(i)
        return out

    def for_model(self, model: Path) -> StepBuckets | None:
        """The buckets ``model`` was built with (None: one scale)."""
        return self.made_with.get(model)

    def per_step(self, single: Path, model: Path) -> dict[str, Any]:
        """Teacher-forced output SNR (dB) against FP32 at each call of the first recorded decode, for
        the one-scale graph ``single`` and the bucketed candidate ``model``: where the buckets pay."""
        run = self.run
        traj = run.traj
        calls = [i for i, c in enumerate(traj.calls) if c.decode == 0]
        out_name = next(iter(run.bundle.outputs))
        opts = OrtOptions(intra_op_threads=run.cfg.threads, spin_between_runs=False)
        rows: dict[str, list[float]] = {
            "position": [traj.calls[i].position for i in calls],
            "one_scale_db": [],
            "bucketed_db": [],
        }
        with (
            OrtRuntime(run.fp32_path, opts) as fp,
            OrtRuntime(single, opts) as one,
            self.open(model, lambda p: OrtRuntime(p, opts)) as many,
        ):
            for i in calls:
                ref = fp.run(traj.feeds[i])[out_name].copy()
                rows["one_scale_db"].append(snr_db(ref, one.run(traj.feeds[i])[out_name], floor=1e-30))
                rows["bucketed_db"].append(snr_db(ref, many.run(traj.feeds[i])[out_name], floor=1e-30))
        return rows

    def to_json(self, model: Path) -> dict[str, Any] | None:
        """What the summary and manifest record of ``model``'s buckets (None: one scale)."""
        buckets = self.for_model(model)
        if buckets is None:
            return None if not self.tried else {"n": 1, "tried": self.tried}
        drift = self.drift
        calls = [len(mine) for mine in self.calls_by_bucket(buckets)]
        doc = buckets.to_json() | {"calls_per_bucket": [int(c) for c in calls], "tried": self.tried}
        if drift is not None:  # per call index: where the boundaries came from (plots)
            doc["drift"] = {
                "positions": [float(p) for p in drift.positions],
                "mean_share_of_range": [float(v) for v in drift.share.mean(axis=1)],
            }
        if self.single is not None:
            doc["per_step"] = self.per_step(self.single, model)
        return doc
