"""Two open runtimes decoded side by side, and ``edgekit check``'s default gate on them.

``decode_pair`` decodes one evaluation set with a reference and a candidate runtime under
identical noise (batch i with seed + i), the candidate shadowing every reference call
(``metrics.ShadowRecorder``: teacher-forced network metrics) and then decoding on its own
(trajectory metrics). ``gate_runtimes`` judges that with the default thresholds
(``thresholds``, ``verdict``): what `edgekit check` decides, shared by quantize's budget, debug
and check itself.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from edgekit.bundle import Bundle
from edgekit.decode.dispatch import decode, decode_config
from edgekit.evaluate.conditions import conditions
from edgekit.evaluate.metrics import ShadowRecorder, accumulator_for, quality_drops
from edgekit.evaluate.scores import score
from edgekit.evaluate.thresholds import QUALITY_PREFIX, load_thresholds
from edgekit.evaluate.verdict import compare


def decode_pair(
    bundle: Bundle,
    ref_rt: Any,
    cand_rt: Any,
    n: int,
    seed: int,
    overrides: Mapping[str, Any],
    cand_overrides: Mapping[str, Any],
    rows: Mapping[str, np.ndarray] | None,
    cond: Mapping[str, str] | None = None,
    say: Callable[[str], None] = lambda message: None,
    each_batch: Callable[[int], None] | None = None,
) -> tuple[dict, dict, dict[str, np.ndarray], dict[str, np.ndarray]]:
    """Decode ``n`` rows with both open runtimes (batch i: seed ``seed + i``; ``cond``: --cond
    values, ``rows``: condition rows or None), the candidate shadowing every reference call;
    (scalar metrics, curves, outputs, conditions). ``each_batch(i)``: before batch i (a caller's
    ``plan.Eta``)."""
    kind, meta = bundle.kind, bundle.meta
    defaults = bundle.decode_defaults
    batch = bundle.batch
    acc = accumulator_for(kind, meta)
    outputs: dict[str, list[np.ndarray]] = {"reference": [], "candidate": []}
    conds: list[dict[str, np.ndarray]] = []
    # The candidate shadows every reference call (teacher-forced network metrics), then
    # decodes on its own with the same seed (trajectory metrics).
    rec_ref = ShadowRecorder(ref_rt, record=acc.state_input, shadow=cand_rt, on_pair=acc.on_pair)
    rec_cand = ShadowRecorder(cand_rt, record=acc.state_input)
    calls = -(-n // batch)
    for i in range(calls):
        say(f"decoding batch {i + 1}/{calls} ({batch} rows) with both variants")
        if each_batch is not None:
            each_batch(i)
        n_rows = min(batch, n - i * batch)
        part = None if rows is None else {k: v[i * batch : (i + 1) * batch] for k, v in rows.items()}
        batch_cond = conditions(bundle, dict(cond or {}), batch, seed + i, rows=part, draw=True)
        rec_ref.reset()
        rec_cand.reset()
        r = decode(kind, rec_ref, meta, batch_cond, decode_config(kind, defaults, overrides, seed=seed + i))
        c = decode(kind, rec_cand, meta, batch_cond, decode_config(kind, defaults, cand_overrides, seed=seed + i))
        acc.add(rec_ref, rec_cand, r, c, n_rows)
        outputs["reference"].append(r.output[:n_rows].copy())
        outputs["candidate"].append(c.output[:n_rows].copy())
        conds.append({k: v[:n_rows] for k, v in batch_cond.items()})
    scalars, curves = acc.result()
    out = {k: np.concatenate(v) for k, v in outputs.items()}
    cond_all = {k: np.concatenate([c[k] for c in conds]) for k in conds[0]} if conds and conds[0] else {}
    return scalars, curves, out, cond_all


def gate_runtimes(
    bundle: Bundle,
    ref_rt: Any,
    cand_rt: Any,
    n: int,
    seed: int,
    decode_options: Mapping[str, Any],
    rows: Mapping[str, np.ndarray] | None = None,
    each_batch: Callable[[int], None] | None = None,
) -> dict[str, Any]:
    """What ``edgekit check`` with default arguments decides for two open runtimes (quantize
    runs it on every candidate INT8 model, so "budget met" implies "check passes"; debug judges
    both variants and every fix with it): the default
    thresholds, ``n`` rows from ``seed``, ``decode_options`` on both, conditions ``rows`` (None:
    the seeded rule). Returns {"metrics", "passed", "failed", "margin"}; margin: the smallest
    relative distance to a gated threshold (< 0: that metric fails). ``each_batch(i)``: before the
    decodes of graph batch i."""
    thresholds = load_thresholds(bundle.kind)
    scalars, _, out, cond_all = decode_pair(
        bundle, ref_rt, cand_rt, n, seed, dict(decode_options), dict(decode_options), rows, each_batch=each_batch
    )
    drops = quality_drops(
        dict(score(bundle, out["reference"], cond_all) or {}), dict(score(bundle, out["candidate"], cond_all) or {})
    )
    metrics = {**scalars, **{QUALITY_PREFIX + k: v for k, v in drops.items()}}
    verdict = compare(metrics, thresholds, None)
    margins = []
    for row in verdict.rows:
        if row.threshold is None:
            continue
        if row.value is None or math.isnan(row.value):
            margins.append(-math.inf)
            continue
        gap = row.value - row.threshold if row.bound == "min" else row.threshold - row.value
        margins.append(gap / max(abs(row.threshold), 1e-3))
    return {
        "metrics": metrics,
        "passed": verdict.passed,
        "failed": verdict.failed,
        "margin": min(margins, default=math.inf),
    }
