"""The evaluation the stages share: conditioning inputs for a bundle (from ``--cond`` or the demo
model's held-out set), ground-truth scores where a model has them, and decoding an evaluation set
in batches of the graph's static batch under per-batch seeds.

quantize (calibration and budget), check, profile and run all decode through here, so "the same
seed" means the same conditions and the same noise everywhere.
"""

from __future__ import annotations

from typing import Any, Mapping

import numpy as np

from edgekit.bundle import Bundle
from edgekit.decode.dispatch import decode, decode_config
from edgekit.errors import UsageError
from edgekit.models.corpus import demo_conditions
from edgekit.models.corpus import score as corpus_score


def graph_batch(bundle: Bundle) -> int:
    return next(iter(bundle.inputs.values())).shape[0]


def conditions(bundle: Bundle, raw: Mapping[str, str], batch: int, seed: int) -> dict[str, np.ndarray]:
    """Conditioning arrays [batch, ...] for every conditioning input of ``bundle``: from
    ``--cond NAME=VALUE`` (a number fills the input; a path loads a .npy), else from the demo
    model's held-out evaluation set, else an error naming what is needed."""
    names = list(bundle.meta.get("conditioning", {}))
    unknown = [n for n in raw if n not in names]
    if unknown:
        raise UsageError(f"--cond {unknown[0]!r} is not a conditioning input of {bundle.name}; valid: {', '.join(names) or 'none'}")
    specs = bundle.inputs
    out: dict[str, np.ndarray] = {}
    task = bundle.ground_truth
    demo = None
    for name in names:
        spec = specs[name]
        shape = (batch, *spec.shape[1:])
        if name in raw:
            out[name] = _parse_cond(name, raw[name], shape, spec.dtype)
            continue
        if task is None:
            raise UsageError(
                f"{bundle.name} needs conditioning input {name!r} ({spec.dtype}{list(shape)})",
                hint=f"pass --cond {name}=VALUE (a number) or --cond {name}=FILE.npy",
            )
        if demo is None:
            demo = demo_conditions(task, batch, seed)
        out[name] = demo[name].astype(spec.dtype)
    return out


def _parse_cond(name: str, value: str, shape: tuple[int, ...], dtype: str) -> np.ndarray:
    if value.endswith(".npy"):
        try:
            arr = np.load(value, allow_pickle=False)
        except (OSError, ValueError) as exc:
            raise UsageError(f"--cond {name}={value}: cannot read it as .npy ({exc})") from None
        if arr.shape != shape:
            raise UsageError(f"--cond {name}={value} has shape {list(arr.shape)}, expected {list(shape)}")
        return arr.astype(dtype)
    try:
        number = float(value)
    except ValueError:
        raise UsageError(f"--cond {name}={value!r} is neither a number nor a .npy file") from None
    if dtype.startswith("int") and number != int(number):
        raise UsageError(f"--cond {name}={value} must be an integer ({dtype})")
    return np.full(shape, number, dtype=dtype)


def score(bundle: Bundle, output: np.ndarray, cond: Mapping[str, np.ndarray]) -> dict[str, float] | None:
    """Ground-truth quality of a decode output, where the bundle's model has one (demo models)."""
    if not bundle.ground_truth:
        return None
    return corpus_score(bundle.ground_truth, output, cond)


def output_name(kind: str) -> str:
    return "frames" if kind == "flow" else "tokens"


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
            c = conditions(bundle, {}, batch, seed + i)
        else:
            c = {k: _pad_rows(v[i * batch : (i + 1) * batch], batch) for k, v in cond.items()}
        cfg = decode_config(bundle.kind, bundle.manifest.get("decode_defaults", {}), decode_options or {}, seed=seed + i)
        outputs.append(decode(bundle.kind, runtime, bundle.meta, c, cfg).output.copy())
        conds.append(c)
    output = np.concatenate(outputs)[:n]
    cond_all = {k: np.concatenate([c[k] for c in conds])[:n] for k in conds[0]}
    return {"output": output, "cond": cond_all, "quality": score(bundle, output, cond_all)}


def _pad_rows(arr: np.ndarray, rows: int) -> np.ndarray:
    """The last batch may be short: repeat its final row to the graph's static batch."""
    if len(arr) == rows:
        return arr
    return np.concatenate([arr, np.repeat(arr[-1:], rows - len(arr), axis=0)])
