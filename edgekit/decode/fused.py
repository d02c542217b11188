"""Decode loops over fused graphs (``edgekit export --graph step|unrolled``), numpy only.

The host keeps only the loop state and the noise: it draws every random number from
``np.random.default_rng(seed)`` in the order of decode/masked.py and decode/flow.py (masked Gumbel
noise through ``decode._noise``, as the host loop), so masked tokens equal the host loop's and flow
frames agree within float32 rounding; an unrolled graph gets all K steps' noise in its one call.
A run that asks for a decode option other than the one baked into the graph is one
``UsageError`` naming both values.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from edgekit.decode._noise import gumbel
from edgekit.decode.dispatch import Decoded
from edgekit.decode.flow import NFE_PER_STEP, FlowDecodeConfig, FlowResult, initial_noise
from edgekit.decode.masked import MaskedDecodeConfig
from edgekit.decode.schedules import time_grid
from edgekit.errors import EdgekitError, UsageError
from edgekit.runtimes.base import Runtime, can_ping_pong


def check_baked(entry: Mapping[str, Any], cfg: Any) -> None:
    """Raise when ``cfg`` (a decode config) differs from a value the fused graph baked in."""
    baked = entry["baked"]
    for key, value in baked.items():
        if not hasattr(cfg, key):
            continue
        asked = getattr(cfg, key)
        same = (
            np.isclose(float(asked), float(value))
            if isinstance(value, (int, float)) and not isinstance(value, bool)
            else asked == value
        )
        if not same:
            flag = "--" + key.replace("_", "-")
            raise UsageError(
                f"the fused {entry['graph']!r} graph was exported with {key}={value!r}, this run asks {key}={asked!r}; "
                f"run with {flag} {value} or --graph host, or re-export with "
                f"`edgekit export MODEL -o BUNDLE --graph {entry['graph']} --decode {key}={asked}`"
            )


def _cond_feeds(
    runtime: Runtime, cond: Mapping[str, np.ndarray] | None, state: tuple[str, ...]
) -> dict[str, np.ndarray]:
    names = [n for n in runtime.inputs if n not in state]
    cond = dict(cond or {})
    if sorted(cond) != sorted(names):
        raise EdgekitError(
            f"conditioning inputs {sorted(cond)} do not match the fused graph's; valid names: {sorted(names)}"
        )
    out = {}
    for name in names:
        spec, arr = runtime.inputs[name], np.asarray(cond[name])
        if arr.shape != spec.shape:
            raise EdgekitError(
                f"conditioning input {name!r} is {list(arr.shape)}; "
                f"valid: {spec.dtype}{list(spec.shape)} (the graph's static batch)"
            )
        out[name] = np.ascontiguousarray(arr, dtype=spec.dtype)
    return out


def decode_flow_fused(
    runtime: Runtime,
    entry: Mapping[str, Any],
    cond: Mapping[str, np.ndarray] | None,
    cfg: FlowDecodeConfig,  # no default: the settings must be the ones the graph baked in (check_baked)
    *,
    x0: np.ndarray | None = None,
) -> FlowResult:
    """Sample x float32 [B, T, C] over a fused flow graph (``entry`` = manifest["fused"][graph]).

    step: x, t, t_next [B] + cond -> x_next, one call per solver step (grid and steps free).
    unrolled: x (noise) + cond -> x_out in one call. x0 = temperature · N(0, 1) from ``cfg.seed``
    exactly as decode_flow draws it."""
    check_baked(entry, cfg)
    graph = entry["graph"]
    state = ("x", "t", "t_next") if graph == "step" else ("x",)
    feeds = _cond_feeds(runtime, cond, state)
    shape = runtime.inputs["x"].shape
    if x0 is None:
        x0 = initial_noise(cfg, shape)
    elif np.shape(x0) != shape:
        raise EdgekitError(f"x0 has shape {list(np.shape(x0))}; valid: {list(shape)}")
    x = np.array(x0, dtype=np.float32)  # loop-owned start; then ping-ponged (or copied into)
    times = time_grid(cfg.grid, cfg.steps, cfg.sway)
    if graph == "unrolled":
        out = runtime.run({"x": x, **feeds})["x_out"]
        return FlowResult(np.array(out), int(entry["baked"]["nfe"]), 1, times)
    t = np.empty(shape[0], dtype=np.float32)
    t_next = np.empty(shape[0], dtype=np.float32)
    pingpong = can_ping_pong(runtime)
    for t0, t1 in zip(times[:-1], times[1:]):
        t.fill(t0)
        t_next.fill(t1)
        out = runtime.run({"x": x, "t": t, "t_next": t_next, **feeds})["x_next"]
        if pingpong:
            x = out  # fed straight back next step: no copy (runtimes/ort.py double-buffers)
        else:
            np.copyto(x, out)
    return FlowResult(np.array(x), cfg.steps * NFE_PER_STEP[cfg.solver], cfg.steps, times)


def decode_masked_fused(
    runtime: Runtime,
    entry: Mapping[str, Any],
    cond: Mapping[str, np.ndarray] | None,
    cfg: MaskedDecodeConfig,  # no default, as decode_flow_fused's
) -> np.ndarray:
    """int64 [B, L] tokens from a fused masked graph, every row starting all-masked.

    step: tokens, step + noise + cond -> tokens_out, one call per step.
    unrolled: noise + cond -> tokens_out in one call; the noise of all K steps is drawn up-front
    and stacked step-major (gumbel [K, B, L, W], choice_noise [K, B, L]).
    Noise as decode_masked: per step, when temperature > 0, float32 Gumbel [B, L, W] then [B, L]
    from ``default_rng(cfg.seed)`` through ``decode._noise.gumbel``; greedy draws nothing."""
    check_baked(entry, cfg)
    sampled = "gumbel" in runtime.inputs
    feeds = _cond_feeds(runtime, cond, ("tokens", "step", "gumbel", "choice_noise"))
    b, seq_len = runtime.outputs["tokens_out"].shape
    rng = np.random.default_rng(cfg.seed)
    if sampled:  # loop-owned buffers the noise is drawn into
        feeds["gumbel"] = np.empty(
            runtime.inputs["gumbel"].shape, dtype=np.float32
        )  # step: (B, L, W); unrolled: (K, B, L, W)
        feeds["choice_noise"] = np.empty(runtime.inputs["choice_noise"].shape, dtype=np.float32)  # (B, L) or (K, B, L)
    if entry["graph"] == "unrolled":
        if sampled:
            for t in range(cfg.steps):  # K = cfg.steps: check_baked ensured it
                gumbel(rng, (b, seq_len, feeds["gumbel"].shape[-1]), out=feeds["gumbel"][t])
                gumbel(rng, (b, seq_len), out=feeds["choice_noise"][t])
        return np.array(runtime.run(feeds)["tokens_out"])
    tokens = np.full((b, seq_len), _mask_id(entry), dtype=np.int64)
    step = np.zeros(1, dtype=np.int64)
    pingpong = can_ping_pong(runtime)
    for t in range(cfg.steps):
        step[0] = t
        if sampled:
            gumbel(rng, feeds["gumbel"].shape, out=feeds["gumbel"])
            gumbel(rng, (b, seq_len), out=feeds["choice_noise"])
        out = runtime.run({"tokens": tokens, "step": step, **feeds})["tokens_out"]
        if pingpong:
            tokens = out
        else:
            np.copyto(tokens, out)
    return np.array(tokens)


def _mask_id(entry: Mapping[str, Any]) -> int:
    if "mask_id" not in entry:
        raise EdgekitError(
            "fused masked entry lacks 'mask_id'; re-export with `edgekit export MODEL -o BUNDLE --graph step`"
        )
    return int(entry["mask_id"])


def decode_fused(
    kind: str, runtime: Runtime, entry: Mapping[str, Any], cond: Mapping[str, np.ndarray], config
) -> Decoded:
    """``dispatch.decode`` for fused graphs: the same ``Decoded`` summary."""
    if kind == "flow":
        r = decode_flow_fused(runtime, entry, cond, config)
        return Decoded(r.x, r.nfe, r.runtime_calls, config.steps)
    if kind == "masked":
        tokens = decode_masked_fused(runtime, entry, cond, config)
        calls = 1 if entry["graph"] == "unrolled" else config.steps
        return Decoded(tokens, config.steps, calls, config.steps)
    raise UsageError(f"model kind {kind!r} has no fused graphs; valid: flow, masked (use --graph host)")
