"""The per-step network as a decode loop sees it: B rows in, classifier-free-guided B rows out.

One guidance convention for every kind: ``out = uncond + g · (cond − uncond)`` on logits or
velocity. g = 1 is plain conditional decoding (no unconditional pass at all), g = 0 is
unconditional decoding; F5-TTS's ``v_c + w(v_c − v_u)`` is g = 1 + w, CosyVoice's 0.7 is g = 1.7.

The runtime's batch Bg is static. The loop's state has S rows:
- g != 1: S = 2B (rows [0, B) conditional, [B, 2B) unconditional), one call when Bg = 2B,
  two calls (cond, then uncond) when Bg = B;
- g == 1: S = B, or S = 2B when Bg = 2B (the conditional rows twice, so a graph exported for
  guidance also serves plain decoding in one call).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from edgekit.errors import EdgekitError
from edgekit.runtimes.base import KeyedFeeds, Runtime, describe
from edgekit.spec import kind_io

# meta conditioning[name]["uncond"] == "same": the unconditional rows keep the conditional value
# (a frame mask or a length that must not change when the text is dropped).
SAME = "same"


def conditioning_of(meta: Mapping[str, Any]) -> dict[str, Any]:
    """``meta["conditioning"]`` as {input name: uncond fill value or None}."""
    specs = meta.get("conditioning") or {}
    return {name: (spec.get("uncond") if isinstance(spec, Mapping) else None) for name, spec in specs.items()}


def require_meta(meta: Mapping[str, Any], kind: str, keys: tuple[str, ...]) -> None:
    missing = [k for k in keys if k not in meta]
    if missing:
        raise EdgekitError(f"{kind} decode needs metadata {missing}; it has {sorted(meta)}")


class GuidedNetwork:
    """Runs ``runtime`` for the S state rows of one decode and combines them into B guided rows.

    ``batch_axes`` names the batch axis of state inputs and outputs whose batch is not axis 0
    (AR caches: 1) or that have none (``pos``: None). Counts ``nfe`` (solver evaluations: one
    per ``run``, conditional and unconditional rows together) and ``runtime_calls``.
    """

    def __init__(
        self,
        runtime: Runtime,
        meta: Mapping[str, Any],
        cond: Mapping[str, np.ndarray] | None,
        guidance: float,
        *,
        kind: str,
        batch: int | None = None,
        batch_axes: Mapping[str, int | None] | None = None,
    ):
        self.runtime = runtime
        self.guidance = float(guidance)
        self.guided = self.guidance != 1.0
        self.batch_axes = dict(batch_axes or {})
        self.nfe = 0
        self.runtime_calls = 0
        state_in, state_out = kind_io(kind, runtime.inputs, runtime.outputs)
        uncond = conditioning_of(meta)
        self._check_io(kind, state_in, state_out, uncond)
        cond = dict(cond or {})
        if sorted(cond) != sorted(uncond):
            raise EdgekitError(
                f"conditioning inputs {sorted(cond)} do not match the model's; valid names: {sorted(uncond)}"
            )
        if self.guided and not uncond:
            raise EdgekitError(f"guidance={guidance} needs conditioning inputs; this model has none (use guidance=1.0)")
        if self.guided:
            for name, fill in uncond.items():
                if fill is None:
                    raise EdgekitError(
                        f"guidance={guidance} needs an unconditional value for conditioning input {name!r}, "
                        f"which the model does not declare (meta conditioning[{name!r}]['uncond'] is None); "
                        f"use guidance=1.0"
                    )
        graph_batch = runtime.inputs[state_in[0]].shape[0]
        self.batch = self._resolve_batch(cond, batch, graph_batch)
        cond = {name: self._cast_cond(name, arr) for name, arr in cond.items()}
        self.state_rows, self.calls_per_run = self._plan(graph_batch)
        self._graph_batch = graph_batch
        self._cond_chunks = self._chunk_conditioning(cond, uncond)
        self._expanded: dict[str, np.ndarray] = {}
        self._outputs: dict[str, np.ndarray] = {}

    # -- setup ---------------------------------------------------------------------------------
    def _check_io(self, kind: str, state_in: tuple[str, ...], state_out: tuple[str, ...], uncond: Mapping) -> None:
        inputs, outputs = self.runtime.inputs, self.runtime.outputs
        absent = [n for n in (*state_in, *uncond) if n not in inputs] + [n for n in state_out if n not in outputs]
        extra = [n for n in inputs if n not in state_in and n not in uncond]
        if absent or extra:
            raise EdgekitError(
                f"{kind} runtime {self.runtime.name!r} lacks {absent} and has undeclared inputs {extra}; "
                f"valid inputs: {', '.join((*state_in, *uncond))}; it has {describe(inputs)}"
            )

    def _resolve_batch(self, cond: Mapping[str, np.ndarray], batch: int | None, graph_batch: int) -> int:
        # A conditioning input without a batch axis fails the shape check in _cast_cond instead.
        batches = {name: int(np.shape(arr)[0]) for name, arr in cond.items() if np.ndim(arr)}
        if batch is not None:
            batches["batch"] = int(batch)
        found = set(batches.values())
        if len(found) > 1 or any(b < 1 for b in found):
            raise EdgekitError(f"batch sizes {batches} disagree; valid: one batch size B >= 1 for every input")
        if found:
            return int(found.pop())
        # No conditioning and no explicit batch: decode as many rows as the graph holds.
        return graph_batch

    def _cast_cond(self, name: str, arr: np.ndarray) -> np.ndarray:
        spec = self.runtime.inputs[name]
        arr = np.asarray(arr)
        want = (self.batch, *spec.shape[1:])
        if arr.shape != want or not np.can_cast(arr.dtype, spec.dtype, "same_kind"):
            raise EdgekitError(
                f"conditioning input {name!r} is {arr.dtype}{list(arr.shape)}; valid: {spec.dtype}{list(want)}"
            )
        return np.ascontiguousarray(arr, dtype=spec.dtype)

    def _plan(self, graph_batch: int) -> tuple[int, int]:
        b = self.batch
        if graph_batch == (2 * b if self.guided else b):
            return graph_batch, 1
        if self.guided and graph_batch == b:
            return 2 * b, 2
        if not self.guided and graph_batch == 2 * b:
            return 2 * b, 1
        raise EdgekitError(
            f"graph batch {graph_batch} does not fit decode batch {b} with guidance={self.guidance}; "
            f"valid graph batches: {b} or {2 * b} (re-export with one of them, or decode {graph_batch} rows)"
        )

    def _chunk_conditioning(self, cond: Mapping[str, np.ndarray], uncond: Mapping[str, Any]) -> list[dict]:
        """Conditioning feeds per call, built once: they are the same at every step."""
        rows: dict[str, np.ndarray] = {}
        for name, arr in cond.items():
            if self.state_rows == self.batch:
                rows[name] = arr
                continue
            second = arr
            if self.guided and not (isinstance(uncond[name], str) and uncond[name] == SAME):
                second = self._uncond_rows(name, uncond[name], arr)
            rows[name] = np.concatenate([arr, second])
        step = self._graph_batch
        return [
            {name: np.ascontiguousarray(arr[i * step : (i + 1) * step]) for name, arr in rows.items()}
            for i in range(self.calls_per_run)
        ]

    @staticmethod
    def _uncond_rows(name: str, fill: Any, arr: np.ndarray) -> np.ndarray:
        """The unconditional rows of input ``name``: ``fill`` is a number (every element), or a
        nested list / array of one row's shape (per element: e.g. a learned null embedding),
        broadcast to ``arr``'s rows."""
        try:
            return np.broadcast_to(np.asarray(fill, dtype=arr.dtype), arr.shape)
        except (ValueError, TypeError):
            raise EdgekitError(
                f"unconditional value of {name!r} has shape {list(np.shape(fill))}; valid: a number, {SAME!r}, "
                f"or an array of one row's shape {list(arr.shape[1:])}"
            ) from None

    # -- per step ------------------------------------------------------------------------------
    def _rows(self, arr: np.ndarray, name: str, call: int) -> np.ndarray:
        """The rows of ``arr`` that call number ``call`` feeds or fills."""
        axis = self.batch_axes.get(name, 0)
        if axis is None or self.calls_per_run == 1:
            return arr
        index = [slice(None)] * arr.ndim
        index[axis] = slice(call * self._graph_batch, (call + 1) * self._graph_batch)
        return arr[tuple(index)]

    def expand(self, name: str, arr: np.ndarray) -> np.ndarray:
        """B rows of loop state (batch on axis 0) as the S rows the network runs on.

        Returns ``arr`` itself when S == B, else a buffer owned here (allocated once per decode).
        """
        if self.state_rows == self.batch:
            return arr
        buf = self._expanded.get(name)
        if buf is None:
            buf = self._expanded[name] = np.empty((self.state_rows, *arr.shape[1:]), dtype=arr.dtype)
        buf[: self.batch] = arr
        buf[self.batch :] = arr
        return buf

    def run(
        self, state: Mapping[str, np.ndarray], into: Mapping[str, np.ndarray] | None = None
    ) -> dict[str, np.ndarray]:
        """One solver evaluation over all S rows: the outputs, S rows each.

        Outputs named in ``into`` are copied into those loop-owned arrays. The returned arrays are
        valid only until the next ``run`` (they may be the runtime's own reused buffers).
        """
        into = dict(into or {})
        self.nfe += 1
        self.runtime_calls += self.calls_per_run
        keys = state.content_keys if isinstance(state, KeyedFeeds) else {}
        if self.calls_per_run == 1:
            feeds = {**state, **self._cond_chunks[0]}
            outs = self.runtime.run(KeyedFeeds(feeds, keys) if keys else feeds)
            for name, dst in into.items():
                np.copyto(dst, outs[name])
            return {**outs, **into}
        for call, cond in enumerate(self._cond_chunks):
            feeds = {name: np.ascontiguousarray(self._rows(arr, name, call)) for name, arr in state.items()}
            # A vouched array's rows of this call: named by the whole array's key and the call.
            rows_keys = {name: f"{key}|rows {call} of {self.calls_per_run}" for name, key in keys.items()}
            call_feeds = {**feeds, **cond}
            outs = self.runtime.run(KeyedFeeds(call_feeds, rows_keys) if rows_keys else call_feeds)
            for name, arr in outs.items():
                # Copy now: the next call may overwrite the runtime's output buffers.
                buffer = into.get(name)
                if buffer is None:
                    buffer = self._output_buffer(name, arr)
                np.copyto(self._rows(buffer, name, call), arr)
        return {**self._outputs, **into}

    def _output_buffer(self, name: str, arr: np.ndarray) -> np.ndarray:
        buf = self._outputs.get(name)
        if buf is None:
            axis = self.batch_axes.get(name, 0)
            shape = list(arr.shape)
            if axis is not None:
                shape[axis] = self.state_rows
            buf = self._outputs[name] = np.empty(shape, dtype=arr.dtype)
        return buf

    def guide(self, out: np.ndarray) -> np.ndarray:
        """S rows of a network output (batch on axis 0) -> B guided rows, a new array."""
        b = self.batch
        if not self.guided:
            return np.array(out[:b])
        cond, uncond = out[:b], out[b : 2 * b]
        return uncond + self.guidance * (cond - uncond)
