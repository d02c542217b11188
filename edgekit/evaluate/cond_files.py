"""``--cond NAME=VALUE`` values: a number, or a file (``.npy``, ``.npz`` (its array NAME) or
``.npz:KEY``) whose header is checked before any data is read; and every value checked against
the input's declared range."""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from edgekit.errors import UsageError
from edgekit.limits import MAX_ROWS, check_bytes
from edgekit.spec import TensorSpec
from edgekit.userfiles import open_user_file

# A file's rows are all decoded by `run` (in graph batches); a header claiming more is a mistake
# or an allocation bomb, refused before any data is read.
MAX_COND_ROWS = MAX_ROWS


def is_cond_file(value: str) -> bool:
    path = value.rpartition(":")[0] if ".npz:" in value else value
    return path.endswith((".npy", ".npz"))


def _open_cond_file(name: str, value: str):
    """A binary handle on the .npy data ``value`` names: ``FILE.npy``, ``FILE.npz:KEY`` or
    ``FILE.npz`` (its array named ``name``: `edgekit run -o tokens.npz` writes ``tokens``, so a
    flow bundle's ``--cond tokens=tokens.npz`` chains)."""
    path, key = value.rsplit(":", 1) if ".npz:" in value else (value, None)
    # A regular file (a FIFO would block, /dev/zero never end): what is read is bounded by the
    # headers checked below, against the memory cap.
    fh = open_user_file(path, f"--cond {name}=")
    if not path.endswith(".npz"):
        return fh
    import zipfile

    try:
        archive = zipfile.ZipFile(fh)
    except Exception as exc:  # noqa: BLE001 - OSError, BadZipFile, EOFError, ...: not a readable .npz
        fh.close()
        raise UsageError(f"--cond {name}={value}: cannot read {path} as .npz ({exc})") from None
    key = key or name
    arrays = [m.removesuffix(".npy") for m in archive.namelist() if m.endswith(".npy")]
    if key not in arrays:
        archive.close()
        fh.close()
        raise UsageError(
            f"--cond {name}={value}: {path} has no array {key!r}; valid: {', '.join(arrays)}",
            hint=f"pick one with --cond {name}={path}:KEY",
        )
    return archive.open(key + ".npy")


def _npy_header(fh) -> tuple[tuple[int, ...], bool, np.dtype]:
    """(shape, fortran_order, dtype) of the .npy data ``fh`` holds, read from its header alone
    (no data, a header of at most 10 kB)."""
    fmt = np.lib.format
    version = fmt.read_magic(fh)
    if version == (1, 0):
        return fmt.read_array_header_1_0(fh, max_header_size=10_000)
    return fmt.read_array_header_2_0(fh, max_header_size=10_000)


def read_npy(name: str, path: str, shape: tuple[int, ...], max_rows: int | None = None) -> np.ndarray:
    """A numeric .npy (or .npz member) of ``shape`` — with ``max_rows``, of any row count up to
    it — its header checked before any data is read: no pickles, no structured or string dtypes,
    no header claiming more than allowed (allocation bombs)."""

    def bad(why: str) -> UsageError:
        return UsageError(
            f"--cond {name}={path}: cannot read it as .npy ({why})",
            hint=f"save a numeric array of shape {list(shape)} with numpy.save",
        )

    try:
        with _open_cond_file(name, path) as fh:
            file_shape, _, dtype = _npy_header(fh)
            if dtype.hasobject or dtype.fields is not None or dtype.kind not in "biuf":
                raise bad(f"dtype {dtype} is not a number type")
            rows_ok = (0 < file_shape[0] <= max_rows) if max_rows and len(file_shape) else False
            if tuple(file_shape) != tuple(shape) and not (rows_ok and tuple(file_shape[1:]) == tuple(shape[1:])):
                raise UsageError(
                    f"--cond {name}={path} has shape {list(file_shape)}, expected {list(shape)}"
                    + (f" (any row count up to {max_rows})" if max_rows else "")
                )
            check_bytes(
                f"--cond {name}={path} ({list(file_shape)} {dtype})",
                int(np.prod(file_shape, dtype=object)) * dtype.itemsize,
                "give fewer rows",
            )
            fh.seek(0)
            return np.load(fh, allow_pickle=False)
    except UsageError:
        raise
    except Exception as exc:  # noqa: BLE001 - OSError, ValueError, EOFError, tokenize's TokenError, zlib.error, ...
        raise bad(str(exc).splitlines()[0] if str(exc) else type(exc).__name__) from None


