"""What a model is to edgekit: its kind, its static IO and its kind metadata.

Only numpy here: the device side (runtimes, decode loops) shares these types without torch.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np

from edgekit.errors import EdgekitError, UsageError, one_of

Kind = Literal["masked", "flow", "ar"]
KINDS: tuple[str, ...] = ("masked", "flow", "ar")
DTYPES: tuple[str, ...] = ("float32", "float16", "int64", "int32", "bool")


@dataclass(frozen=True)
class TensorSpec:
    """A static tensor signature. ``low``/``high`` bound the values of sample inputs (integers:
    ``high`` exclusive), used to draw valid verification inputs such as token ids."""

    shape: tuple[int, ...]
    dtype: str
    low: float | None = None
    high: float | None = None

    def __post_init__(self) -> None:
        if self.dtype not in DTYPES:
            raise EdgekitError(f"unsupported dtype {self.dtype!r}; valid: {', '.join(DTYPES)}")
        if any((not isinstance(d, int)) or d <= 0 for d in self.shape):
            raise EdgekitError(
                f"shape {self.shape} is not static: every dimension must be a positive int",
                hint="export with fixed sizes (edgekit exports static shapes only)",
            )

    def to_json(self) -> dict[str, Any]:
        doc: dict[str, Any] = {"shape": list(self.shape), "dtype": self.dtype}
        if self.low is not None:
            doc["low"] = self.low
        if self.high is not None:
            doc["high"] = self.high
        return doc

    @classmethod
    def from_json(cls, doc: Mapping[str, Any]) -> TensorSpec:
        return cls(tuple(int(d) for d in doc["shape"]), str(doc["dtype"]), doc.get("low"), doc.get("high"))

    def zeros(self) -> np.ndarray:
        return np.zeros(self.shape, dtype=self.dtype)


@dataclass(frozen=True)
class ModelSpec:
    """A model as a user factory (``package.module:function``) or a built-in name returns it.

    ``module`` is the per-step network (a ``torch.nn.Module``) whose ``forward`` takes the
    inputs positionally in the order of ``inputs`` and returns the outputs in the order of
    ``outputs`` (a tensor, or a tuple for several).

    ``meta`` holds the kind's metadata (see ``KIND_META``), e.g. for ``masked``:
    ``{"vocab_size": V, "mask_id": V, "seq_len": L, "conditioning": {"class_id": {"uncond": 8}}}``.
    ``conditioning`` maps every input that is neither the loop state nor time to its
    classifier-free-guidance "unconditional" fill value: a number, a nested list of one row's
    shape, "same" or ``None`` (no guidance), bare or as ``{"uncond": value}``; the spec stores
    the wrapped form (``normalize_uncond``) and refuses any other.
    ``ground_truth`` optionally names a numpy-only scorer ("module:function") for decode outputs.
    ``condition_sampler`` optionally names a numpy-only ``fn(rng: numpy.random.Generator, batch:
    int) -> {conditioning input: array [batch, ...]}`` ("module:function" or "file.py:function")
    that draws realistic conditions; quantize, check and profile call it (seeded) where no
    ``--cond`` / ``--cond-data`` is given, instead of uniform draws in the declared ranges.
    """

    name: str
    kind: str
    module: Any
    inputs: Mapping[str, TensorSpec]
    outputs: Mapping[str, TensorSpec]
    meta: Mapping[str, Any] = field(default_factory=dict)
    decode_defaults: Mapping[str, Any] = field(default_factory=dict)
    ground_truth: str | None = None
    condition_sampler: str | None = None

    def __post_init__(self) -> None:
        one_of("model kind", self.kind, KINDS, error=EdgekitError)
        missing = [k for k in KIND_META[self.kind] if k not in self.meta]
        if missing:
            raise EdgekitError(
                f"model {self.name!r} of kind {self.kind!r} lacks metadata {missing}",
                hint=f"a {self.kind} ModelSpec.meta needs: {', '.join(KIND_META[self.kind])}",
            )
        need_in, need_out = kind_io(self.kind, self.inputs, self.outputs)
        for role, need, have in (("input", need_in, self.inputs), ("output", need_out, self.outputs)):
            absent = [n for n in need if n not in have]
            if absent:
                raise EdgekitError(
                    f"model {self.name!r} of kind {self.kind!r} has no {role} named {absent}; it has {list(have)}",
                    hint=f"a {self.kind} network's {role}s are named {', '.join(need)} (wrap the module in an adapter)",
                )
        for name in self.meta.get("conditioning") or {}:
            if name not in self.inputs:
                raise EdgekitError(
                    f"conditioning input {name!r} is not an input of {self.name!r}; inputs: {', '.join(self.inputs)}"
                )
        if self.meta.get("conditioning"):
            # Every reader (decode loops, fused export, the manifest schema) reads {"uncond": X}:
            # the short forms README.md and docs/byo.md document become that here, once.
            conditioning = {
                name: normalize_uncond(self.name, name, fill, self.inputs[name])
                for name, fill in self.meta["conditioning"].items()
            }
            object.__setattr__(self, "meta", {**self.meta, "conditioning": conditioning})

    @property
    def batch(self) -> int:
        return next(iter(self.inputs.values())).shape[0]


UNCOND_FORMS = (
    'a number (every element), a nested list of one row\'s shape, "same" (the unconditional rows keep '
    'the conditional value) or None (no guidance), bare or as {"uncond": value}'
)


def normalize_uncond(model: str, name: str, fill: Any, spec: TensorSpec) -> dict[str, Any] | None:
    """``meta["conditioning"][name]`` in the one form every reader takes: None, or
    ``{"uncond": X}`` with X a number, a nested list broadcastable to one row (``spec.shape[1:]``)
    or "same". Accepts X bare or wrapped; anything else is an error naming the valid forms."""
    where = f"model {model!r}: meta['conditioning'][{name!r}]"
    if isinstance(fill, Mapping):
        extra = [k for k in fill if k != "uncond"]
        if extra:
            raise EdgekitError(f'{where} has keys {extra}; valid: {{"uncond": value}}', hint=f"value: {UNCOND_FORMS}")
        fill = fill.get("uncond")
    if fill is None:
        return None
    if isinstance(fill, str):
        if fill != "same":
            raise EdgekitError(f"{where} is {fill!r}; valid: {UNCOND_FORMS}")
        return {"uncond": "same"}
    if not isinstance(fill, (int, float, list, tuple, np.ndarray, np.number, np.bool_)):
        raise EdgekitError(
            f"{where} is {fill!r} ({type(fill).__name__}); valid: {UNCOND_FORMS}",
            hint=f'e.g. {{{name!r}: 0}} or {{{name!r}: {{"uncond": 0}}}}',
        )
    arr = np.asarray(fill)
    if arr.dtype.kind == "b":  # a bool input's fill (a mask): 0/1, as the manifest stores numbers
        arr = arr.astype(np.int64)
    if arr.dtype.kind not in "iuf" or not np.all(np.isfinite(arr)):
        raise EdgekitError(f"{where} must hold finite numbers; valid: {UNCOND_FORMS}")
    row = tuple(spec.shape[1:])
    try:
        np.broadcast_to(arr, row)
    except ValueError:
        raise EdgekitError(
            f"{where} has shape {list(arr.shape)}; valid: a number or a nested list of one row's shape {list(row)}"
        ) from None
    return {"uncond": arr.item() if arr.ndim == 0 else arr.tolist()}


# Metadata every kind must carry; names of the graph's state inputs/outputs are fixed per kind
# (DESIGN.md "Model kinds and their contracts").
KIND_META: dict[str, tuple[str, ...]] = {
    "masked": ("vocab_size", "mask_id", "seq_len", "conditioning"),
    "flow": ("channels", "frames", "conditioning"),
    "ar": ("vocab_size", "max_len", "bos_id", "conditioning"),
}

# Fixed IO names per kind: the loops in edgekit/decode address tensors by these names.
KIND_IO: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    "masked": (("tokens",), ("logits",)),
    "flow": (("x", "t"), ("v",)),
    "ar": (("token", "pos", "k_cache", "v_cache"), ("logits", "k_cache_out", "v_cache_out")),
}

# The AR step comes in three cache forms; the decode loop tells them apart by the graph's IO
# (``ar_cache_form``).
# "graph": the graph writes slot ``pos`` and returns both whole caches (KIND_IO["ar"]).
# "loop" (the NPU form, as Qualcomm's and ORT GenAI's KV-cache graphs): the graph takes a keep
# mask ``attn_mask`` float32[1, Lmax] (1 on the filled slots 0..pos-1, 0 on the rest) and returns
# only this token's ``k_new``/``v_new`` [n_layer, B, H, 1, hd]; the loop writes them into its
# cache. Nothing in the graph is computed from ``pos`` but the position embedding's row (no
# in-graph mask from ``pos``, no one-hot blend over the whole cache), each step writes back Lmax
# times less, and its 8-bit QDQ is closer to FP32 on the HTP (demo AR, 8-bit activations:
# lockstep token agreement 0.95 vs 0.66 for the graph form, whose -1e4 additive mask sets the
# range of the attention scores). Its caches are one stacked input each, ``k_cache``/``v_cache``
# [n_layer, B, H, Lmax, hd]: the graph reads ``k_cache[layer]`` (a Gather, a copy in ORT) and
# concatenates it with the token's key (a second copy), ~100 MB a forward at GPT-2-medium size.
# "layers" (what edgekit exports; the loop form without those copies): the same mask and outputs,
# but each layer's cache is its own input, ``k_cache_0, v_cache_0, k_cache_1, ...`` [B, H, Lmax,
# hd] between ``pos`` and ``attn_mask`` (``ar_layer_cache_names``), and the graph attends over the
# cache and the token's own key without joining them, so it reads every cache input in place
# (a MatMul, fused by ORT with the transpose). The loop keeps its one stacked array and feeds
# each layer's slice as a view (contiguous: ORT binds it without a copy), ``ar_cache_feeds``.
AR_CACHE_IO: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    "graph": KIND_IO["ar"],
    "loop": (("token", "pos", "k_cache", "v_cache", "attn_mask"), ("logits", "k_new", "v_new")),
    # + ar_layer_cache_names(n_layer) after "pos": kind_io inserts them
    "layers": (("token", "pos", "attn_mask"), ("logits", "k_new", "v_new")),
}
AR_CACHE_FORMS: tuple[str, ...] = tuple(AR_CACHE_IO)


def ar_layer_cache_names(n_layer: int) -> tuple[str, ...]:
    """The "layers" form's cache inputs, layer by layer: k_cache_0, v_cache_0, k_cache_1, ..."""
    return tuple(f"{kv}_cache_{i}" for i in range(n_layer) for kv in ("k", "v"))


