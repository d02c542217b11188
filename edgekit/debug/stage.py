"""The debug stage: where a variant's error enters a decode, why, and (``--fix``) the smallest
change that makes ``check`` pass.

    check's gate on both variants (the rows, seed and decode settings quantize judged) ->
    record the reference's decode (every call's feeds) -> replay it teacher-forced on both
    variants, every tensor captured (``taps``) -> SQNR per step × tensor -> the first step and op
    where the added noise crosses the threshold (``topology.locate``) -> attribution (weights,
    activation range, accumulation) and whether it compounds -> [--fix: smallest fixes, each
    proven with the gate; the winner written into the bundle and re-quantized] -> document

Returns the ``edgekit.debug/1`` document; ``passed`` is check's verdict on the candidate as it
is at the end (after the fix where one was written), which the CLI turns into check's exit codes.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from edgekit._lock import owned_tempdir
from edgekit._sidefiles import model_bytes
from edgekit.bundle import Bundle, now_iso
from edgekit.check import (
    CheckConfig,
    RuntimePrecision,
    eval_rows,
    parse_variant,
)
from edgekit.debug.attribute import attribute, compounding
from edgekit.debug.config import SCHEMA, DebugConfig
from edgekit.debug.fix import (
    candidates,
    commit,
    ordered,
    recorded_config,
    search,
    step_bucket,
)
from edgekit.debug.local import LocalJudge
from edgekit.debug.qdq import quantized_ops
from edgekit.debug.replay import Replay, Trajectory, drift, record, replay
from edgekit.debug.taps import artifact_at, artifact_for, debug_hooks, open_tapped, open_variant
from edgekit.debug.topology import (
    Entry,
    Topology,
    layer_rows,
    locate,
    own_db,
    read_topology,
    suspects,
)
from edgekit.errors import UsageError
from edgekit.evaluate import gate_runtimes
from edgekit.host import HostFacts
from edgekit.quantize import graph_without_weights, module_labels, tensor_bytes
from edgekit.resources import BASE_MEMORY, Need, gib, preflight
from edgekit.runtimes.onnx_file import load_onnx

Say = Callable[[str], None]
MAX_ATTRIBUTION_CALLS = 8  # feeds of the entry step the attribution runs on


@dataclass
class Settings:
    """What the gate and the replay decode: the check config resolved for the bundle."""

    ref: RuntimePrecision
    cand: RuntimePrecision
    n: int
    seed: int
    decode: dict[str, Any]
    rows: Mapping[str, np.ndarray] | None  # condition rows [n, ...], or None: the seeded rule
    conditions: str
    replay_rows: int


@dataclass
class Measured:
    gate: dict[str, Any]
    traj: Trajectory
    divergence: list[float]
    replay: Replay
    capture: dict[str, Any]
    devices: dict[str, str]
    warnings: list[str]
    entry: Entry | None  # where the error enters (``topology.locate``)


@dataclass
class Explained:
    """Why the error enters at ``Measured.entry``: what in the op's quantization adds the noise
    (``attribute``) and whether it compounds over the steps (``compounding``); None without an entry."""

    attribution: dict[str, Any] | None = None
    compounding: dict[str, Any] | None = None


def resolve(bundle: Bundle, cfg: DebugConfig) -> Settings:
    ref = parse_variant(cfg.reference, cfg.runtime, "--reference")
    cand = parse_variant(cfg.candidate, cfg.runtime, "--candidate")
    if ref == cand:
        raise UsageError(
            f"--reference and --candidate are both {ref}: nothing to compare",
            hint="e.g. --reference ort:fp32 --candidate ort:int8",
        )
    debug_hooks(ref.runtime, "--reference")  # a runtime debug cannot tap: one line now, not after the gate
    debug_hooks(cand.runtime, "--candidate")
    if cfg.fix and cand.precision != "int8":
        raise UsageError(
            f"--fix re-quantizes the int8 model; --candidate {cand} is not one",
            hint="debug an int8 variant, e.g. --candidate ort:int8",
        )
    check = CheckConfig(n=cfg.n, seed=cfg.seed, cond_data=cfg.cond_data).resolved(bundle)
    rows, source = eval_rows(bundle, check)
    n = check.n if rows is None else min(check.n, len(next(iter(rows.values()))))
    replay_rows = min(cfg.rows or bundle.batch, n) if rows is not None else (cfg.rows or bundle.batch)
    return Settings(ref, cand, n, check.seed, dict(check.decode), rows, source, replay_rows)


def gate_on(path: Path, s: Settings, cfg: DebugConfig, tmp: Path) -> dict[str, Any]:
    """check's default gate on the bundle at ``path`` (the same rows, seed and decode settings)."""
    bundle = Bundle.load(path)
    with (
        open_variant(bundle, s.ref.runtime, s.ref.precision, tmp, cfg.threads, cfg.target) as r,
        open_variant(bundle, s.cand.runtime, s.cand.precision, tmp, cfg.threads, cfg.target) as c,
    ):
        return gate_runtimes(bundle, r, c, s.n, s.seed, s.decode, s.rows)


