"""The evaluation the stages share: conditioning inputs for a bundle, ground-truth scores where a
model has them, a user's quality metric hook (``--metric module:function``), and decoding an evaluation set in batches of the graph's static batch under
per-batch seeds.

Where conditions come from, first match per input: ``--cond NAME=VALUE`` (every row); rows of real
data (``--cond-data FILE.npz|DIR``, or the held-out rows ``edgekit quantize`` stored in the
bundle); the demo model's held-out set; else (quantize, check, profile only: ``draw=True``) the
model's ``condition_sampler`` hook, else seeded uniform draws within the declared ``[low, high)``.

quantize (calibration and budget), check, profile and run all decode through here, so "the same
seed" means the same conditions and the same noise everywhere.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Mapping

import numpy as np

from edgekit._userhooks import load_callable
from edgekit.bundle import Bundle, sha256_file
from edgekit.decode.dispatch import decode, decode_config
from edgekit.errors import EdgekitError, UsageError
from edgekit.models.corpus import demo_conditions
from edgekit.models.corpus import score as corpus_score
from edgekit.spec import TensorSpec


# Ground-truth metrics (edgekit.models.corpus) and whether a higher value is better. A user
# metric hook's metrics count as higher-is-better (return -loss for a loss).
HIGHER_IS_BETTER: dict[str, bool] = {
    "validity": True,
    "event_accuracy": True,
    "nll_per_token": False,
    "snr_db": True,
    "l1": False,
}

def graph_batch(bundle: Bundle) -> int:
    return next(iter(bundle.inputs.values())).shape[0]


def conditions(
    bundle: Bundle, raw: Mapping[str, str], batch: int, seed: int,
    rows: Mapping[str, np.ndarray] | None = None, draw: bool = False,
) -> dict[str, np.ndarray]:
    """Conditioning arrays [batch, ...] for every conditioning input of ``bundle``, first match
    per input: ``raw`` (``--cond NAME=VALUE``: a number fills the input; a path loads a .npy),
    (a .npy, .npz or .npz:KEY file gives its first ``batch`` rows), ``rows`` (real rows, at most ``batch``: a short last batch repeats its final row), the demo
    model's held-out set (seed ``seed``), when ``draw``: the model's ``condition_sampler``
    (seeded), else draws within the declared ``[low, high)``; else an error naming what is needed."""
    names = list(bundle.meta.get("conditioning", {}))
    unknown = [n for n in raw if n not in names]
    if unknown:
        raise UsageError(f"--cond {unknown[0]!r} is not a conditioning input of {bundle.name}; valid: {', '.join(names) or 'none'}")
    specs = bundle.inputs
    out: dict[str, np.ndarray] = {}
    task = bundle.ground_truth
    demo = sampled = None
    sampler = bundle.manifest["model"].get("condition_sampler")
    rng = np.random.default_rng(seed)
    for name in names:
        spec = specs[name]
        shape = (batch, *spec.shape[1:])
        if name in raw:
            out[name] = check_cond_values(name, raw[name], _parse_cond(name, raw[name], shape, spec.dtype), spec)
        elif rows is not None and name in rows:
            out[name] = pad_rows(np.asarray(rows[name])[:batch], batch).astype(spec.dtype)
        elif task is not None:
            if demo is None:
                demo = demo_conditions(task, batch, seed)
            # A chunk-window graph (export --chunk-frames) sees the first window of each sequence.
            out[name] = np.ascontiguousarray(demo[name][:, : spec.shape[1]] if demo[name].ndim > 1 else demo[name]).astype(spec.dtype)
        elif draw and sampler:
            if sampled is None:
                sampled = _sample(bundle, sampler, batch, seed)
            out[name] = sampled[name]
        elif draw:
            out[name] = _draw(rng, spec.low, spec.high, shape, spec.dtype)
        else:
            raise UsageError(
                f"{bundle.name} needs conditioning input {name!r} ({spec.dtype}{list(shape)})",
                hint=f"pass --cond {name}=VALUE (a number), --cond {name}=FILE.npy|FILE.npz[:KEY] or --cond-data FILE.npz",
            )
    return out


def _sample(bundle: Bundle, ref: str, batch: int, seed: int) -> dict[str, np.ndarray]:
    """Call the model's ``condition_sampler(rng, batch)`` (THIS RUNS USER CODE, named by the
    model's own factory at export) and check what it returns against the inputs."""
    fn = load_callable(ref, "condition sampler")
    try:
        got = fn(np.random.default_rng(seed), batch)
    except Exception as exc:
        raise EdgekitError(f"condition sampler {ref!r} raised {type(exc).__name__}: {exc}") from exc
    names = list(bundle.meta.get("conditioning", {}))
    if not isinstance(got, Mapping) or sorted(got) != sorted(names):
        have = sorted(got) if isinstance(got, Mapping) else type(got).__name__
        raise EdgekitError(f"condition sampler {ref!r} returned {have}; valid: a dict with exactly {names}")
    out = {}
    for name in names:
        spec = bundle.inputs[name]
        arr = np.asarray(got[name])
        want = (batch, *spec.shape[1:])
        if arr.shape != want or not np.can_cast(arr.dtype, spec.dtype, "same_kind"):
            raise EdgekitError(f"condition sampler {ref!r}: {name!r} is {arr.dtype}{list(arr.shape)}; valid: {spec.dtype}{list(want)}")
        out[name] = arr.astype(spec.dtype)
    return out


