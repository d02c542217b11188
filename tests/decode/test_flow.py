"""Flow solvers: convergence order on a known ODE, time grids, CFG and call accounting."""

from __future__ import annotations

import math

import numpy as np
import pytest

from edgekit.decode import NFE_PER_STEP, FlowDecodeConfig, decode_flow, integrate, time_grid
from edgekit.errors import EdgekitError


def riccati(x, t):
    """dx/dt = -2·t·x², nonlinear in x and t: x(t) = 1 / (1/x0 + t²)."""
    return -2.0 * t * x * x


@pytest.mark.parametrize("solver, order", [("euler", 1), ("midpoint", 2), ("heun", 2), ("rk4", 4)])
def test_solver_order_of_convergence(solver, order):
    x0 = np.array([1.0, 0.5, 2.0])
    exact = 1.0 / (1.0 / x0 + 1.0)
    steps = np.array([16, 32, 64, 128])
    errors = []
    for n in steps:
        x, nfe = integrate(riccati, x0, np.linspace(0.0, 1.0, n + 1), solver)
        assert nfe == n * NFE_PER_STEP[solver]
        errors.append(np.abs(x - exact).max())
    slope = -np.polyfit(np.log(steps), np.log(errors), 1)[0]
    assert abs(slope - order) <= 0.3, (solver, slope, errors)


def test_integrate_copes_with_a_reused_velocity_buffer():
    buf = np.empty(3)

    def velocity(x, t):  # like a runtime: the same array back on every call
        np.copyto(buf, riccati(x, t))
        return buf

    x0 = np.array([1.0, 0.5, 2.0])
    grid = np.linspace(0.0, 1.0, 9)
    for solver in NFE_PER_STEP:
        np.testing.assert_array_equal(integrate(velocity, x0, grid, solver)[0], integrate(riccati, x0, grid, solver)[0])


@pytest.mark.parametrize(
    "grid, sway", [("uniform", -1.0), ("cosine", -1.0), ("sway", -1.0), ("sway", -0.4), ("sway", 0.5), ("sway", 1.75)]
)
@pytest.mark.parametrize("steps", [1, 2, 7, 32])
def test_time_grids_are_monotone_from_0_to_1(grid, sway, steps):
    t = time_grid(grid, steps, sway)
    assert t.dtype == np.float64 and t.shape == (steps + 1,)
    assert t[0] == 0.0 and t[-1] == 1.0 and (np.diff(t) > 0).all()


def test_time_grid_formulas():
    u = np.linspace(0, 1, 5)
    np.testing.assert_allclose(time_grid("cosine", 4), 1 - np.cos(np.pi / 2 * u), atol=1e-15)
    np.testing.assert_allclose(time_grid("sway", 4, 0.5), u + 0.5 * (np.cos(np.pi / 2 * u) - 1 + u), atol=1e-15)
    assert time_grid("cosine", 4)[1] < 0.25 < time_grid("sway", 4, 0.5)[1]  # cosine spends steps early


@pytest.mark.parametrize("solver", ["euler", "midpoint", "heun", "rk4"])
def test_decode_flow_reaches_the_exact_solution(fake_flow, solver):
    net = fake_flow(batch=2, rate=1.5)
    spk = np.array([[1.0, -2.0, 0.5], [0.0, 3.0, -1.0]], dtype=np.float32)
    x0 = np.random.default_rng(0).standard_normal((2, 5, 3)).astype(np.float32)
    exact = spk[:, None] + (x0 - spk[:, None]) * math.exp(-1.5)
    steps = 32 if solver == "euler" else 8
    cfg = FlowDecodeConfig(steps=steps, solver=solver, grid="uniform")
    got = decode_flow(net, net.meta, {"spk": spk}, cfg, x0=x0)
    assert got.x.dtype == np.float32 and got.x.shape == (2, 5, 3)
    np.testing.assert_allclose(got.x, exact, atol={"euler": 0.05, "midpoint": 0.02, "heun": 0.02, "rk4": 1e-4}[solver])
    assert got.nfe == net.calls == steps * NFE_PER_STEP[solver]
    np.testing.assert_array_equal(got.times, time_grid("uniform", steps))


def test_network_sees_the_grid_times(fake_flow):
    net = fake_flow(batch=1)
    decode_flow(net, net.meta, {"spk": np.zeros((1, 3))}, FlowDecodeConfig(steps=5, grid="cosine"))
    np.testing.assert_array_equal(net.seen_t, time_grid("cosine", 5)[:-1].astype(np.float32))


def test_noise_comes_from_the_seed(fake_flow):
    net = fake_flow(batch=2)
    cond = {"spk": np.ones((2, 3), dtype=np.float32)}
    cfg = FlowDecodeConfig(steps=2, temperature=0.5, seed=7)
    drawn = decode_flow(net, net.meta, cond, cfg)
    given = decode_flow(net, net.meta, cond, cfg, x0=0.5 * np.random.default_rng(7).standard_normal((2, 5, 3)))
    other = decode_flow(net, net.meta, cond, FlowDecodeConfig(steps=2, temperature=0.5, seed=8))
    np.testing.assert_array_equal(drawn.x, given.x)
    assert not np.allclose(drawn.x, other.x)


