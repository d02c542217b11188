"""One entry point over the three loops: build a kind's config from defaults + overrides, and
decode. Used by ``run``, calibration, ``check`` and ``profile`` alike, so they decode the same way."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from edgekit.decode.ar import ARDecodeConfig, decode_ar
from edgekit.decode.flow import FlowDecodeConfig, decode_flow
from edgekit.decode.masked import MAX_SPACING, MaskedDecodeConfig, decode_masked
from edgekit.errors import UsageError, unknown
from edgekit.runtimes.base import Runtime

CONFIGS: dict[str, type] = {"masked": MaskedDecodeConfig, "flow": FlowDecodeConfig, "ar": ARDecodeConfig}


def options_for(kind: str) -> tuple[str, ...]:
    """The decode options a kind accepts (config fields other than the seed)."""
    return tuple(f.name for f in dataclasses.fields(CONFIGS[kind]) if f.name != "seed")


def decode_config(kind: str, defaults: Mapping[str, Any], overrides: Mapping[str, Any], seed: int = 0):
    """The kind's frozen config: bundle ``defaults`` (the manifest's decode_defaults) updated
    with ``overrides`` (only the options the user set). An option of another kind is an error."""
    valid = options_for(kind)
    bad = [k for k in overrides if k not in valid]
    if bad:
        flags = ", ".join("--" + k.replace("_", "-") for k in bad)
        raise UsageError(
            f"{flags} does not apply to the {kind} model; its decode options are "
            + ", ".join("--" + k.replace("_", "-") for k in valid)
        )
    values = {k: v for k, v in defaults.items() if k in valid} | dict(overrides)
    check_bounds(values, seed)
    try:
        return CONFIGS[kind](**values, seed=seed)
    except TypeError as exc:  # a manifest's decode_defaults of the wrong type ("steps": "ten")
        raise UsageError(
            f"decode options {values} are malformed ({exc})",
            hint="check --decode values and the bundle's decode_defaults",
        ) from None


# Upper bounds checked before anything is allocated (a flow time grid of 10⁹ steps is 8 GB): far
# beyond any useful decode (MaskGIT converges in ~8–32 steps, flow ODEs in ~4–64).
MAX_STEPS = 10_000
MAX_LENGTH = 1 << 20
MAX_SEED = (1 << 63) - 1
_INTS = {"steps": (1, MAX_STEPS), "length": (1, MAX_LENGTH), "top_k": (0, MAX_LENGTH), "spacing": (0, MAX_SPACING)}
_FLOATS = ("temperature", "choice_temperature", "guidance", "sway")


def check_bounds(values: Mapping[str, Any], seed: int = 0) -> None:
    """Integers within their bounds, floats finite numbers, the seed in [0, 2⁶³): one line naming
    the option (from --decode/--steps or the bundle's decode_defaults) otherwise."""
    for key, (low, high) in _INTS.items():
        value = values.get(key)
        if value is None and key == "length":
            continue
        if key in values and (
            isinstance(value, bool) or not isinstance(value, (int, np.integer)) or not low <= value <= high
        ):
            raise UsageError(f"{key}={value!r} is invalid; valid: an integer in [{low}, {high}]")
    for key in _FLOATS:
        value = values.get(key)
        if key in values and (
            isinstance(value, bool) or not isinstance(value, (int, float, np.number)) or not np.isfinite(value)
        ):
            raise UsageError(f"{key}={value!r} is invalid; valid: a finite number")
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or not 0 <= seed <= MAX_SEED:
        raise UsageError(f"seed={seed!r} is invalid; valid: an integer in [0, 2^63)")


def parse_decode_options(items: list[str] | tuple[str, ...] | None) -> dict[str, Any]:
    """``--decode KEY=VALUE`` items -> {key: value}: ``["guidance=2", "solver=heun"]`` ->
    {"guidance": 2.0, "solver": "heun"}. Known integer options become int and known float options
    float (a bad number is one line naming it); other values int, float or str as they parse. The
    kind's config (``decode_config``) then validates names and bounds."""
    out: dict[str, Any] = {}
    for item in items or ():
        key, sep, value = item.partition("=")
        key = key.strip().replace("-", "_")
        if not sep or not key:
            raise UsageError(f"--decode {item!r} is not KEY=VALUE", hint="e.g. --decode guidance=2 --decode steps=16")
        casts: tuple[type, ...] = (int,) if key in _INTS else (float,) if key in _FLOATS else (int, float)
        for cast in casts:
            try:
                out[key] = cast(value)
                break
            except ValueError:
                continue
        else:
            if key in _INTS or key in _FLOATS:
                raise UsageError(f"--decode {item!r}: {key} needs {'an integer' if key in _INTS else 'a number'}")
            out[key] = value
    return out


@dataclass(frozen=True)
class Decoded:
    """A finished decode. output: tokens int64[B, L] (masked, ar) or frames float32[B, T, C] (flow)."""

    output: np.ndarray
    nfe: int
    runtime_calls: int
    steps: int


def decode_rows(
    kind: str,
    runtime: Runtime,
    meta: Mapping[str, Any],
    cond: Mapping[str, np.ndarray],
    config,
    *,
    rows: int | None = None,
    batch: int | None = None,
    each_call: Callable[[int], None] | None = None,
    after_call: Callable[[int, np.ndarray], None] | None = None,
) -> Decoded:
    """``decode`` of B rows in graph batches, the one batched-row loop: ceil(B / Bg) calls of the
    graph's static batch Bg (call i with seed + i; the last one padded with its final row),
    outputs stacked and trimmed to B. With B <= Bg it is ``decode`` itself.

    cond: {conditioning input: array [B, ...]}. rows: B where no conditioning array says it (an
    unconditional model). batch: Bg (default: dim 0 of the runtime's first input). each_call(i):
    runs before call i (a recorder marks where each decode starts); after_call(i, output): after it,
    with its output [Bg, ...] (read only; it may raise to stop the rows: quantize's early stop).
    Lets a batch-1 AR baseline decode the rows of a batch-8 masked bundle, and an evaluation set
    decode in graph batches under per-batch seeds."""
    counts = {int(np.shape(a)[0]) for a in cond.values() if np.ndim(a)} | ({rows} if rows is not None else set())
    graph_batch = int(batch if batch is not None else next(iter(runtime.inputs.values())).shape[0])
    if len(counts) != 1 or (b := counts.pop()) <= graph_batch:
        if each_call is not None:
            each_call(0)
        decoded = decode(kind, runtime, meta, cond, config)
        if after_call is not None:
            after_call(0, decoded.output)
        return decoded
    parts = []
    for i in range(-(-b // graph_batch)):
        chunk = {}
        for name, arr in cond.items():
            piece = arr[i * graph_batch : (i + 1) * graph_batch]
            if len(piece) < graph_batch:
                piece = np.concatenate([piece, np.repeat(piece[-1:], graph_batch - len(piece), axis=0)])
            chunk[name] = piece
        if each_call is not None:
            each_call(i)
        part = decode(kind, runtime, meta, chunk, dataclasses.replace(config, seed=config.seed + i))
        parts.append(dataclasses.replace(part, output=part.output.copy()))  # the next call may reuse the buffer
        if after_call is not None:
            after_call(i, parts[-1].output)
    output = np.concatenate([p.output for p in parts])[:b]
    return Decoded(output, sum(p.nfe for p in parts), sum(p.runtime_calls for p in parts), parts[0].steps)


def decode(kind: str, runtime: Runtime, meta: Mapping[str, Any], cond: Mapping[str, np.ndarray], config) -> Decoded:
    if kind == "masked":
        masked = decode_masked(runtime, meta, cond, config)
        return Decoded(masked.tokens, masked.nfe, masked.runtime_calls, masked.steps_run)
    if kind == "flow":
        flow = decode_flow(runtime, meta, cond, config)
        return Decoded(flow.x, flow.nfe, flow.runtime_calls, config.steps)
    if kind == "ar":
        ar = decode_ar(runtime, meta, cond, config)
        return Decoded(ar.tokens, ar.nfe, ar.runtime_calls, ar.tokens.shape[1])
    raise unknown("model kind", kind, CONFIGS)
