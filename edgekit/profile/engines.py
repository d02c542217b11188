"""Which CPU engine is fastest on this host: whole decodes timed round-robin on every engine
installed here, for `edgekit demo`'s profile stage (it profiles on the winner and says which)."""

from __future__ import annotations

from typing import Any

import numpy as np

from edgekit.bundle import Bundle
from edgekit.decode.dispatch import decode, decode_config
from edgekit.probes.latency import SPIN_GAP_S, interleaved
from edgekit.profile.config import DecodeModel, bundle_conditions
from edgekit.runtimes import open_runtime
from edgekit.runtimes.registry import backend

# Engines the demo may profile on, in order of preference on a tie.
ENGINES: tuple[str, ...] = ("openvino", "ort")


def available_engines() -> list[str]:
    """The CPU engines this host can run (ONNX Runtime always; OpenVINO where installed)."""
    return [e for e in ENGINES if backend(e).requires.available()]


def fastest_engine(
    bundle: Bundle, precision: str, *, threads: int = 0, rounds: int = 5, seed: int = 0
) -> dict[str, Any]:
    """The engine of ``available_engines()`` that decodes ``bundle`` in ``precision`` fastest
    here: whole decodes (bundle defaults) timed round-robin, ``rounds`` per engine after one
    warm-up round, so load that comes and goes hits every engine alike; each after an idle gap,
    so no engine's spinning threads land on the next one's decode.
    {"runtime", "precision", "median_ms": {engine: ms}, "rounds", "candidates"}."""
    model = DecodeModel.of(bundle)
    cfg = decode_config(model.kind, model.decode_defaults, {}, seed=seed)
    cond = bundle_conditions(bundle, bundle.batch, seed)
    engines = available_engines()
    runtimes = {e: open_runtime(bundle, e, precision, threads=threads) for e in engines}
    try:
        samples = interleaved(
            {e: (lambda rt=rt: decode(model.kind, rt, model.meta, cond, cfg)) for e, rt in runtimes.items()},
            rounds,
            gap_s=SPIN_GAP_S,
        )
    finally:
        for rt in runtimes.values():
            rt.close()
    medians = {e: float(np.median(v)) for e, v in samples.items()}
    best = min(engines, key=lambda e: (medians[e], ENGINES.index(e)))
    return {"runtime": best, "precision": precision, "median_ms": medians, "rounds": rounds, "candidates": engines}