def measure(bundle: Bundle, s: Settings, cfg: DebugConfig, topo: Topology, tmp: Path, say: Say) -> Measured:
    """The gate, the reference trajectory, the candidate's own decode and the teacher-forced replay.

    One session per variant at a time: the plain ones (gate, decodes) are closed before the tapped
    ones open (at size each fp32 session holds the model's weights)."""
    with (
        open_variant(bundle, s.ref.runtime, s.ref.precision, tmp, cfg.threads, cfg.target) as ref_rt,
        open_variant(bundle, s.cand.runtime, s.cand.precision, tmp, cfg.threads, cfg.target) as cand_rt,
    ):
        say(f"check's gate: {s.cand} vs {s.ref} on {s.n} rows")
        gate = gate_runtimes(bundle, ref_rt, cand_rt, s.n, s.seed, s.decode, s.rows)
        say(f"record {s.ref}'s decode of {s.replay_rows} row(s), and {s.cand}'s own")
        traj = record(bundle, ref_rt, s.replay_rows, s.seed, s.decode, s.rows)
        divergence = drift(bundle.kind, traj, record(bundle, cand_rt, s.replay_rows, s.seed, s.decode, s.rows))
        # what the tapped candidate's outputs are compared with (a tap must not change them)
        plain_first = {k: np.array(v, np.float64) for k, v in cand_rt.run(traj.feeds[0]).items()}
        devices = {"reference": ref_rt.device, "candidate": cand_rt.device}
        warnings = [*ref_rt.warnings, *cand_rt.warnings]
    say(f"replay {len(traj.feeds)} network calls teacher-forced, every tensor captured")
    ref_t = open_tapped(bundle, s.ref.runtime, s.ref.precision, topo, tmp, cfg.threads, cfg.target)
    try:
        cand_t = open_tapped(bundle, s.cand.runtime, s.cand.precision, topo, tmp, cfg.threads, cfg.target)
        try:
            rep = replay(traj, ref_t, cand_t, plain_first, say)
            say("find the first step and op where the added noise crosses the threshold")
            per_step = rep.sqnr()
            judge = LocalJudge(
                bundle.path_of("fp32"),
                topo,
                traj,
                ref_t,
                cand_t,
                tmp,
                cfg.threads,
                plan=lambda step: suspects(topo, per_step[step], cfg.threshold_db),
            )
            entry = locate(
                topo, per_step, cfg.threshold_db, judge.own_db, judge.prefetch, candidate_quantizes(bundle, s, topo)
            )
        finally:
            cand_t.close()
    finally:
        ref_t.close()
    capture = {
        "reference": ref_t.method,
        "candidate": cand_t.method,
        "tensors": len(rep.tensors),
        "outputs_changed_by_taps": rep.outputs_changed_by_taps,
    }
    if rep.outputs_changed_by_taps > 1e-4:
        warnings.append(
            f"capturing tensors changed {s.cand}'s outputs (max |Δ| {rep.outputs_changed_by_taps:.3g}): the per-tensor "
            "numbers are of the tapped graph, not exactly the deployed one"
        )
    return Measured(gate, traj, divergence, rep, capture, devices, warnings, entry)


