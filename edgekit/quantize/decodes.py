"""How much of a model's decode quantize runs: the tokens one row decides (what the auto sample
counts weigh, ``QuantizeConfig.with_samples``), and the share of a decode the INT8-against-FP32
timing decodes."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from edgekit.bundle import Bundle

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