@pytest.mark.parametrize("graph_batch_factor", [1, 2])
def test_guidance_zero_equals_unconditional(fake_flow, graph_batch_factor):
    spk = np.array([[1.0, 2.0, 3.0], [-1.0, 0.0, 1.0]], dtype=np.float32)
    net = fake_flow(batch=2 * graph_batch_factor, uncond=0.25)
    guided = decode_flow(net, net.meta, {"spk": spk}, FlowDecodeConfig(guidance=0.0, seed=1))
    plain = fake_flow(batch=2, uncond=0.25)
    unconditional = decode_flow(plain, plain.meta, {"spk": np.full_like(spk, 0.25)}, FlowDecodeConfig(seed=1))
    np.testing.assert_array_equal(guided.x, unconditional.x)
    assert net.calls == 4 * (3 - graph_batch_factor) and guided.nfe == 4


def test_guidance_scales_the_conditional_direction(fake_flow):
    # v is affine in spk, so uncond + g·(cond − uncond) with uncond 0 is v at spk·g.
    spk = np.array([[1.0, 2.0, 3.0], [-1.0, 0.0, 1.0]], dtype=np.float32)
    net = fake_flow(batch=4)
    guided = decode_flow(net, net.meta, {"spk": spk}, FlowDecodeConfig(solver="heun", guidance=2.5))
    scaled = decode_flow(net, net.meta, {"spk": 2.5 * spk}, FlowDecodeConfig(solver="heun"))
    np.testing.assert_allclose(guided.x, scaled.x, atol=1e-5)
    assert guided.runtime_calls == guided.nfe == 8


def test_graph_batch_2b_and_b_agree(fake_flow):
    spk = np.array([[1.0, 2.0, 3.0], [-1.0, 0.0, 1.0]], dtype=np.float32)
    cfg = FlowDecodeConfig(steps=3, solver="rk4", guidance=2.0)
    doubled, single = fake_flow(batch=4), fake_flow(batch=2)
    a = decode_flow(doubled, doubled.meta, {"spk": spk}, cfg)
    b = decode_flow(single, single.meta, {"spk": spk}, cfg)
    np.testing.assert_array_equal(a.x, b.x)
    assert (a.nfe, a.runtime_calls, b.nfe, b.runtime_calls) == (12, 12, 12, 24)


def test_guidance_one_is_one_call_per_evaluation(fake_flow):
    net = fake_flow(batch=2, uncond=None)
    got = decode_flow(net, net.meta, {"spk": np.ones((2, 3))}, FlowDecodeConfig(steps=3, solver="midpoint"))
    assert net.calls == got.runtime_calls == got.nfe == 6


def test_callback_stops_early(fake_flow):
    net = fake_flow(batch=2)
    seen = []

    def stop_after_two(step, t, x):
        seen.append((step, t))
        return step < 1

    cfg = FlowDecodeConfig(steps=4, solver="heun")
    got = decode_flow(net, net.meta, {"spk": np.ones((2, 3))}, cfg, callback=stop_after_two)
    grid = time_grid("cosine", 4)
    assert seen == [(0, grid[1]), (1, grid[2])]
    assert got.nfe == 4 and got.times.tolist() == grid[:3].tolist()


@pytest.mark.parametrize(
    "make, needle",
    [
        (lambda: FlowDecodeConfig(solver="rk5"), "'rk5'.*euler, midpoint, heun, rk4"),
        (lambda: FlowDecodeConfig(grid="linear"), "'linear'.*uniform, cosine, sway"),
        (lambda: FlowDecodeConfig(steps=0), "steps=0"),
        (lambda: FlowDecodeConfig(grid="sway", sway=-2.0), "sway=-2.0.*-1.0 <= sway"),
        (lambda: FlowDecodeConfig(temperature=-0.1), "temperature=-0.1"),
        (lambda: integrate(riccati, np.ones(1), np.linspace(0, 1, 3), "Euler"), "'Euler'.*euler"),
    ],
)
def test_bad_config_raises_one_clear_line(make, needle):
    with pytest.raises(EdgekitError, match=needle) as info:
        make()
    assert "\n" not in str(info.value)


def test_bad_inputs_raise(fake_flow):
    net = fake_flow(batch=2, uncond=None)
    cond = {"spk": np.ones((2, 3))}
    with pytest.raises(EdgekitError, match=r"x0 has shape \[2, 4, 3\]; valid: \[2, 5, 3\]"):
        decode_flow(net, net.meta, cond, x0=np.zeros((2, 4, 3)))
    with pytest.raises(EdgekitError, match="guidance=3.0 .*'spk'"):
        decode_flow(net, net.meta, cond, FlowDecodeConfig(guidance=3.0))
    with pytest.raises(EdgekitError, match=r"conditioning inputs \[\] .*\['spk'\]"):
        decode_flow(net, net.meta, {})
    with pytest.raises(EdgekitError, match=r"'spk' is float64\[2, 4\]; valid: float32\[2, 3\]"):
        decode_flow(net, net.meta, {"spk": np.ones((2, 4))})
