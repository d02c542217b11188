"""Latency-budgeted flow decoding (run/budget.py) with a fake runtime of known per-call latency."""

from __future__ import annotations

import time

import numpy as np
import pytest

from edgekit.errors import CheckFailed
from edgekit.probes.latency import MeasureConfig
from edgekit.runtimes.base import BaseRuntime

pytest.importorskip("torch")

CALL_MS = 2.0
FAST = MeasureConfig(warmup_iters=1, warmup_seconds=0.0, iters=15, min_seconds=0.0)


class SleepyRuntime(BaseRuntime):
    """The network's IO with a known latency per call and zero outputs (only latency is measured)."""

    name = "sleepy"

    def __init__(self, inner, ms: float):
        super().__init__(inner.inputs, inner.outputs)
        self.ms = ms
        self.out = {n: s.zeros() for n, s in inner.outputs.items()}

    def _run_impl(self, feeds):
        end = time.perf_counter() + self.ms / 1e3
        while time.perf_counter() < end:
            pass
        return self.out


@pytest.fixture(scope="module")
def quality(tiny_bundles):
    from edgekit.bundle import Bundle
    from edgekit.run.budget import QualityConfig, measure_flow_quality

    cfg = QualityConfig(steps=(1, 2, 4, 8), seeds=(0, 1))
    return measure_flow_quality(
        tiny_bundles["flow"], cfg, cond={"tokens": np.array([[1, 2, 3, 4], [5, 6, 7, 0]])}
    ), Bundle


def test_quality_table_is_measured_and_stored(tiny_bundles, quality):
    doc, Bundle = quality
    stored = Bundle.load(tiny_bundles["flow"]).manifest["flow_quality"]
    assert stored["table"] == doc["table"] and stored["reference"] == {"solver": "rk4", "steps": 32, "nfe": 128}
    snr = {(r["solver"], r["steps"]): r["snr_db"] for r in stored["table"]}
    assert len(snr) == 16
    assert all(np.isfinite(v) for v in snr.values())
    assert snr[("rk4", 8)] > snr[("euler", 1)] and snr[("euler", 8)] > snr[("euler", 1)]  # more NFE pays


def test_quality_table_follows_the_sway_coefficient(tiny_bundles, tmp_path):
    """QualityConfig(grid="sway", sway=s): the grid and s are recorded, and s changes the grid
    (steps near t = 0 for s < 0, near t = 1 for s > 0), so the measured SNRs differ."""
    import shutil

    from edgekit.run.budget import QualityConfig, measure_flow_quality

    path = shutil.copytree(tiny_bundles["flow"], tmp_path / "flow")  # the module fixture's table stays
    cond = {"tokens": np.array([[1, 2, 3, 4], [5, 6, 7, 0]])}
    docs = {
        s: measure_flow_quality(
            path, QualityConfig(solvers=("euler",), steps=(2,), seeds=(0,), grid="sway", sway=s), cond=cond
        )
        for s in (-1.0, 1.0)
    }
    assert [(d["grid"], d["sway"]) for d in docs.values()] == [("sway", -1.0), ("sway", 1.0)]
    assert docs[-1.0]["table"][0]["snr_db"] != pytest.approx(docs[1.0]["table"][0]["snr_db"], abs=1e-3)


def test_plan_picks_rk4_at_four_steps_with_headroom_and_euler_at_one_when_tight(tiny_bundles, quality):
    from edgekit.bundle import Bundle
    from edgekit.run.budget import plan_for_budget
    from edgekit.runtimes import open_runtime

    bundle = Bundle.load(tiny_bundles["flow"])
    # A known table (the tiny random model's own is not monotone): SNR rises with order and NFE.
    order = {"euler": 1, "midpoint": 2, "heun": 2, "rk4": 4}
    bundle.manifest["flow_quality"]["table"] = [
        {"solver": s, "steps": k, "nfe": k * n, "snr_db": 6.0 * order[s] * np.log2(2 * k)}
        for s, n in (("euler", 1), ("midpoint", 2), ("heun", 2), ("rk4", 4))
        for k in (1, 2, 3, 4)
    ]
    bundle.save()
    with open_runtime(bundle) as inner:
        rt = SleepyRuntime(inner, CALL_MS)
        # Headroom: any budget above 16 NFE at the measured latency (>= CALL_MS; a loaded CPU adds to it).
        solver, steps, expected_ms, snr = plan_for_budget(bundle.root, 1000.0, runtime=rt, measure_cfg=FAST)
    assert (solver, steps) == ("rk4", 4) and snr == pytest.approx(24 * np.log2(8))
    from edgekit.run.budget import choose

    table = Bundle.load(bundle.root).manifest["flow_quality"]["table"]
    per_nfe = expected_ms / 16
    assert per_nfe >= CALL_MS
    tight = choose(table, per_nfe, 1.5 * per_nfe)
    assert (tight.solver, tight.steps, tight.nfe) == ("euler", 1, 1)
    with pytest.raises(CheckFailed, match=r"below one euler step"):
        choose(table, per_nfe, 0.5 * per_nfe)


def test_choose_prefers_fewer_nfe_on_equal_quality():
    from edgekit.run.budget import choose

    table = [
        {"solver": "heun", "steps": 2, "nfe": 4, "snr_db": 20.0},
        {"solver": "euler", "steps": 2, "nfe": 2, "snr_db": 20.0},
    ]
    assert choose(table, 1.0, 10.0).solver == "euler"