def ar_cache_layers(inputs: Mapping[str, Any] | Any) -> int:
    """How many layers a "layers" form graph's inputs hold (k_cache_0, k_cache_1, ... in a row)."""
    n = 0
    while f"k_cache_{n}" in inputs:
        n += 1
    return n


def ar_cache_form(inputs: Mapping[str, Any] | Any, outputs: Mapping[str, Any] | Any) -> str:
    """An AR graph's cache form from its IO names: "layers" when its inputs include ``k_cache_0``,
    "loop" when its outputs include ``k_new`` (the loop owns the cache), else "graph"."""
    if "k_cache_0" in inputs:
        return "layers"
    return "loop" if "k_new" in outputs else "graph"


def ar_cache_feeds(inputs: Mapping[str, Any] | Any, k_cache: np.ndarray, v_cache: np.ndarray) -> dict[str, np.ndarray]:
    """The cache feeds of an AR graph with ``inputs`` from the loop's stacked caches ``k_cache`` /
    ``v_cache`` [n_layer, B, H, Lmax, hd]: the arrays themselves, or in the "layers" form each
    layer's slice ``k_cache[i]`` (a view, contiguous: nothing is copied)."""
    if ar_cache_form(inputs, ()) != "layers":
        return {"k_cache": k_cache, "v_cache": v_cache}
    slices = [cache[layer] for layer in range(len(k_cache)) for cache in (k_cache, v_cache)]
    return dict(zip(ar_layer_cache_names(len(k_cache)), slices, strict=True))


