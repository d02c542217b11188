"""The reference's decode trajectory, replayed teacher-forced on both variants.

``record`` decodes the replay rows with the reference (the same conditions, seeds and decode
settings as ``check``'s gate: batch i with seed + i) and keeps every network call's feeds
(``runtimes.recording.RecordingRuntime``) with the decode step it belongs to. ``replay`` runs
both tapped variants on exactly those feeds and sums, per step and per captured tensor, the
squared error of the candidate against the reference and the reference's power.
``drift`` compares the candidate's own decode from the same noise (``record`` on it) with the
reference's: how far its trajectory drifts, step by step (whether an error compounds).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from edgekit.bundle import Bundle
from edgekit.debug.taps import Tapped
from edgekit.decode.dispatch import decode, decode_config
from edgekit.evaluate import conditions
from edgekit.evaluate import power_ratio_db as sqnr_db
from edgekit.runtimes.base import Runtime
from edgekit.runtimes.recording import RecordingRuntime
from edgekit.spec import KIND_IO


@dataclass
class Trajectory:
    """Every network call of the replayed decodes. feeds[i]: the call's inputs; step[i]: its
    decode step (0-based; CFG or a multi-stage solver makes several calls per step)."""

    feeds: list[dict[str, np.ndarray]]
    step: list[int]
    steps: int
    decodes: int
    outputs: list[np.ndarray]  # each decode's final output (tokens or frames)

    def calls_of(self, step: int) -> list[int]:
        return [i for i, s in enumerate(self.step) if s == step]

    def firsts(self, step: int) -> list[int]:
        """The first call of ``step`` in every decode."""
        return [i for i in self.calls_of(step) if i == 0 or self.step[i - 1] != step]


def record(
    bundle: Bundle,
    runtime: Runtime,
    n: int,
    seed: int,
    decode_options: Mapping[str, Any],
    rows: Mapping[str, np.ndarray] | None,
) -> Trajectory:
    """Decode ``n`` rows (whole graph batches) with ``runtime`` and keep every call's feeds."""
    batch = bundle.batch
    rec = RecordingRuntime(runtime, bundle.kind, bundle.meta)
    steps_of: list[int] = []
    outputs, steps = [], 1
    for i in range(-(-n // batch)):
        part = None if rows is None else {k: v[i * batch : (i + 1) * batch] for k, v in rows.items()}
        cond = conditions(bundle, {}, batch, seed + i, rows=part, draw=True)
        cfg = decode_config(bundle.kind, bundle.decode_defaults, decode_options, seed=seed + i)
        rec.begin_decode()
        before = len(rec.feeds)
        done = decode(bundle.kind, rec, bundle.meta, cond, cfg)
        calls = len(rec.feeds) - before
        per_step = max(1, calls // max(1, done.steps))
        steps = max(steps, done.steps)
        steps_of += [min(c // per_step, done.steps - 1) for c in range(calls)]
        outputs.append(np.array(done.output, copy=True))
    return Trajectory(rec.feeds, steps_of, steps, -(-n // batch), outputs)


@dataclass
class Replay:
    """Per step and captured tensor: noise[s, j] = Σ (cand − ref)², signal[s, j] = Σ ref²."""

    tensors: list[str]
    noise: np.ndarray  # float64 [steps, tensors]
    signal: np.ndarray
    outputs_changed_by_taps: float  # max |Δ| of the candidate's graph outputs, tapped vs not (0: taps changed nothing)

    def sqnr(self) -> list[dict[str, float]]:
        """Per step: {tensor: SQNR dB} of the tensors both variants produced."""
        return [
            {t: sqnr_db(self.signal[s, j], self.noise[s, j]) for j, t in enumerate(self.tensors)}
            for s in range(len(self.noise))
        ]


def replay(
    traj: Trajectory,
    ref: Tapped,
    cand: Tapped,
    plain_first: Mapping[str, np.ndarray],
    say: Callable[[str], None] = lambda m: None,
) -> Replay:
    """Both tapped variants on every recorded feed, streamed: each call's captures are reduced to
    their per-tensor sums and dropped before the next call runs (at size one call's capture is
    gigabytes; memory does not grow with the calls). ``plain_first``: the untapped candidate's
    graph outputs on the first feed, compared with the tapped one's (a tap must not change what it
    observes)."""
    tensors = [t for t in ref.names if t in cand.names]
    noise = np.zeros((traj.steps, len(tensors)))
    signal = np.zeros((traj.steps, len(tensors)))
    changed = 0.0
    for i, (feeds, step) in enumerate(zip(traj.feeds, traj.step)):
        if i % 16 == 0:
            say(f"replay call {i + 1}/{len(traj.feeds)} on both variants")
        r, c = ref.runtime.run(feeds), cand.runtime.run(feeds)
        if i == 0:
            changed = max(
                (float(np.max(np.abs(np.asarray(c[k], np.float64) - v), initial=0.0)) for k, v in plain_first.items()),
                default=0.0,
            )
        for j, t in enumerate(tensors):
            x = np.asarray(r[ref.names[t]], np.float64)
            y = np.asarray(c[cand.names[t]], np.float64)
            if x.size != y.size:
                continue
            noise[step, j] += float(np.sum((y.reshape(x.shape) - x) ** 2))
            signal[step, j] += float(np.sum(x**2))
        del r, c
    keep = [j for j in range(len(tensors)) if signal[:, j].any() or noise[:, j].any()]
    return Replay([tensors[j] for j in keep], noise[:, keep], signal[:, keep], changed)


def drift(kind: str, traj: Trajectory, cand: Trajectory) -> list[float]:
    """How far the candidate's own decode ``cand`` (same rows, seeds and settings) is from the
    reference's ``traj``, per step: the share of state tokens that differ (masked, ar) or the
    relative RMS of the state (flow), at the first call of each step, then the final output."""
    state = KIND_IO[kind][0][0]
    out = []
    for step in range(min(traj.steps, cand.steps)):
        a = [traj.feeds[i][state] for i in traj.firsts(step)]
        b = [cand.feeds[i][state] for i in cand.firsts(step)]
        out.append(_difference(kind, a, b))
    out.append(_difference(kind, traj.outputs, cand.outputs))
    return out


def _difference(kind: str, a: list[np.ndarray], b: list[np.ndarray]) -> float:
    if not a or not b:
        return float("nan")
    x = np.concatenate([np.ravel(v) for v in a]).astype(np.float64)
    y = np.concatenate([np.ravel(v) for v in b]).astype(np.float64)
    if x.shape != y.shape:
        return float("nan")
    if kind == "flow":
        return float(np.sqrt(np.sum((x - y) ** 2) / max(float(np.sum(x**2)), 1e-30)))
    return float(np.mean(x != y))
