"""Decoding an evaluation set: ``n`` rows in batches of the graph's static batch, batch ``i``
under seed ``seed + i``, so the same rows get the same noise on every runtime."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from edgekit.bundle import Bundle
from edgekit.decode.dispatch import decode_config, decode_rows
from edgekit.evaluate.conditions import condition_rows, pad_rows
from edgekit.evaluate.scores import score


def evaluate(
    bundle: Bundle,
    runtime: Any,
    n: int,
    seed: int = 0,
    decode_options: Mapping[str, Any] | None = None,
    cond: Mapping[str, np.ndarray] | None = None,
    each_batch: Callable[[int], None] | None = None,
    after_batch: Callable[[int, np.ndarray], None] | None = None,
) -> dict[str, Any]:
    """Decode ``n`` rows (in batches of the graph's batch) on an open ``runtime``; returns the
    stacked ``output``, ``cond`` and the ground-truth ``quality`` where the model has one.
    Batch ``i`` uses seed ``seed + i``: the same rows get the same noise on every runtime.

    cond: the rows [>= n, ...] to decode; None = the bundle's seeded rule, drawn per batch
    (batch ``i`` with seed ``seed + i``, whole batches). each_batch(i): runs before batch i;
    after_batch(i, output [batch, ...]): after it (it may raise: the rows stop there)."""
    batch = bundle.batch
    calls = -(-n // batch)
    if cond is None:
        whole = condition_rows(bundle, {}, calls * batch, seed)
    else:
        whole = {
            k: np.concatenate([pad_rows(v[i * batch : (i + 1) * batch], batch) for i in range(calls)])
            for k, v in cond.items()
        }
    # Every batch's seed is checked before the first decode (the loop adds i to the seed).
    decode_config(bundle.kind, bundle.decode_defaults, decode_options or {}, seed=seed + max(calls - 1, 0))
    cfg = decode_config(bundle.kind, bundle.decode_defaults, decode_options or {}, seed=seed)
    decoded = decode_rows(
        bundle.kind,
        runtime,
        bundle.meta,
        whole,
        cfg,
        rows=calls * batch,
        batch=batch,
        each_call=each_batch,
        after_call=after_batch,
    )
    output = decoded.output[:n].copy()  # one call returns the runtime's own buffer
    cond_all = {k: v[:n] for k, v in whole.items()}
    return {"output": output, "cond": cond_all, "quality": score(bundle, output, cond_all)}
