"""Flow-matching sampling: integrate dx/dt = v(x, t) from noise (t = 0) to data (t = 1).

The network is the seam (Matcha-TTS's estimator): the exported graph computes v once, the
solver stays here. Noise contract: ``x0 = temperature · N(0, 1)`` drawn once, shape [B, T, C],
from ``np.random.default_rng(seed)``; nothing else is random.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from edgekit.decode._guidance import GuidedNetwork, require_meta
from edgekit.decode.schedules import TIME_GRIDS, time_grid
from edgekit.errors import EdgekitError, UsageError, one_of
from edgekit.runtimes.base import Runtime

SOLVERS: tuple[str, ...] = ("euler", "midpoint", "heun", "rk4")
# Velocity evaluations per step: compare solvers at equal NFE, not equal steps.
NFE_PER_STEP: dict[str, int] = {"euler": 1, "midpoint": 2, "heun": 2, "rk4": 4}

Velocity = Callable[[np.ndarray, float], np.ndarray]


@dataclass(frozen=True)
class FlowDecodeConfig:
    steps: int = 4  # solver steps (NFE = steps x NFE_PER_STEP[solver]); 2-4 is the few-step regime edge targets aim at
    solver: str = "euler"  # euler is what Matcha/F5/CosyVoice ship; higher orders pay off on curved trajectories
    grid: str = "cosine"  # cosine spends steps near t = 0 where the flow bends most (CosyVoice)
    sway: float = -1.0  # F5-TTS sway coefficient, used only by grid="sway"; -1 is its default
    guidance: float = 1.0  # CFG scale g: uncond + g·(cond − uncond); 1.0 skips the unconditional pass
    temperature: float = 1.0  # noise scale of x0 (Matcha uses 0.667); ignored when x0 is given
    seed: int = 0  # the one Generator x0 comes from, so runtimes see identical noise

    def __post_init__(self) -> None:
        one_of("solver", self.solver, SOLVERS)
        one_of("time grid", self.grid, TIME_GRIDS)
        time_grid(self.grid, self.steps, self.sway)  # raises on steps < 1 or a non-monotone sway
        if self.temperature < 0:
            raise UsageError(f"temperature={self.temperature!r} is invalid; valid: >= 0")
        if not np.isfinite(self.guidance):
            raise UsageError(f"guidance={self.guidance!r} is invalid; valid: a finite number (1.0 = off)")


@dataclass(frozen=True)
class FlowResult:
    """x: float32 [B, T, C] at the last time reached; times: float64, the grid points reached
    (all steps + 1 unless a callback stopped early); nfe: velocity evaluations (conditional and
    unconditional rows together count one); runtime_calls: ``runtime.run`` calls."""

    x: np.ndarray
    nfe: int
    runtime_calls: int
    times: np.ndarray


def initial_noise(cfg: FlowDecodeConfig, shape: tuple[int, ...]) -> np.ndarray:
    """x0, float32 ``shape`` ([B, T, C]): ``temperature · default_rng(seed).standard_normal(shape)``
    (float64 draws, scaled, then cast), the one rule every flow loop (host and fused) starts from,
    so another framework can reproduce a decode from the seed alone."""
    return np.asarray(cfg.temperature * np.random.default_rng(cfg.seed).standard_normal(shape), dtype=np.float32)


def integrate(
    velocity: Velocity,
    x0: np.ndarray,
    times: np.ndarray,
    solver: str,
    *,
    callback: Callable[[int, float, np.ndarray], bool | None] | None = None,
) -> tuple[np.ndarray, int]:
    """Solve dx/dt = velocity(x, t) over ``times``; returns (x at the last time reached, NFE).

    x keeps ``x0``'s dtype and shape; only the current x and one step's slopes are held.
    ``velocity`` may return a buffer it reuses: each slope is used before the next call or copied.
    ``callback(step, t, x)`` runs after each step; returning False stops there.
    """
    one_of("solver", solver, SOLVERS)
    x = np.array(x0)
    nfe = 0
    for i, (t, t_next) in enumerate(zip(times[:-1], times[1:])):
        t, dt = float(t), float(t_next - t)
        if solver == "euler":
            x = x + dt * velocity(x, t)
        elif solver == "midpoint":
            k1 = velocity(x, t)
            x = x + dt * velocity(x + (dt / 2) * k1, t + dt / 2)
        elif solver == "heun":
            k1 = np.array(velocity(x, t))
            k2 = velocity(x + dt * k1, t + dt)
            x = x + (dt / 2) * (k1 + k2)
        else:  # rk4
            k1 = np.array(velocity(x, t))
            k2 = np.array(velocity(x + (dt / 2) * k1, t + dt / 2))
            k3 = np.array(velocity(x + (dt / 2) * k2, t + dt / 2))
            k4 = velocity(x + dt * k3, t + dt)
            x = x + (dt / 6) * (k1 + 2 * k2 + 2 * k3 + k4)
        nfe += NFE_PER_STEP[solver]
        if callback is not None and callback(i, float(t_next), x) is False:
            break
    return x, nfe


def decode_flow(
    runtime: Runtime,
    meta: Mapping[str, Any],
    cond: Mapping[str, np.ndarray] | None,
    cfg: FlowDecodeConfig = FlowDecodeConfig(),
    *,
    x0: np.ndarray | None = None,
    callback: Callable[[int, float, np.ndarray], bool | None] | None = None,
) -> FlowResult:
    """Sample x float32 [B, T, C] from a ``flow`` network (x [B,T,C], t [B] + cond -> v [B,T,C]).

    cond: {conditioning input: array [B, ...]}, exactly the names in meta["conditioning"].
    x0: float32 [B, T, C] starting noise; drawn from ``cfg.seed`` when None.
    callback(step, t, x) runs after each solver step; returning False stops there.
    """
    require_meta(meta, "flow", ("channels", "frames"))
    frames, channels = int(meta["frames"]), int(meta["channels"])
    net = GuidedNetwork(runtime, meta, cond, cfg.guidance, kind="flow", batch=None if x0 is None else len(x0))
    b = net.batch
    if runtime.inputs["x"].shape[1:] != (frames, channels):
        raise EdgekitError(
            f"meta frames={frames}, channels={channels} but the graph's x is {list(runtime.inputs['x'].shape)}"
        )
    if x0 is None:
        x0 = initial_noise(cfg, (b, frames, channels))
    elif np.shape(x0) != (b, frames, channels):
        raise EdgekitError(f"x0 has shape {list(np.shape(x0))}; valid: {[b, frames, channels]}")
    x0 = np.asarray(x0, dtype=np.float32)
    t_rows = np.empty(b, dtype=np.float32)  # loop-owned: fed each evaluation, refilled in place

    def velocity(x: np.ndarray, t: float) -> np.ndarray:
        t_rows.fill(t)
        feeds = {"x": net.expand("x", np.ascontiguousarray(x, dtype=np.float32)), "t": net.expand("t", t_rows)}
        return net.guide(net.run(feeds)["v"])

    times = time_grid(cfg.grid, cfg.steps, cfg.sway)
    x, nfe = integrate(velocity, x0, times, cfg.solver, callback=callback)
    steps_done = nfe // NFE_PER_STEP[cfg.solver]
    return FlowResult(np.asarray(x, dtype=np.float32), net.nfe, net.runtime_calls, times[: steps_done + 1])
