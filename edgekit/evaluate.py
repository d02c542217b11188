"""The evaluation the stages share: conditioning inputs for a bundle (from ``--cond`` or the demo
model's held-out set), ground-truth scores where a model has them, a user's quality metric hook
(``--metric module:function``), and decoding an evaluation set in batches of the graph's static
batch under per-batch seeds.

quantize (calibration and budget), check, profile and run all decode through here, so "the same
seed" means the same conditions and the same noise everywhere.
"""

from __future__ import annotations

from typing import Any, Callable, Mapping

import numpy as np

from edgekit._userhooks import load_callable
from edgekit.bundle import Bundle
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


def conditions(bundle: Bundle, raw: Mapping[str, str], batch: int, seed: int) -> dict[str, np.ndarray]:
    """Conditioning arrays [batch, ...] for every conditioning input of ``bundle``: from
    ``--cond NAME=VALUE`` (a number fills the input; a .npy, .npz or .npz:KEY file gives its first
    ``batch`` rows), else from the demo
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
            out[name] = check_cond_values(name, raw[name], _parse_cond(name, raw[name], shape, spec.dtype), spec)
            continue
        if task is None:
            raise UsageError(
                f"{bundle.name} needs conditioning input {name!r} ({spec.dtype}{list(shape)})",
                hint=f"pass --cond {name}=VALUE (a number), --cond {name}=FILE.npy or --cond {name}=FILE.npz[:KEY]",
            )
        if demo is None:
            demo = demo_conditions(task, batch, seed)
        # A chunk-window graph (export --chunk-frames) sees the first window of each sequence.
        out[name] = np.ascontiguousarray(demo[name][:, : spec.shape[1]] if demo[name].ndim > 1 else demo[name]).astype(spec.dtype)
    return out


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
            c = conditions(bundle, {}, batch, seed + i)
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
