"""Per-chunk (solver, steps) policies (stream/policy.py): the ladder, the cost model and the
adaptive policy's decisions and hysteresis, with known per-NFE costs (no clocks read)."""

from __future__ import annotations

import numpy as np
import pytest

from edgekit.errors import UsageError
from edgekit.stream import arrival_offsets
from edgekit.stream.policy import AdaptivePolicy, CostModel, FixedPolicy, ladder, rung

TABLE = [
    {"solver": "euler", "steps": 1, "nfe": 1, "snr_db": 10.0},
    {"solver": "euler", "steps": 2, "nfe": 2, "snr_db": 14.0},
    {"solver": "midpoint", "steps": 1, "nfe": 2, "snr_db": 15.0},
    {"solver": "euler", "steps": 4, "nfe": 4, "snr_db": 13.0},  # dominated: more NFE, less SNR
    {"solver": "midpoint", "steps": 2, "nfe": 4, "snr_db": 20.0},
    {"solver": "rk4", "steps": 2, "nfe": 8, "snr_db": 26.0},
    {"solver": "rk4", "steps": 4, "nfe": 16, "snr_db": 30.0},
]


def test_ladder_is_the_pareto_front_cheapest_first():
    labels = [r.label for r in ladder(TABLE)]
    assert labels == ["eulerx1", "midpointx1", "midpointx2", "rk4x2", "rk4x4"]
    assert [r.label for r in ladder(TABLE, max_nfe=8)][-1] == "rk4x2"
    with pytest.raises(UsageError):
        ladder(TABLE, max_nfe=0)


def test_cost_model_scales_with_the_chunks_in_flight():
    cost = CostModel(per_nfe_ms=2.0, alpha=1.0)
    assert cost.predict_ms(4, in_flight=1) == pytest.approx(8.0)
    cost.observe(wall_ms=40.0, nfe=4, in_flight=2)  # 10 ms per NFE with two chunks sharing the device
    assert cost.predict_ms(4, in_flight=2) == pytest.approx(40.0)
    assert cost.predict_ms(4, in_flight=4) == pytest.approx(80.0)


def policy(per_nfe_ms=1.0, **kw) -> AdaptivePolicy:
    return AdaptivePolicy(ladder(TABLE), CostModel(per_nfe_ms), **kw)


def test_adaptive_starts_at_the_top_and_steps_down_at_once():
    p = policy(per_nfe_ms=1.0)
    assert p.choose(0, 0, slack_ms=100.0, in_flight=1).label == "rk4x4"  # 16 ms fits 0.8 * 100
    # 16 NFE no longer fit 0.8 * 12 ms: straight to the best rung that does (8 NFE > 9.6? no: 8 <= 9.6)
    assert p.choose(0, 1, slack_ms=12.0, in_flight=1).label == "rk4x2"
    assert p.choose(0, 2, slack_ms=0.5, in_flight=1).label == "eulerx1"  # nothing fits: the cheapest
    assert [(s.from_rung, s.to_rung) for s in p.switches] == [("rk4x4", "rk4x2"), ("rk4x2", "eulerx1")]
    assert all(s.reason.startswith("down") for s in p.switches)


def test_adaptive_steps_up_one_rung_after_patience_chunks_of_headroom():
    p = policy(per_nfe_ms=1.0, patience=3, headroom=0.5)
    p.choose(0, 0, slack_ms=0.1, in_flight=1)  # down to eulerx1
    picks = [p.choose(0, k, slack_ms=100.0, in_flight=1).label for k in range(1, 10)]
    assert picks == [
        "eulerx1",
        "eulerx1",
        "midpointx1",
        "midpointx1",
        "midpointx1",
        "midpointx2",
        "midpointx2",
        "midpointx2",
        "rk4x2",
    ]


def test_adaptive_does_not_flap_on_a_rung_that_just_fits():
    """Slack alternating around the top rung's cost: once down, it stays until `patience` chunks
    with headroom, so switches stay few instead of one per chunk."""
    p = policy(per_nfe_ms=1.0, patience=3, headroom=0.5)
    for k in range(40):
        p.choose(0, k, slack_ms=19.0 if k % 2 else 21.0, in_flight=1)  # 16 ms vs 0.8 * 19 / 0.8 * 21
    assert len(p.switches) == 1


def test_streams_keep_their_own_rung_and_load_pushes_down():
    p = policy(per_nfe_ms=1.0)
    assert p.choose(0, 0, slack_ms=100.0, in_flight=1).label == "rk4x4"
    assert p.choose(1, 0, slack_ms=100.0, in_flight=8).label == "rk4x2"  # 8 in flight: 16 NFE -> 128 ms, 8 -> 64
    assert p.choose(0, 1, slack_ms=100.0, in_flight=1).label == "rk4x4"
    assert [s.stream for s in p.switches] == [1]


def test_fixed_never_switches():
    p = FixedPolicy(rung("rk4", 4))
    assert {p.choose(0, k, slack_ms=s, in_flight=9).label for k, s in enumerate((0.1, 1e6, -5.0))} == {"rk4x4"}
    assert p.switches == []
    with pytest.raises(UsageError, match="unknown"):
        rung("rk5", 4)


def test_arrival_offsets():
    assert arrival_offsets(3, "all", 1.0, 0) == [0.0, 0.0, 0.0]
    assert arrival_offsets(4, "staggered", 2.0, 0) == [0.0, 0.5, 1.0, 1.5]
    poisson = arrival_offsets(5, "poisson", 1.0, 0)
    assert poisson[0] == 0.0 and np.all(np.diff(poisson) >= 0) and poisson == arrival_offsets(5, "poisson", 1.0, 0)


def test_reset_forgets_rungs_and_switches_but_keeps_the_cost_model():
    p = policy(per_nfe_ms=1.0)
    p.choose(0, 0, slack_ms=0.1, in_flight=1)
    p.observe(p.rungs[0], wall_ms=3.0, in_flight=1)
    learned = p.cost.per_nfe_ms
    p.reset()
    assert p.switches == [] and p.choose(0, 0, slack_ms=1e3, in_flight=1).label == "rk4x4"
    assert p.cost.per_nfe_ms == learned != 1.0