def candidate_quantizes(bundle: Bundle, s: Settings, topo: Topology) -> set[str] | None:
    """The reference ops the candidate quantizes (an int8 variant's QDQ graph; step buckets
    differ only in scales), None for a float candidate."""
    if s.cand.precision != "int8":
        return None
    model = load_onnx(bundle.path_of("int8"), "artifact 'int8'")  # the graph, not its weights
    return quantized_ops(model, (op.name for op in topo.ops))


def explain(bundle: Bundle, s: Settings, cfg: DebugConfig, topo: Topology, m: Measured, tmp: Path) -> Explained:
    """Why the error enters at ``m.entry``."""
    entry = m.entry
    if entry is None:
        return Explained()
    per_step = m.replay.sqnr()
    crossing = [
        i
        for i, step in enumerate(per_step)
        if own_db(topo, step).get(entry.op.name, {}).get("own_db", float("inf")) < cfg.threshold_db
    ]
    comp = compounding(entry.step, crossing, m.divergence, [step.get(entry.tensor, float("nan")) for step in per_step])
    if s.cand.precision != "int8":
        reason = f"{s.cand} computes in {s.cand.precision}: no integer quantization to take apart"
        return Explained({"cause": "precision", "why": reason}, comp)
    isa = HostFacts.detect().isa_class if cfg.isa == "host" else cfg.isa
    feeds = [m.traj.feeds[i] for i in m.traj.calls_of(entry.step)[:MAX_ATTRIBUTION_CALLS]]
    graph = artifact_at(bundle, s.cand.runtime, s.cand.precision, feeds[0])  # a step bucket's own graph
    return Explained(
        attribute(bundle.path_of(graph), bundle.path_of("fp32"), entry, feeds, s.cand.runtime, isa, tmp), comp
    )


def run_fix(
    bundle: Bundle, s: Settings, cfg: DebugConfig, m: Measured, why: Explained, tmp: Path, say: Say
) -> dict[str, Any]:
    """--fix: try the fixes, write the winner (``fix`` module)."""
    entry, attribution = m.entry, why.attribution or {}
    if m.gate["passed"]:
        return {"tried": [], "unavailable": [], "winner": None, "why": "check already passes: nothing to fix"}
    if entry is None:
        return {
            "tried": [],
            "unavailable": [],
            "winner": None,
            "why": "no tensor of the two variants could be compared",
        }
    base = recorded_config(bundle)
    q = bundle.quantization
    profile = str((q.profile if q is not None else None) or base.profile)
    source = f"edgekit debug {bundle.root} --fix ({s.cand} vs {s.ref})"
    bucket = step_bucket(base)
    unavailable = [bucket] if isinstance(bucket, dict) else []
    tries = ordered(
        candidates(profile, entry, attribution, source), bucket, bool((why.compounding or {}).get("step_dependent"))
    )
    winner, trials = search(bundle, tries, base, lambda p: gate_on(p, s, cfg, tmp), tmp, say)
    doc: dict[str, Any] = {"tried": trials, "unavailable": unavailable, "winner": None}
    if winner is None:
        doc["why"] = f"none of {len(trials)} fix(es) made check pass"
        return doc
    provenance = {
        "reference": str(s.ref),
        "candidate": str(s.cand),
        "step": entry.step + 1,
        "node": entry.shown.name,
        "module": entry.shown.label,
        "added_sqnr_db": entry.own_db,
        "cause": attribution.get("cause"),
    }
    committed = commit(bundle.root, winner, base, provenance, lambda p: gate_on(p, s, cfg, tmp), say)
    doc["winner"] = {
        "kind": winner.kind,
        "what": winner.what,
        "overrides": [dict(o) for o in winner.overrides],
    } | committed
    return doc