def _draw(rng: np.random.Generator, low: float | None, high: float | None, shape: tuple[int, ...], dtype: str) -> np.ndarray:
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
    batch = graph_batch(bundle)
    parts = []
    for i in range(-(-n // batch)):
        part = None if rows is None else {k: v[i * batch : (i + 1) * batch] for k, v in rows.items()}
        parts.append(conditions(bundle, raw, batch, seed + i, rows=part, draw=True))
    return {k: np.concatenate([p[k] for p in parts])[:n] for k in (parts[0] if parts else {})}


@dataclass(frozen=True)
class ConditionData:
    """Real conditioning rows (``--cond-data``): ``arrays`` {input name: [N, ...]} cast to the
    inputs' dtypes, ``source`` the path given, ``sha256`` of the file (a directory: of its
    files' names and hashes)."""

    arrays: Mapping[str, np.ndarray]
    source: str
    sha256: str

    @property
    def rows(self) -> int:
        return len(next(iter(self.arrays.values())))

    def take(self, start: int, stop: int) -> dict[str, np.ndarray]:
        return {k: v[start:stop] for k, v in self.arrays.items()}

    def split(self, calib: int, heldout: int) -> tuple[tuple[int, int], tuple[int, int]]:
        """(calibration rows, held-out rows) as [start, stop): the held-out rows are the last
        min(heldout, N // 2) (at least 1), calibration the first min(calib, the rest); with one
        row both use it."""
        n = self.rows
        if n == 1:
            return (0, 1), (0, 1)
        h = max(1, min(heldout, n // 2))
        return (0, min(calib, n - h)), (n - h, n)

    def to_json(self) -> dict[str, Any]:
        return {"source": self.source, "sha256": self.sha256, "rows": self.rows,
                "inputs": {k: [str(v.dtype), list(v.shape)] for k, v in self.arrays.items()}}


def load_condition_data(bundle: Bundle, path: Path | str) -> ConditionData:
    """Read ``--cond-data``: an .npz whose arrays are named like the conditioning inputs, each
    [N, ...per-row shape] with the same N; or a directory of such .npz files (rows concatenated
    in file-name order) and/or ``NAME.npy`` files. Every conditioning input ``--cond`` does not
    set must be there; unknown names, shapes or dtypes are one clear error."""
    path = Path(path)
    flag = f"--cond-data {path}"
    if path.is_dir():
        files = sorted(p for p in path.iterdir() if p.suffix in (".npz", ".npy") and p.is_file())
        if not files:
            raise UsageError(f"{flag}: the directory has no .npz or .npy files")
        digest = hashlib.sha256("".join(f"{p.name}:{sha256_file(p)}\n" for p in files).encode()).hexdigest()
    elif path.is_file():
        files, digest = [path], sha256_file(path)
    else:
        raise UsageError(f"{flag} does not exist", hint="give an .npz file or a directory of .npz/.npy files")
    parts: dict[str, list[np.ndarray]] = {}
    for f in files:
        try:
            loaded = np.load(f, allow_pickle=False)
            items = dict(loaded.items()) if f.suffix == ".npz" else {f.stem: loaded}
        except (OSError, ValueError) as exc:
            raise UsageError(f"{flag}: cannot read {f.name} ({exc})") from None
        for k, v in items.items():
            parts.setdefault(k, []).append(v)
    names = list(bundle.meta.get("conditioning", {}))
    extra = [k for k in parts if k not in names]
    if extra:
        raise UsageError(f"{flag}: {extra[0]!r} is not a conditioning input of {bundle.name}; valid: {', '.join(names) or 'none'}")
    arrays: dict[str, np.ndarray] = {}
    for name, chunks in parts.items():
        spec = bundle.inputs[name]
        want = tuple(spec.shape[1:])
        for c in chunks:
            if c.ndim != len(want) + 1 or tuple(c.shape[1:]) != want:
                raise UsageError(f"{flag}: {name!r} has shape {list(c.shape)}; valid: [N, {', '.join(map(str, want))}] (N rows)".replace("[N, ]", "[N]"))
            if not np.can_cast(c.dtype, spec.dtype, "same_kind"):
                raise UsageError(f"{flag}: {name!r} is {c.dtype}; valid: {spec.dtype} (or a dtype that casts to it safely)")
        arrays[name] = np.concatenate(chunks).astype(spec.dtype)
    counts = {k: len(v) for k, v in arrays.items()}
    if len(set(counts.values())) > 1 or 0 in counts.values():
        raise UsageError(f"{flag}: the arrays have different row counts {counts}; valid: the same N >= 1 for every input")
    if not arrays:
        raise UsageError(f"{flag}: no arrays named like a conditioning input ({', '.join(names) or 'none'})")
    return ConditionData(arrays, str(path), digest)


def stored_rows(bundle: Bundle) -> dict[str, np.ndarray] | None:
    """The held-out condition rows ``edgekit quantize`` gated on (artifact ``conditions``), or None."""
    if "conditions" not in (bundle.manifest.get("artifacts") or {}):
        return None
    with np.load(bundle.path_of("conditions"), allow_pickle=False) as f:
        return {k: f[k] for k in f.files}


# A file's rows are all decoded by `run` (in graph batches); a header claiming more is a mistake
# or an allocation bomb, refused before any data is read.
MAX_COND_ROWS = 65536


def _is_file(value: str) -> bool:
    path = value.rpartition(":")[0] if ".npz:" in value else value
    return path.endswith((".npy", ".npz"))


def _open_cond_file(name: str, value: str):
    """A binary handle on the .npy data ``value`` names: ``FILE.npy``, ``FILE.npz:KEY`` or
    ``FILE.npz`` (its array named ``name``: `edgekit run -o tokens.npz` writes ``tokens``, so a
    flow bundle's ``--cond tokens=tokens.npz`` chains)."""
    path, key = (value.rsplit(":", 1) if ".npz:" in value else (value, None))
    if not path.endswith(".npz"):
        return open(path, "rb")
    import zipfile

    try:
        archive = zipfile.ZipFile(path)
    except (OSError, zipfile.BadZipFile) as exc:
        raise UsageError(f"--cond {name}={value}: cannot read {path} as .npz ({exc})") from None
    key = key or name
    arrays = [m.removesuffix(".npy") for m in archive.namelist() if m.endswith(".npy")]
    if key not in arrays:
        archive.close()
        raise UsageError(f"--cond {name}={value}: {path} has no array {key!r}; valid: {', '.join(arrays)}",
                         hint=f"pick one with --cond {name}={path}:KEY")
    return archive.open(key + ".npy")


def read_npy(name: str, path: str, shape: tuple[int, ...], max_rows: int | None = None) -> np.ndarray:
    """A numeric .npy (or .npz member) of ``shape`` — with ``max_rows``, of any row count up to
    it — its header checked before any data is read: no pickles, no structured or string dtypes,
    no header claiming more than allowed (allocation bombs)."""
    fmt = np.lib.format

    def bad(why: str) -> UsageError:
        return UsageError(f"--cond {name}={path}: cannot read it as .npy ({why})",
                          hint=f"save a numeric array of shape {list(shape)} with numpy.save")

    try:
        with _open_cond_file(name, path) as fh:
            version = fmt.read_magic(fh)
            header = fmt.read_array_header_1_0(fh, max_header_size=10_000) if version == (1, 0) else \
                fmt.read_array_header_2_0(fh, max_header_size=10_000)
            file_shape, _, dtype = header
            if dtype.hasobject or dtype.fields is not None or dtype.kind not in "biuf":
                raise bad(f"dtype {dtype} is not a number type")
            rows_ok = (0 < file_shape[0] <= max_rows) if max_rows and len(file_shape) else False
            if tuple(file_shape) != tuple(shape) and not (rows_ok and tuple(file_shape[1:]) == tuple(shape[1:])):
                raise UsageError(f"--cond {name}={path} has shape {list(file_shape)}, expected {list(shape)}"
                                 + (f" (any row count up to {max_rows})" if max_rows else ""))
            fh.seek(0)
            return np.load(fh, allow_pickle=False)
    except UsageError:
        raise
    except (OSError, ValueError, EOFError, SyntaxError, TypeError) as exc:
        raise bad(str(exc).splitlines()[0] if str(exc) else type(exc).__name__) from None


def cond_file_rows(raw: Mapping[str, str]) -> int | None:
    """Rows of the conditioning given as files (None when none is): ``run`` decodes them all."""
    fmt = np.lib.format
    rows = set()
    for name, value in raw.items():
        if _is_file(value):
            try:
                with _open_cond_file(name, value) as fh:
                    version = fmt.read_magic(fh)
                    header = fmt.read_array_header_1_0(fh, max_header_size=10_000) if version == (1, 0) else \
                        fmt.read_array_header_2_0(fh, max_header_size=10_000)
            except UsageError:
                raise
            except (OSError, ValueError, EOFError, SyntaxError, TypeError) as exc:
                raise UsageError(f"--cond {name}={value}: cannot read it as .npy ({exc})") from None
            rows.add(int(header[0][0]) if header[0] else 0)
    if len(rows) > 1:
        raise UsageError(f"--cond files have different row counts {sorted(rows)}; valid: one row count for every file")
    return min(rows.pop(), MAX_COND_ROWS) if rows else None


def _parse_cond(name: str, value: str, shape: tuple[int, ...], dtype: str) -> np.ndarray:
    """The raw array a --cond value names (``check_cond_values`` checks and casts it). A file may
    hold more rows than ``shape`` asks for: the first ones are taken."""
    if _is_file(value):
        arr = read_npy(name, value, shape, max_rows=MAX_COND_ROWS)
        if len(arr) < shape[0]:
            raise UsageError(f"--cond {name}={value} has {len(arr)} rows; {shape[0]} are needed",
                             hint="give more rows, or decode fewer (--batch)")
        return arr[: shape[0]]
    try:
        number = float(value)
    except ValueError:
        raise UsageError(f"--cond {name}={value!r} is neither a number nor a .npy/.npz file") from None
    return np.full(shape, number)


def check_cond_values(name: str, source: str, arr: np.ndarray, spec: TensorSpec) -> np.ndarray:
    """``arr`` as the input's dtype, every value finite and inside the input's declared range
    (integers: ``[low, high)``; floats: ``[low, high]``); else one line naming the first bad value."""
    values = np.asarray(arr)
    if values.dtype.kind == "f" and not np.all(np.isfinite(values)):
        bad = values[~np.isfinite(values)].flat[0]
        raise UsageError(f"--cond {name}={source}: value {bad} is not finite", hint=_valid_range(spec))
    integer = np.dtype(spec.dtype).kind in "iub"
    if integer and values.dtype.kind == "f" and np.any(values != np.round(values)):
        raise UsageError(f"--cond {name}={source} must be an integer ({spec.dtype})", hint=_valid_range(spec))
    low = -np.inf if spec.low is None else spec.low
    high = np.inf if spec.high is None else spec.high
    outside = (values < low) | ((values >= high) if integer else (values > high))
    if np.any(outside):
        first = values[outside].flat[0].item()
        shown = int(first) if isinstance(first, float) and first.is_integer() else first
        raise UsageError(f"--cond {name}={source}: value {shown} is outside the valid range",
                         hint=_valid_range(spec))
    return values.astype(spec.dtype)


def _valid_range(spec: TensorSpec) -> str:
    if spec.low is None and spec.high is None:
        return f"valid: finite {spec.dtype} values"
    closing = ")" if np.dtype(spec.dtype).kind in "iub" else "]"
    return f"valid: {spec.dtype} in [{spec.low}, {spec.high}{closing}"


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
            c = conditions(bundle, {}, batch, seed + i, draw=True)
        else:
            c = {k: pad_rows(v[i * batch : (i + 1) * batch], batch) for k, v in cond.items()}
        cfg = decode_config(bundle.kind, bundle.manifest.get("decode_defaults", {}), decode_options or {}, seed=seed + i)
        outputs.append(decode(bundle.kind, runtime, bundle.meta, c, cfg).output.copy())
        conds.append(c)
    output = np.concatenate(outputs)[:n]
    cond_all = {k: np.concatenate([c[k] for c in conds])[:n] for k in conds[0]}
    return {"output": output, "cond": cond_all, "quality": score(bundle, output, cond_all)}


def pad_rows(arr: np.ndarray, rows: int) -> np.ndarray:
    """The last batch may be short: repeat its final row to the graph's static batch."""
    if len(arr) == rows:
        return arr
    return np.concatenate([arr, np.repeat(arr[-1:], rows - len(arr), axis=0)])


MetricHook = Callable[[np.ndarray, Mapping[str, np.ndarray]], Mapping[str, float]]


def load_metric_hook(ref: str) -> MetricHook:
    """Import a user quality metric ``package.module:function`` or ``path/file.py:function``.

    THIS RUNS USER CODE (the module is imported, the function called on every check). The
    function takes (output, cond): output int64 [N, L] tokens or float32 [N, T, C] frames, cond
    {conditioning input: array [N, ...]}, and returns {metric name: float}, higher = better
    (return -loss for a loss). Its metrics are compared like the demo models' ground truth.
    """

    return load_callable(ref, "metric hook")


def run_metric_hook(hook: MetricHook, ref: str, output: np.ndarray, cond: Mapping[str, np.ndarray]) -> dict[str, float]:
    """Call a user metric and check what it returned: {name: finite-or-nan float}."""
    try:
        result = hook(output, cond)
    except Exception as exc:
        raise EdgekitError(f"metric hook {ref!r} raised {type(exc).__name__}: {exc}") from exc
    if not isinstance(result, Mapping) or not result:
        raise EdgekitError(f"metric hook {ref!r} returned {type(result).__name__}; valid: a non-empty dict of name -> float")
    out: dict[str, float] = {}
    for name, value in result.items():
        try:
            out[str(name)] = float(value)
        except (TypeError, ValueError):
            raise EdgekitError(f"metric hook {ref!r} returned {name!r} = {value!r}; valid: a float") from None
    return out
