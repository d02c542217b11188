"""Verification of an exported graph: run it and torch on the same inputs, compare outputs.

Inputs are of two sorts: random values inside each input's declared range, and states the
decode loop really produces (mid-decode masked sequences; noisy flow states at several times;
KV caches filled by running the step itself), where the numerics that matter live.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from edgekit.decode.ar import ARDecodeConfig, decode_ar
from edgekit.export.config import VerifyConfig
from edgekit.manifest_sections import OutputError
from edgekit.runtimes.base import Runtime, RuntimeProxy
from edgekit.spec import ModelSpec, TensorSpec


def random_feed(specs: Mapping[str, TensorSpec], rng: np.random.Generator) -> dict[str, np.ndarray]:
    feed = {}
    for name, s in specs.items():
        if s.dtype.startswith("int"):
            lo = int(s.low if s.low is not None else 0)
            hi = int(s.high if s.high is not None else 2)
            feed[name] = rng.integers(lo, hi, s.shape).astype(s.dtype)
        elif s.dtype == "bool":
            feed[name] = rng.random(s.shape) < 0.5
        else:
            lo = s.low if s.low is not None else -1.0
            hi = s.high if s.high is not None else 1.0
            feed[name] = rng.uniform(lo, hi, s.shape).astype(s.dtype)
    return feed


def trajectory_feeds(
    spec: ModelSpec, reference: Runtime, n: int, rng: np.random.Generator
) -> list[dict[str, np.ndarray]]:
    """``n`` inputs shaped like real decode states for ``spec.kind``."""
    feeds = []
    meta = spec.meta
    for i in range(n):
        feed = random_feed(spec.inputs, rng)
        if spec.kind == "masked":
            # A decode midway: a share of positions still [MASK], the rest real codebook ids.
            ratio = (i + 1) / (n + 1)
            tokens = rng.integers(0, meta["vocab_size"], spec.inputs["tokens"].shape)
            feed["tokens"] = np.where(rng.random(tokens.shape) < ratio, meta["mask_id"], tokens).astype(np.int64)
        elif spec.kind == "flow":
            # x_t on the straight path between unit noise and a data-scale state, at time t.
            t = np.full(spec.inputs["t"].shape, (i + 0.5) / n, dtype=np.float32)
            noise = rng.standard_normal(spec.inputs["x"].shape)
            data = rng.uniform(0.0, 1.0, spec.inputs["x"].shape)
            feed["x"] = ((1 - t[:, None, None]) * noise + t[:, None, None] * data).astype(np.float32)
            feed["t"] = t
        elif spec.kind == "ar":
            feed.update(_filled_cache(spec, reference, rng, steps=1 + (i * meta["max_len"]) // max(1, n)))
        feeds.append(feed)
    return feeds


class _FeedAt(RuntimeProxy):
    """Forwards every run; keeps a copy of the feeds of call number ``at`` (0-based)."""

    def __init__(self, inner: Runtime, at: int):
        super().__init__(inner, owns_inner=False)
        self.at, self.calls, self.feed = at, 0, None

    def run(self, feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        if self.calls == self.at:
            self.feed = {name: np.array(arr, copy=True) for name, arr in feeds.items()}
        self.calls += 1
        return self.inner.run(feeds)


def _filled_cache(spec: ModelSpec, reference: Runtime, rng: np.random.Generator, steps: int) -> dict[str, np.ndarray]:
    """The inputs of AR step ``steps`` of a greedy decode from empty caches: ``decode_ar`` itself
    fills them (either cache form), with conditioning drawn in the declared ranges."""
    drawn = random_feed(spec.inputs, rng)
    cond = {name: drawn[name] for name in spec.meta.get("conditioning") or {}}
    steps = min(steps, spec.meta["max_len"] - 1)
    probe = _FeedAt(reference, steps)
    decode_ar(probe, spec.meta, cond, ARDecodeConfig(length=steps + 1, temperature=0.0))
    return probe.feed


def compare(
    reference: Runtime, candidate: Runtime, feeds: list[dict[str, np.ndarray]], cfg: VerifyConfig
) -> dict[str, Any]:
    """Max errors per output over all feeds, and whether each is within atol + rtol·scale.
    A NaN or Inf anywhere (either side) fails the output, with the count: ``max`` would
    otherwise skip over NaN and call the graph verified."""
    worst: dict[str, tuple[float, float, int]] = {}
    for feed in feeds:
        ref = {k: np.array(v, dtype=np.float64) for k, v in reference.run(feed).items()}
        got = {k: np.array(v, dtype=np.float64) for k, v in candidate.run(feed).items()}
        for name, r in ref.items():
            g = got[name]
            bad = int(np.count_nonzero(~np.isfinite(r)) + np.count_nonzero(~np.isfinite(g)))
            ok = np.isfinite(r) & np.isfinite(g)
            abs_err = float(np.max(np.abs(g - r), where=ok, initial=0.0)) if r.size else 0.0
            scale = float(np.max(np.abs(r), where=ok, initial=0.0)) if r.size else 0.0
            prev = worst.get(name, (0.0, 0.0, 0))
            worst[name] = (max(prev[0], abs_err), max(prev[1], scale), prev[2] + bad)
    outputs = {}
    for name, (abs_err, scale, bad) in worst.items():
        tol = cfg.atol + cfg.rtol * scale
        rel = abs_err / scale if scale > 0 else abs_err
        outputs[name] = OutputError(abs_err, rel, tol, bool(abs_err <= tol and bad == 0), bad).__dict__
    return {
        "passed": all(o["passed"] for o in outputs.values()),
        "samples": len(feeds),
        "atol": cfg.atol,
        "rtol": cfg.rtol,
        "outputs": outputs,
    }


def verification_feeds(spec: ModelSpec, reference: Runtime, cfg: VerifyConfig) -> list[dict[str, np.ndarray]]:
    rng = np.random.default_rng(cfg.seed)
    feeds = [random_feed(spec.inputs, rng) for _ in range(cfg.random_samples)]
    return feeds + trajectory_feeds(spec, reference, cfg.trajectory_samples, rng)
