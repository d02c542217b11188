"""Which CPU engine is fastest on this host: whole decodes timed round-robin on every engine
installed here, for `edgekit demo`'s profile stage (it profiles on the winner and says which).
An engine other than the recorded one wins only where it is surely faster (``probes.speed``);
within noise, the recorded one is kept and the choice says why."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from edgekit.bundle import Bundle
from edgekit.decode.dispatch import decode, decode_config
from edgekit.probes.latency import SPIN_GAP_S
from edgekit.probes.speed import FASTER, HostProbe, Timing, decide, measure_round
from edgekit.profile.config import DecodeModel, bundle_conditions
from edgekit.runtimes import open_runtime
from edgekit.runtimes.registry import backend

# Engines the demo may profile on, in order of preference on a tie.
ENGINES: tuple[str, ...] = ("openvino", "ort")
# The engine kept where no other is surely faster and the bundle recorded none (edgekit's default
# runtime: what `edgekit run` and the cpu target use).
DEFAULT_ENGINE = "ort"


def available_engines() -> list[str]:
    """The CPU engines this host can run (ONNX Runtime always; OpenVINO where installed)."""
    return [e for e in ENGINES if backend(e).requires.available()]


def recorded_engine(bundle: Bundle, precision: str, engines: list[str]) -> tuple[str, str]:
    """The safe choice among ``engines`` and what makes it so: the runtime of the first engine the
    bundle has built in ``precision`` (what `edgekit build` shipped), else DEFAULT_ENGINE, else
    the first."""
    built = [e.runtime for e in bundle.engines.values() if e.precision == precision and e.runtime in engines]
    if built:
        return str(built[0]), f"the engine `edgekit build` made in {precision}"
    if DEFAULT_ENGINE in engines:
        return DEFAULT_ENGINE, "edgekit's default runtime"
    return engines[0], "the first engine here"


def fastest_engine(
    bundle: Bundle,
    precision: str,
    *,
    threads: int = 0,
    rounds: int = 5,
    seed: int = 0,
    probe: HostProbe | None = None,
) -> dict[str, Any]:
    """The engine of ``available_engines()`` that decodes ``bundle`` in ``precision`` fastest
    here: whole decodes (bundle defaults) timed round-robin, ``rounds`` per engine after one
    warm-up round, so load that comes and goes hits every engine alike; each after an idle gap,
    so no engine's spinning threads land on the next one's decode. The fastest other engine
    against the recorded one (``recorded_engine``), timed again while they are within noise
    (``probes.speed.decide``); still within noise: the recorded one, and ``warning`` says so
    (one line).
    {"runtime", "precision", "median_ms": {engine: ms}, "rounds", "candidates", "recorded",
    "recorded_because", "verdict", "within_noise", "why", "warning", "decision"}."""
    model = DecodeModel.of(bundle)
    cfg = decode_config(model.kind, model.decode_defaults, {}, seed=seed)
    cond = bundle_conditions(bundle, bundle.batch, seed)
    engines = available_engines()
    recorded, because = recorded_engine(bundle, precision, engines)
    runtimes = {e: open_runtime(bundle, e, precision, threads=threads) for e in engines}
    fns = {e: (lambda rt=rt: decode(model.kind, rt, model.meta, cond, cfg)) for e, rt in runtimes.items()}

    def pair(timings: Mapping[str, Timing]) -> tuple[str, str]:
        others = [e for e in timings if e != recorded]
        return min(others, key=lambda e: timings[e].median_ms), recorded

    try:
        if len(engines) == 1:
            timings, decision = measure_round(fns, rounds, gap_s=SPIN_GAP_S, probe=probe), None
        else:
            decision = decide(fns, rounds, pair=pair, gap_s=SPIN_GAP_S, probe=probe)
            timings = decision.timings
    finally:
        for rt in runtimes.values():
            rt.close()
    doc: dict[str, Any] = {
        "precision": precision,
        "median_ms": {e: t.median_ms for e, t in timings.items()},
        "rounds": rounds,
        "candidates": engines,
        "recorded": recorded,
        "recorded_because": because,
        "verdict": decision.verdict if decision else None,
        "within_noise": bool(decision and not decision.sure),
        "warning": None,
        "decision": decision.to_json() if decision else None,
    }
    if decision is None:
        return doc | {"runtime": recorded, "why": "the only engine here"}
    other, speedup = decision.a, decision.speedup
    if decision.verdict == FASTER:
        return doc | {"runtime": other, "why": f"the fastest here, {speedup:.2f}x {recorded}'s speed per decode"}
    if decision.sure:
        return doc | {"runtime": recorded, "why": f"the fastest here ({other} ran {speedup:.2f}x its speed)"}
    why = f"{other} within noise of it after {decision.rounds} rounds ({decision.why()})"
    warning = f"profile engine: kept {recorded} ({because}): {why}"
    return doc | {"runtime": recorded, "why": f"kept ({because}): {why}", "warning": warning}
