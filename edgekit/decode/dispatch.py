"""One entry point over the three loops: build a kind's config from defaults + overrides, and
decode. Used by ``run``, calibration, ``check`` and ``profile`` alike, so they decode the same way."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Mapping

import numpy as np

from edgekit.decode.ar import ARDecodeConfig, decode_ar
from edgekit.decode.flow import FlowDecodeConfig, decode_flow
from edgekit.decode.masked import MaskedDecodeConfig, decode_masked
from edgekit.errors import UsageError
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
            f"{flags} does not apply to a {kind} bundle; its decode options are "
            + ", ".join("--" + k.replace("_", "-") for k in valid)
        )
    values = {k: v for k, v in defaults.items() if k in valid} | dict(overrides)
    return CONFIGS[kind](**values, seed=seed)


@dataclass(frozen=True)
class Decoded:
    """A finished decode. output: tokens int64[B, L] (masked, ar) or frames float32[B, T, C] (flow)."""

    output: np.ndarray
    nfe: int
    runtime_calls: int
    steps: int


def decode(kind: str, runtime: Runtime, meta: Mapping[str, Any], cond: Mapping[str, np.ndarray], config) -> Decoded:
    if kind == "masked":
        r = decode_masked(runtime, meta, cond, config)
        return Decoded(r.tokens, r.nfe, r.runtime_calls, r.steps_run)
    if kind == "flow":
        r = decode_flow(runtime, meta, cond, config)
        return Decoded(r.x, r.nfe, r.runtime_calls, config.steps)
    if kind == "ar":
        r = decode_ar(runtime, meta, cond, config)
        return Decoded(r.tokens, r.nfe, r.runtime_calls, r.tokens.shape[1])
    raise UsageError(f"model kind {kind!r} is unknown; valid: {', '.join(CONFIGS)}")
