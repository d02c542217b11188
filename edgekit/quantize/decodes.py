"""How much of a model's decode quantize runs: the tokens one row decides (what the auto sample
counts weigh, ``QuantizeConfig.with_samples``), the share of a decode the INT8-against-FP32
timing decodes, and its sessions' warm-up."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from edgekit.bundle import Bundle
from edgekit.decode.dispatch import decode_config
from edgekit.runtimes.bucketed import BucketedRuntime

# A longer AR decode is timed on its first SPEED_AR_TOKENS tokens: every step of a static-shape AR
# graph computes over the whole cache, so a step's time does not grow with its position and the
# ratio is the whole decode's. At 1024 tokens (45 s an FP32 decode on 2 cores) the 12 whole
# decodes took 754 s, half of quantize.
SPEED_AR_TOKENS = 128
# A masked or flow decode is timed on its first steps where a whole one is long: each step runs the
# same static-shape graph(s) on the same shapes (the schedule moves t or the mask, not the work), so
# a step's time does not depend on how many a decode takes. Enough steps that one timed decode takes
# about this long (the first FP32 decode gives the clock); Sana-600M's 3 + 3 whole decodes of 4
# steps took 54 s of its 818 s quantize.
SPEED_PART_S = 3.0


@dataclass(frozen=True)
class SpeedPart:
    """The speed timing decodes ``timed`` of a decode's ``of`` tokens (AR: decode option
    ``length``) or steps (masked, flow: ``steps``); its times are scaled by of / timed."""

    unit: str  # "tokens" | "steps"
    timed: int
    of: int

    @property
    def option(self) -> str:
        return "length" if self.unit == "tokens" else "steps"

    @property
    def share(self) -> float:
        return self.timed / self.of

    def why(self) -> str:
        if self.unit == "tokens":
            return "every step of the static-shape graph computes over the whole cache"
        return "each step runs the same static-shape graph on the same shapes"


def tokens_per_row(bundle: Bundle, decode: Mapping[str, Any]) -> int | None:
    """The tokens one row's decode decides: masked every position, AR its length (the decode
    options ``decode``'s, else the bundle's decode defaults', else the cache's size); None for flow."""
    length = decode.get("length") if bundle.kind == "ar" else None
    return int(length) if length else bundle.tokens_per_row


def speed_part(
    bundle: Bundle, decode: Mapping[str, Any], decode_s: float | None = None, bucketed: bool = False
) -> SpeedPart | None:
    """What the speed timing decodes where it is less than a whole decode, else None: an AR
    decode over SPEED_AR_TOKENS tokens, its first SPEED_AR_TOKENS; a masked or flow decode whose
    first FP32 decode took ``decode_s`` seconds, the steps that take about SPEED_PART_S (whole
    where that is all of them, where the decode is not timed yet, or where the INT8 model is
    ``bucketed`` by step: every bucket's graph must run)."""
    if bundle.kind == "ar":
        full = tokens_per_row(bundle, decode)
        return SpeedPart("tokens", SPEED_AR_TOKENS, full) if full and full > SPEED_AR_TOKENS else None
    if decode_s is None or decode_s <= 0 or bucketed:
        return None
    steps = int(decode_config(bundle.kind, bundle.decode_defaults, decode).steps)
    timed = max(1, math.ceil(steps * SPEED_PART_S / decode_s))
    return SpeedPart("steps", timed, steps) if timed < steps else None


def timed_share(part: SpeedPart | None) -> float:
    """The share of a decode the speed timing decodes (``speed_part``)."""
    return 1.0 if part is None else part.share


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
