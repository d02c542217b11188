"""How much of a model's decode quantize runs: the tokens one row decides (what the auto sample
counts weigh, ``QuantizeConfig.with_samples``), the share of a decode the INT8-against-FP32
timing decodes, and its sessions' warm-up."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from edgekit.bundle import Bundle
from edgekit.runtimes.bucketed import BucketedRuntime

# A longer AR decode is timed on its first SPEED_AR_TOKENS tokens: every step of a static-shape AR
# graph computes over the whole cache, so a step's time does not grow with its position and the
# ratio is the whole decode's. At 1024 tokens (45 s an FP32 decode on 2 cores) the 12 whole
# decodes took 754 s, half of quantize.
SPEED_AR_TOKENS = 128


def tokens_per_row(bundle: Bundle, decode: Mapping[str, Any]) -> int | None:
    """The tokens one row's decode decides: masked every position, AR its length (the decode
    options ``decode``'s, else the bundle's decode defaults', else the cache's size); None for flow."""
    length = decode.get("length") if bundle.kind == "ar" else None
    return int(length) if length else bundle.tokens_per_row


def speed_tokens(bundle: Bundle, decode: Mapping[str, Any]) -> tuple[int, int] | None:
    """(tokens timed, tokens a decode makes) where the speed timing decodes fewer tokens than a
    decode makes (an AR decode over SPEED_AR_TOKENS), else None."""
    full = tokens_per_row(bundle, decode) if bundle.kind == "ar" else None
    return (SPEED_AR_TOKENS, full) if full and full > SPEED_AR_TOKENS else None


def timed_share(part: tuple[int, int] | None) -> float:
    """The share of a decode the speed timing decodes (``speed_tokens``)."""
    return 1.0 if part is None else part[0] / part[1]


def warm_up(runtimes: Sequence[Any], feed: Mapping[str, np.ndarray]) -> int:
    """Run ``feed`` (one recorded call) once on every session behind ``runtimes``, each step
    bucket's graph of a bucketed one included (its first run sets up its buffers; the timing's
    first decode would otherwise pay it in the buckets the call does not reach). Returns the
    sessions warmed."""
    warmed = 0
    for rt in runtimes:
        for session in rt.runtimes if isinstance(rt, BucketedRuntime) else [rt]:
            session.run(dict(feed))
            warmed += 1
    return warmed
