"""Conditioning inputs for a bundle's decodes: ``--cond`` values, real rows, the demo's held-out
set, the model's condition sampler, or seeded draws within the declared ranges (first match per
input), and the rows of an evaluation set as the batched decode sees them."""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from edgekit._userhooks import load_bundle_callable
from edgekit.bundle import Bundle
from edgekit.errors import EdgekitError, UsageError
from edgekit.evaluate.cond_files import check_cond_values, parse_cond_value
from edgekit.limits import MAX_ROWS, check_bytes, check_count
from edgekit.models.corpus import demo_conditions


def conditions(
    bundle: Bundle,
    raw: Mapping[str, str],
    batch: int,
    seed: int,
    rows: Mapping[str, np.ndarray] | None = None,
    draw: bool = False,
) -> dict[str, np.ndarray]:
    """Conditioning arrays [batch, ...] for every conditioning input of ``bundle``, first match
    per input: ``raw`` (``--cond NAME=VALUE``: a number fills the input; a .npy, .npz or
    .npz:KEY file gives its first ``batch`` rows), ``rows`` (real rows, at most ``batch``: a short
    last batch repeats its final row), the demo model's held-out set (seed ``seed``), when
    ``draw``: the model's ``condition_sampler`` (seeded), else draws within the declared
    ``[low, high)``; else an error naming what is needed."""
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0:
        # numpy's generators take no negative seed (a ValueError deep in default_rng): the
        # CLI bounds --seed; a caller in code gets the same line.
        raise UsageError(f"--seed {seed!r} is invalid; valid: an integer >= 0")
    names = list(bundle.conditioning)
    unknown = [n for n in raw if n not in names]
    if unknown:
        raise UsageError(
            f"--cond {unknown[0]!r} is not a conditioning input of {bundle.name}; valid: {', '.join(names) or 'none'}"
        )
    specs = bundle.inputs
    check_rows(bundle, batch)
    out: dict[str, np.ndarray] = {}
    task = bundle.ground_truth
    demo = sampled = None
    sampler = bundle.condition_sampler
    rng = np.random.default_rng(seed)
    for name in names:
        spec = specs[name]
        shape = (batch, *spec.shape[1:])
        if name in raw:
            out[name] = check_cond_values(name, raw[name], parse_cond_value(name, raw[name], shape, spec.dtype), spec)
        elif rows is not None and name in rows:
            out[name] = pad_rows(np.asarray(rows[name])[:batch], batch).astype(spec.dtype)
        elif task is not None:
            if demo is None:
                demo = demo_conditions(task, batch, seed)
            # A chunk-window graph (export --chunk-frames) sees the first window of each sequence.
            out[name] = np.ascontiguousarray(
                demo[name][:, : spec.shape[1]] if demo[name].ndim > 1 else demo[name]
            ).astype(spec.dtype)
        elif draw and sampler:
            if sampled is None:
                sampled = _sample(bundle, sampler, batch, seed)
            out[name] = sampled[name]
        elif draw:
            out[name] = _draw(rng, spec.low, spec.high, shape, spec.dtype)
        else:
            raise UsageError(
                f"{bundle.name} needs conditioning input {name!r} ({spec.dtype}{list(shape)})",
                hint=(
                    f"pass --cond {name}=VALUE (a number), --cond "
                    f"{name}=FILE.npy|FILE.npz[:KEY] or --cond-data FILE.npz"
                ),
            )
    return out


def check_rows(bundle: Bundle, rows: int, what: str = "rows to decode") -> None:
    """``rows`` rows of ``bundle``'s inputs and outputs fit edgekit's bounds (at most MAX_ROWS,
    their arrays under the memory cap): checked before any is built."""
    fix = "ask for fewer rows (--batch, --n, --calib-samples / --eval-samples, or fewer --cond-data rows)"
    check_count(what, rows, MAX_ROWS, fix)
    per_row = sum(
        int(np.prod(s.shape[1:], dtype=object)) * np.dtype(s.dtype).itemsize
        for s in (*bundle.inputs.values(), *bundle.outputs.values())
    )
    check_bytes(f"{rows} {what} of {bundle.name}", rows * per_row, fix)


def _sample(bundle: Bundle, ref: str, batch: int, seed: int) -> dict[str, np.ndarray]:
    """Call the model's ``condition_sampler(rng, batch)`` (THIS RUNS USER CODE, named by the
    model's own factory at export; refused unless trusted, see ``_userhooks``) and check what it
    returns against the inputs."""
    fn = load_bundle_callable(bundle.root, ref, "condition sampler")
    try:
        got = fn(np.random.default_rng(seed), batch)
    except (Exception, SystemExit) as exc:  # a sys.exit() in user code must not end edgekit with no word
        raise EdgekitError(f"condition sampler {ref!r} raised {type(exc).__name__}: {exc}") from exc
    names = list(bundle.conditioning)
    if not isinstance(got, Mapping) or sorted(got) != sorted(names):
        have = sorted(got) if isinstance(got, Mapping) else type(got).__name__
        raise EdgekitError(f"condition sampler {ref!r} returned {have}; valid: a dict with exactly {names}")
    out = {}
    for name in names:
        spec = bundle.inputs[name]
        arr = np.asarray(got[name])
        want = (batch, *spec.shape[1:])
        if arr.shape != want or not np.can_cast(arr.dtype, spec.dtype, "same_kind"):
            raise EdgekitError(
                f"condition sampler {ref!r}: {name!r} is {arr.dtype}{list(arr.shape)}; valid: {spec.dtype}{list(want)}"
            )
        out[name] = arr.astype(spec.dtype)
    return out


def _draw(
    rng: np.random.Generator, low: float | None, high: float | None, shape: tuple[int, ...], dtype: str
) -> np.ndarray:
    """Uniform in [low, high) (integers: high exclusive; bool: 0/1): a stand-in where no real
    conditions were given. A real model sees other values: give --cond-data for calibration."""
    low = 0 if low is None else low
    if dtype == "bool":
        return rng.integers(0, 2, size=shape).astype(bool)
    if np.issubdtype(np.dtype(dtype), np.integer):
        top = int(high) if high is not None else int(low) + 1
        return rng.integers(int(low), max(top, int(low) + 1), size=shape).astype(dtype)
    top = 1.0 if high is None else high
    return rng.uniform(low, top, size=shape).astype(dtype)


def condition_rows(
    bundle: Bundle, raw: Mapping[str, str], n: int, seed: int, rows: Mapping[str, np.ndarray] | None = None
) -> dict[str, np.ndarray]:
    """``n`` rows [n, ...] of every conditioning input, as ``evaluate`` would decode them in
    batches of the graph's batch (batch ``i``: seed ``seed + i``, rows ``i·batch …``)."""
    batch = bundle.batch
    check_rows(bundle, n)
    parts = []
    for i in range(-(-n // batch)):
        part = None if rows is None else {k: v[i * batch : (i + 1) * batch] for k, v in rows.items()}
        parts.append(conditions(bundle, raw, batch, seed + i, rows=part, draw=True))
    return {k: np.concatenate([p[k] for p in parts])[:n] for k in (parts[0] if parts else {})}


def pad_rows(arr: np.ndarray, rows: int) -> np.ndarray:
    """The last batch may be short: repeat its final row to the graph's static batch."""
    if len(arr) == rows:
        return arr
    return np.concatenate([arr, np.repeat(arr[-1:], rows - len(arr), axis=0)])
