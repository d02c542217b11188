"""Real conditioning rows: ``--cond-data FILE.npz|DIR`` and the held-out rows ``edgekit quantize``
stores in a bundle."""

from __future__ import annotations

import contextlib
import hashlib
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from edgekit.bundle import Bundle, sha256_file
from edgekit.errors import UsageError
from edgekit.evaluate.cond_files import check_cond_values
from edgekit.limits import MAX_FILES, check_bytes, check_count
from edgekit.userfiles import check_user_file, open_user_file


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
        return {
            "source": self.source,
            "sha256": self.sha256,
            "rows": self.rows,
            "inputs": {k: [str(v.dtype), list(v.shape)] for k, v in self.arrays.items()},
        }


def load_condition_data(bundle: Bundle, path: Path | str) -> ConditionData:
    """Read ``--cond-data``: an .npz whose arrays are named like the conditioning inputs, each
    [N, ...per-row shape] with the same N; or a directory of such .npz files (rows concatenated
    in file-name order) and/or ``NAME.npy`` files. Every conditioning input ``--cond`` does not
    set must be there; unknown names, shapes or dtypes are one clear error."""
    path = Path(path)
    flag = f"--cond-data {path}"
    if path.is_dir():
        # Regular files only (is_file: a FIFO or a link to /dev/zero is no data file).
        files = sorted(p for p in path.iterdir() if p.suffix in (".npz", ".npy") and p.is_file())
        if not files:
            raise UsageError(f"{flag}: the directory has no .npz or .npy files")
    elif path.exists() or path.is_symlink():
        files = [path]
    else:
        raise UsageError(f"{flag} does not exist", hint="give an .npz file or a directory of .npz/.npy files")
    check_count(f"{flag}: the number of files", len(files), MAX_FILES, "merge them into fewer .npz files")
    for f in files:  # regular (never a FIFO or /dev/zero) and under the memory cap before a byte is hashed or read
        check_bytes(f"--cond-data {check_user_file(f, '--cond-data')}", f.stat().st_size, "give fewer rows")
    digest = (
        sha256_file(path)
        if files == [path]
        else hashlib.sha256("".join(f"{p.name}:{sha256_file(p)}\n" for p in files).encode()).hexdigest()
    )
    names = list(bundle.meta.get("conditioning", {}))
    # Every header first: the total the arrays claim is checked before any data is read.
    headers = {f: _read_arrays(f, flag, headers_only=True) for f in files}
    need = sum(
        int(np.prod(shape, dtype=object)) * dtype.itemsize for h in headers.values() for shape, dtype in h.values()
    )
    shown = ", ".join(f"{k} {list(shape)} {dtype}" for h in headers.values() for k, (shape, dtype) in h.items())
    check_bytes(f"{flag} ({shown[:200]})", 2 * need, "give fewer rows")  # twice: read, then joined
    parts: dict[str, list[np.ndarray]] = {}
    for f in files:
        for k, v in _read_arrays(f, flag).items():
            parts.setdefault(k, []).append(v)
    extra = [k for k in parts if k not in names]
    if extra:
        raise UsageError(
            f"{flag}: {extra[0]!r} is not a conditioning input of {bundle.name}; valid: {', '.join(names) or 'none'}"
        )
    arrays: dict[str, np.ndarray] = {}
    for name, chunks in parts.items():
        spec = bundle.inputs[name]
        want = tuple(spec.shape[1:])
        for c in chunks:
            if c.ndim != len(want) + 1 or tuple(c.shape[1:]) != want:
                valid = f"[N, {', '.join(map(str, want))}]".replace("[N, ]", "[N]")
                raise UsageError(f"{flag}: {name!r} has shape {list(c.shape)}; valid: {valid} (N rows)")
            if not np.can_cast(c.dtype, spec.dtype, "same_kind"):
                raise UsageError(
                    f"{flag}: {name!r} is {c.dtype}; valid: {spec.dtype} (or a dtype that casts to it safely)"
                )
        arrays[name] = check_cond_values(
            name, "", np.concatenate(chunks), spec, flag=f"{flag}: {name!r}", float_range=False
        )
    counts = {k: len(v) for k, v in arrays.items()}
    if len(set(counts.values())) > 1 or 0 in counts.values():
        raise UsageError(
            f"{flag}: the arrays have different row counts {counts}; valid: the same N >= 1 for every input"
        )
    if not arrays:
        raise UsageError(f"{flag}: no arrays named like a conditioning input ({', '.join(names) or 'none'})")
    return ConditionData(arrays, str(path), digest)


def _read_arrays(f: Path, flag: str, headers_only: bool = False) -> dict[str, Any]:
    """The arrays of one .npz (or the one array of a NAME.npy); with ``headers_only`` their
    (shape, dtype) from the headers alone, never the data (a header may claim 10^12 rows). Only
    numeric dtypes; any unreadable file is one clear line."""
    import zipfile

    def bad(why: object) -> UsageError:
        text = str(why).splitlines()[0] if str(why) else type(why).__name__
        return UsageError(
            f"{flag}: cannot read {f.name} as {f.suffix} ({text})",
            hint="save the arrays with numpy.savez (one array per conditioning input, [N, ...] each)",
        )

    try:
        with contextlib.ExitStack() as stack:
            if f.suffix == ".npz":
                archive = stack.enter_context(zipfile.ZipFile(stack.enter_context(open_user_file(f, "--cond-data"))))
                members = [m for m in archive.namelist() if m.endswith(".npy")]
                check_count(
                    f"{flag}: the arrays in {f.name}", len(members), MAX_FILES, "keep one array per conditioning input"
                )
                opened = {m.removesuffix(".npy"): (lambda m=m: archive.open(m)) for m in members}
            else:
                opened = {f.stem: (lambda: open_user_file(f, "--cond-data"))}
            out: dict[str, Any] = {}
            for key, opener in opened.items():
                with opener() as fh:
                    shape, dtype = _header(fh)
                    if dtype.hasobject or dtype.fields is not None or dtype.kind not in "biuf":
                        raise bad(f"array {key!r} has dtype {dtype}, not a number type")
                    if headers_only:
                        out[key] = (shape, dtype)
                        continue
                    fh.seek(0)
                    out[key] = np.load(fh, allow_pickle=False)
            return out
    except UsageError:
        raise
    except Exception as exc:  # noqa: BLE001 - BadZipFile, TokenError, SyntaxError, EOFError, zlib.error, ...: one unreadable file
        raise bad(exc) from None


def _header(fh: Any) -> tuple[tuple[int, ...], np.dtype]:
    fmt = np.lib.format
    version = fmt.read_magic(fh)
    read = fmt.read_array_header_1_0 if version == (1, 0) else fmt.read_array_header_2_0
    shape, _, dtype = read(fh, max_header_size=10_000)
    return tuple(shape), dtype


def stored_rows(bundle: Bundle) -> dict[str, np.ndarray] | None:
    """The held-out condition rows ``edgekit quantize`` gated on (artifact ``conditions``), or None."""
    if not bundle.has("conditions"):
        return None
    with np.load(bundle.path_of("conditions"), allow_pickle=False) as f:
        return {k: f[k] for k in f.files}