def cond_file_rows(raw: Mapping[str, str]) -> int | None:
    """Rows of the conditioning given as files (None when none is): ``run`` decodes them all."""
    rows = set()
    for name, value in raw.items():
        if is_cond_file(value):
            try:
                with _open_cond_file(name, value) as fh:
                    header = _npy_header(fh)
            except UsageError:
                raise
            except Exception as exc:  # noqa: BLE001 - any unreadable header: one line
                raise UsageError(
                    f"--cond {name}={value}: cannot read it as .npy "
                    f"({str(exc).splitlines()[0] if str(exc) else type(exc).__name__})"
                ) from None
            rows.add(int(header[0][0]) if header[0] else 0)
    if len(rows) > 1:
        raise UsageError(f"--cond files have different row counts {sorted(rows)}; valid: one row count for every file")
    return min(rows.pop(), MAX_COND_ROWS) if rows else None


def parse_cond_value(name: str, value: str, shape: tuple[int, ...], dtype: str) -> np.ndarray:
    """The raw array a --cond value names (``check_cond_values`` checks and casts it). A file may
    hold more rows than ``shape`` asks for: the first ones are taken."""
    if is_cond_file(value):
        arr = read_npy(name, value, shape, max_rows=MAX_COND_ROWS)
        if len(arr) < shape[0]:
            raise UsageError(
                f"--cond {name}={value} has {len(arr)} rows; {shape[0]} are needed",
                hint="give more rows, or decode fewer (--batch)",
            )
        return arr[: shape[0]]
    try:
        number = float(value)
    except ValueError:
        raise UsageError(f"--cond {name}={value!r} is neither a number nor a .npy/.npz file") from None
    return np.full(shape, number)


def check_cond_values(
    name: str, source: str, arr: np.ndarray, spec: TensorSpec, flag: str | None = None, float_range: bool = True
) -> np.ndarray:
    """``arr`` as the input's dtype, every value finite and inside the input's declared range
    (integers: ``[low, high)``; floats: ``[low, high]``, unless ``float_range`` is False: real rows
    of a float input may lie outside the range its draws come from); else one line naming the
    first bad value (``flag`` words where it came from; default ``--cond NAME=SOURCE``). A token
    id past the vocabulary is refused here, never handed to the runtime's Gather."""
    where = flag or f"--cond {name}={source}"
    values = np.asarray(arr)
    if values.dtype.kind == "f" and not np.all(np.isfinite(values)):
        bad = values[~np.isfinite(values)].flat[0]
        raise UsageError(f"{where}: value {bad} is not finite", hint=_valid_range(spec))
    integer = np.dtype(spec.dtype).kind in "iub"
    if integer and values.dtype.kind == "f" and np.any(values != np.round(values)):
        raise UsageError(f"{where} must be an integer ({spec.dtype})", hint=_valid_range(spec))
    if not integer and not float_range:
        return values.astype(spec.dtype)
    low = -np.inf if spec.low is None else spec.low
    high = np.inf if spec.high is None else spec.high
    outside = (values < low) | ((values >= high) if integer else (values > high))
    if np.any(outside):
        first = values[outside].flat[0].item()
        shown = int(first) if isinstance(first, float) and first.is_integer() else first
        raise UsageError(f"{where}: value {shown} is outside the valid range", hint=_valid_range(spec))
    return values.astype(spec.dtype)


def _valid_range(spec: TensorSpec) -> str:
    if spec.low is None and spec.high is None:
        return f"valid: finite {spec.dtype} values"
    closing = ")" if np.dtype(spec.dtype).kind in "iub" else "]"
    return f"valid: {spec.dtype} in [{spec.low}, {spec.high}{closing}"