def debug_bundle(path: Path | str, cfg: DebugConfig = DebugConfig(), progress: Say | None = None) -> dict[str, Any]:
    """Debug ``cfg.candidate`` against ``cfg.reference`` on the bundle at ``path``; the
    ``edgekit.debug/1`` document (see the module docstring)."""
    say = progress or (lambda message: None)
    start = time.perf_counter()
    bundle = Bundle.load(path)
    s = resolve(bundle, cfg)
    if cfg.fix:
        recorded_config(bundle)  # no quantize config: one line now, not after minutes of replay
    fp32 = bundle.path_of("fp32")
    load_onnx(fp32, "artifact 'fp32'")  # corrupt bytes whose hash was re-recorded: one line, not a DecodeError
    topo = read_topology(fp32, module_labels(fp32))
    preflight("debug", debug_needs(bundle, s, topo), say)
    with owned_tempdir("edgekit-debug-") as tmp:
        m = measure(bundle, s, cfg, topo, tmp, say)
        why = explain(bundle, s, cfg, topo, m, tmp)
        fixed = run_fix(bundle, s, cfg, m, why, tmp, say) if cfg.fix else None
    doc = document(bundle, s, cfg, topo, m, why, fixed)
    doc["wall_s"] = time.perf_counter() - start
    return doc


def debug_needs(bundle: Bundle, s: Settings, topo: Topology) -> list[Need]:
    """The memory the replay holds at once: each variant's session with its model's weights, and
    three captures of one call's float tensors (counted from the FP32 graph's static shapes): the
    reference's, held while the candidate's run returns its own, whose ONNX Runtime outputs and
    their numpy copies are both alive as the run returns. aMUSEd-256: 2.8 GiB of weights (FP32
    and INT8) and 2.2 GiB a capture give 10.1 GiB with the base; `debug --rows 1` peaked at 9.6
    GiB (2026-12-07; 9.9 GiB before: docs/large-models.md)."""
    fp32 = Path(bundle.path_of("fp32"))
    sizes = tensor_bytes(graph_without_weights(fp32))
    capture = sum(sizes.get(t, 0) for t in set(topo.floats))
    weights = sum(
        model_bytes(Path(bundle.path_of(artifact_for(bundle, v.runtime, v.precision)))) for v in (s.ref, s.cand)
    )
    what = f"both variants' {gib(weights)} of weights and 3x one call's {gib(capture)} capture of every tensor"
    return [Need("memory", weights + 3 * capture + BASE_MEMORY, what)]


def document(
    bundle: Bundle,
    s: Settings,
    cfg: DebugConfig,
    topo: Topology,
    m: Measured,
    why: Explained,
    fixed: dict[str, Any] | None,
) -> dict[str, Any]:
    per_step = m.replay.sqnr()
    labels, grid = layer_rows(topo, per_step)
    label_of = {o: op.label for op in topo.ops for o in op.outputs}
    winner = (fixed or {}).get("winner")
    final = winner["after"] if winner else m.gate
    return {
        "schema": SCHEMA,
        "created": now_iso(),
        "bundle": str(bundle.root),
        "model": bundle.name,
        "kind": bundle.kind,
        "reference": str(s.ref),
        "candidate": str(s.cand),
        "devices": m.devices,
        "settings": {
            "n": s.n,
            "seed": s.seed,
            "decode": s.decode,
            "conditions": s.conditions,
            "replay_rows": s.replay_rows,
            "threshold_db": cfg.threshold_db,
            "target": cfg.target,
        },
        "capture": m.capture,
        "steps": m.traj.steps,
        "calls": len(m.traj.feeds),
        "sqnr": {
            "tensors": m.replay.tensors,
            "modules": [label_of.get(t, t) for t in m.replay.tensors],
            "per_step": [[step[t] for t in m.replay.tensors] for step in per_step],
        },
        "layers": {"labels": labels, "per_step": grid.T.tolist()},
        "entry": m.entry.to_json(m.traj.steps) if m.entry else None,
        "attribution": why.attribution,
        "compounding": why.compounding,
        "gate": m.gate,
        "fix": fixed,
        "passed": bool(final["passed"]),
        "failed": list(final["failed"]),
        "margin": final["margin"],
        "warnings": m.warnings,
    }
