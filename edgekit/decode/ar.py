"""The autoregressive baseline: one token per network call over a static-size KV cache.

Step i feeds the previous token (bos_id at i = 0) at position i with the caches; the graph
returns the logits of token i and either the caches with slot i written (the "graph" cache form)
or only token i's keys and values, which the loop writes at slot i (the "loop" and "layers"
forms, with a keep-mask ``attn_mask`` input: ``edgekit.spec.AR_CACHE_IO``). The loop holds each
cache as one array [n_layer, B, H, Lmax, hd] in every form; the "layers" form is fed each
layer's slice of it, a view (``edgekit.spec.ar_cache_feeds``). Noise contract: with
``temperature > 0`` each step draws float32 Gumbel noise [B, W] (``decode._noise.gumbel``) from
``np.random.default_rng(seed)``; greedy decoding draws nothing.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from edgekit.decode._guidance import GuidedNetwork, require_meta
from edgekit.decode._noise import gumbel
from edgekit.errors import EdgekitError, UsageError
from edgekit.runtimes.base import KeyedFeeds, Runtime, can_ping_pong
from edgekit.spec import ar_cache_feeds, ar_cache_form, ar_cache_layers

# Batch axes of the AR graph's state: caches are [n_layer, B, H, Lmax, hd] (k_new/v_new
# [n_layer, B, H, 1, hd]); pos and attn_mask are shared by every row.
_BATCH_AXES = {
    "pos": None,
    "attn_mask": None,
    "k_cache": 1,
    "v_cache": 1,
    "k_cache_out": 1,
    "v_cache_out": 1,
    "k_new": 1,
    "v_new": 1,
}


@dataclass(frozen=True)
class ARDecodeConfig:
    length: int | None = None  # tokens to generate; None = meta max_len, the cache's static size
    temperature: float = 0.0  # 0.0 = greedy, the deterministic baseline the masked model is compared with
    top_k: int = 0  # sample only among the k most likely tokens (0 = all); cuts the unreliable tail
    guidance: float = 1.0  # CFG scale g on logits, as for the masked model, so the baseline is like for like
    seed: int = 0  # every random draw comes from default_rng(seed), so runtimes can be compared token for token

    def __post_init__(self) -> None:
        if self.length is not None and (not isinstance(self.length, (int, np.integer)) or self.length < 1):
            raise UsageError(f"length={self.length!r} is invalid; valid: None or an integer >= 1")
        if self.temperature < 0:
            raise UsageError(f"temperature={self.temperature!r} is invalid; valid: >= 0 (0 = greedy)")
        if not isinstance(self.top_k, (int, np.integer)) or self.top_k < 0:
            raise UsageError(f"top_k={self.top_k!r} is invalid; valid: 0 (off) or an integer >= 1")
        if not np.isfinite(self.guidance):
            raise UsageError(f"guidance={self.guidance!r} is invalid; valid: a finite number (1.0 = off)")


@dataclass(frozen=True)
class ARResult:
    """tokens: int64 [B, length]; nfe: network evaluations (one per token, conditional and
    unconditional rows together); runtime_calls: ``runtime.run`` calls."""

    tokens: np.ndarray
    nfe: int
    runtime_calls: int


def decode_ar(
    runtime: Runtime,
    meta: Mapping[str, Any],
    cond: Mapping[str, np.ndarray] | None,
    cfg: ARDecodeConfig = ARDecodeConfig(),
    *,
    on_token: Callable[[int, np.ndarray], None] | None = None,
) -> ARResult:
    """Generate ``cfg.length`` tokens per row from an ``ar`` network.

    cond: {conditioning input: array [B, ...]}, exactly the names in meta["conditioning"]. With
    guidance the unconditional rows keep their own caches but follow the same (guided) tokens.
    on_token(i, tokens) runs after token i is sampled (tokens int64 [B, length], columns 0..i
    final): a streaming consumer starts on them while the rest are generated.
    """
    require_meta(meta, "ar", ("vocab_size", "max_len", "bos_id"))
    vocab, max_len = int(meta["vocab_size"]), int(meta["max_len"])
    length = max_len if cfg.length is None else cfg.length
    if length > max_len:
        raise UsageError(f"length={length} exceeds the cache's max_len; valid: 1..{max_len}")
    net = GuidedNetwork(runtime, meta, cond, cfg.guidance, kind="ar", batch_axes=_BATCH_AXES)
    b = net.batch
    form = ar_cache_form(runtime.inputs, runtime.outputs)
    if form == "layers":  # [n_layer, B, H, Lmax, hd] from the layers' own [B, H, Lmax, hd]
        cache_spec = runtime.inputs["k_cache_0"]
        cache_shape = [ar_cache_layers(runtime.inputs), *cache_spec.shape]
    else:
        cache_spec = runtime.inputs["k_cache"]
        cache_shape = list(cache_spec.shape)
    if cache_shape[3] != max_len:
        raise EdgekitError(
            f"meta max_len={max_len} but the graph's KV cache has {cache_shape[3]} slots ({list(cache_spec.shape)})"
        )
    cache_shape[1] = net.state_rows
    # The caches start as loop-owned zeros. In the loop and layers forms the loop writes each
    # token's K/V into them and unmasks the slot. In the graph form a double-buffered runtime
    # (outputs_stay_valid >= 2) ping-pongs them: step i's cache outputs are step i+1's inputs,
    # no copy of the [n_layer, B, H, Lmax, hd] tensors per token. Otherwise each output is copied
    # back in here (it may alias a buffer the next run reuses).
    loop_form = form != "graph"
    pingpong = can_ping_pong(runtime) and net.calls_per_run == 1
    k_cache = np.zeros(cache_shape, dtype=cache_spec.dtype)
    v_cache = np.zeros(cache_shape, dtype=cache_spec.dtype)
    token = np.full((b, 1), int(meta["bos_id"]), dtype=np.int64)
    pos = np.zeros(1, dtype=np.int64)
    rng = np.random.default_rng(cfg.seed)
    tokens = np.empty((b, length), dtype=np.int64)
    if loop_form:
        mask = np.zeros(
            runtime.inputs["attn_mask"].shape, dtype=runtime.inputs["attn_mask"].dtype
        )  # [1, Lmax]: all empty
        writes = _CacheWrites(k_cache, v_cache)

    for i in range(length):
        pos[0] = i
        caches = ar_cache_feeds(runtime.inputs, k_cache, v_cache)
        feeds = {"token": net.expand("token", token), "pos": pos, **caches}
        if loop_form:
            # The caches are keyed by the writes that made them: a memo underneath (quantize's)
            # then never reads their bytes (KeyedFeeds).
            outs = net.run(KeyedFeeds({**feeds, "attn_mask": mask}, dict.fromkeys(caches, writes.key)))
            k_cache[:, :, :, i] = outs["k_new"][:, :, :, 0]
            v_cache[:, :, :, i] = outs["v_new"][:, :, :, 0]
            writes.wrote(i)
            mask[..., i] = 1  # slot i is filled: step i+1 attends to it
        elif pingpong:
            outs = net.run(feeds)
            k_cache, v_cache = outs["k_cache_out"], outs["v_cache_out"]
        else:
            outs = net.run(feeds, into={"k_cache_out": k_cache, "v_cache_out": v_cache})
        logits = net.guide(outs["logits"])  # (B, W) float32
        tokens[:, i] = token[:, 0] = _sample(logits, vocab, cfg, rng)
        if on_token is not None:
            on_token(i, tokens)
    return ARResult(tokens, net.nfe, net.runtime_calls)


class _CacheWrites:
    """A key that names the content of the loop's caches exactly: a SHA-256 chain from their
    shape and dtype (all zeros) over every slot written since, with the slot's index and bytes.
    The loop is the caches' only writer, so equal keys mean equal contents; reading one slot per
    step ([n_layer, S, H, hd], ~100 KB at GPT-2-medium size) replaces reading the whole cache
    (200 MB at 1024 slots) whenever a memo keys a call."""

    def __init__(self, k_cache: np.ndarray, v_cache: np.ndarray):
        self.k_cache, self.v_cache = k_cache, v_cache
        self.key = hashlib.sha256(f"zeros|{k_cache.dtype.str}|{k_cache.shape}|{v_cache.shape}".encode()).hexdigest()

    def wrote(self, slot: int) -> None:
        h = hashlib.sha256(f"{self.key}|{slot}|".encode())
        for cache in (self.k_cache, self.v_cache):
            h.update(np.ascontiguousarray(cache[:, :, :, slot]).data.cast("B"))
        self.key = h.hexdigest()


def _sample(logits: np.ndarray, vocab: int, cfg: ARDecodeConfig, rng: np.random.Generator) -> np.ndarray:
    """int64 [B] next tokens from guided logits (B, W); ids >= vocab are never chosen."""
    logits[:, vocab:] = -np.inf
    if cfg.temperature == 0:
        return np.argmax(logits, axis=1)
    scores = logits / np.float32(cfg.temperature)
    k = min(cfg.top_k, vocab)
    if k:
        # Exactly k candidates per row, by index: a tie at the k-th value never lets in a (k+1)-th.
        keep = np.argpartition(-scores, k - 1, axis=1)[:, :k]
        kept = np.full_like(scores, -np.inf)
        np.put_along_axis(kept, keep, np.take_along_axis(scores, keep, axis=1), axis=1)
        scores = kept
    return np.argmax(gumbel(rng, scores.shape) + scores, axis=1)
