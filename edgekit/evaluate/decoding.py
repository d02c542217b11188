"""Decoding an evaluation set: ``n`` rows in batches of the graph's static batch, batch ``i``
under seed ``seed + i``, so the same rows get the same noise on every runtime."""

from __future__ import annotations

from typing import Any, Mapping

import numpy as np

from edgekit.bundle import Bundle
from edgekit.decode.dispatch import decode, decode_config
from edgekit.evaluate.conditions import conditions, graph_batch, pad_rows
from edgekit.evaluate.scores import score


def evaluate(
    bundle: Bundle,
    runtime: Any,
    n: int,
    seed: int = 0,
    decode_options: Mapping[str, Any] | None = None,
    cond: Mapping[str, np.ndarray] | None = None,
) -> dict[str, Any]:
    """Decode ``n`` rows (in batches of the graph's batch) on an open ``runtime``; returns the
    stacked ``output``, ``cond`` and the ground-truth ``quality`` where the model has one.
    Batch ``i`` uses seed ``seed + i``: the same rows get the same noise on every runtime."""
    batch = graph_batch(bundle)
    n_batches = -(-n // batch)
    outputs, conds = [], []
    for i in range(n_batches):
        if cond is None:
            c = conditions(bundle, {}, batch, seed + i, draw=True)
        else:
            c = {k: pad_rows(v[i * batch : (i + 1) * batch], batch) for k, v in cond.items()}
        cfg = decode_config(bundle.kind, bundle.manifest.get("decode_defaults", {}), decode_options or {}, seed=seed + i)
        outputs.append(decode(bundle.kind, runtime, bundle.meta, c, cfg).output.copy())
        conds.append(c)
    output = np.concatenate(outputs)[:n]
    cond_all = {k: np.concatenate([c[k] for c in conds])[:n] for k in conds[0]}
    return {"output": output, "cond": cond_all, "quality": score(bundle, output, cond_all)}