def kind_io(
    kind: str, inputs: Mapping[str, Any] | Any = (), outputs: Mapping[str, Any] | Any = ()
) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(state inputs, state outputs) of a ``kind`` graph; for ar, of its cache form (by its IO)."""
    if kind != "ar":
        return KIND_IO[kind]
    form = ar_cache_form(inputs, outputs)
    state_in, state_out = AR_CACHE_IO[form]
    if form == "layers":
        state_in = (*state_in[:2], *ar_layer_cache_names(ar_cache_layers(inputs)), *state_in[2:])
    return state_in, state_out


# Where in the decode loop one network call sits, read from its feeds alone (so a runtime can
# pick a step bucket without the loop telling it): masked — the share of [MASK] tokens in the
# first row (1.0 at the first step, falling); flow — the ODE time t (0 -> 1); ar — the cache
# position of the token (0 -> L-1).
STEP_AXIS: dict[str, str] = {"masked": "mask share", "flow": "t", "ar": "position"}


def step_position(kind: str, feeds: Mapping[str, Any], meta: Mapping[str, Any]) -> float:
    """The decode-loop position of one call's ``feeds`` (``STEP_AXIS``); nan when the feeds do
    not say (a graph without that input)."""
    if kind == "masked" and "tokens" in feeds and meta.get("mask_id") is not None:
        return float(np.mean(np.asarray(feeds["tokens"])[0] == int(meta["mask_id"])))
    if kind == "flow" and "t" in feeds:
        return float(np.asarray(feeds["t"]).reshape(-1)[0])
    if kind == "ar" and "pos" in feeds:
        return float(np.asarray(feeds["pos"]).reshape(-1)[0])
    return float("nan")


def tensor_specs_to_json(specs: Mapping[str, TensorSpec]) -> dict[str, Any]:
    return {name: spec.to_json() for name, spec in specs.items()}


def tensor_specs_from_json(doc: Mapping[str, Any]) -> dict[str, TensorSpec]:
    """{name: spec}; ValueError for a spec that does not parse or whose sample range [low, high)
    is empty (it would draw values the graph never saw: an index past a Gather's table)."""
    specs = {name: TensorSpec.from_json(d) for name, d in doc.items()}
    for name, spec in specs.items():
        if spec.low is not None and spec.high is not None and not spec.low < spec.high:
            raise ValueError(f"{name}: low {spec.low!r} is not below high {spec.high!r}")
    return specs


GRAPHS: tuple[str, ...] = ("host", "step", "unrolled")
# The demo models' evaluation tasks a manifest may name as "ground_truth" (edgekit.models.corpus
# scores them): a manifest names one of these, never a code path.
GROUND_TRUTH_TASKS: tuple[str, ...] = ("corpus-tokens", "corpus-frames")
# Which fused graph kinds each model kind has (ar has none: its loop state is the KV cache).
FUSED_GRAPHS: dict[str, tuple[str, ...]] = {"flow": ("step", "unrolled"), "masked": ("step", "unrolled")}


def check_graph_kind(kind: str, graph: str) -> None:
    """Raise when model ``kind`` has no fused ``graph`` (export and run share this one message)."""
    if graph not in FUSED_GRAPHS.get(kind, ()):
        fused = FUSED_GRAPHS.get(kind, ())
        why = "" if fused else " (its loop state is the KV cache, so it has no fused graphs)"
        raise UsageError(
            f"--graph {graph!r} is not available for the {kind} model{why}; valid: {', '.join(('host', *fused))}"
        )
