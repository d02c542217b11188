"""The manifest file as data: reading and writing it safely (its schema: ``manifest_schema``;
what its sections hold, typed: ``manifest_sections``), the files it names and their sha256, and
merging one stage's changes into the manifest as it is on disk."""

from __future__ import annotations

import contextlib
import copy
import hashlib
import json
import os
import platform
import uuid
from collections.abc import Iterable, Mapping
from importlib import metadata
from pathlib import Path
from typing import Any

from edgekit.errors import BundleError
from edgekit.userfiles import MAX_MANIFEST_BYTES, check_utf8_path, read_user_text

SCHEMA = "edgekit.bundle/1"
MANIFEST = "edgekit.json"
# Files a stage writes before it commits them (swept by the next holder of the bundle's lock).
STAGING_PREFIX = ".staging-"
# Manifest sections merged entry by entry at save (a stage changes some entries of these and must
# not drop entries another stage committed meanwhile); every other top-level key is replaced whole.
_MERGED_SECTIONS = ("artifacts", "engines", "fused", "verification", "graph")
_MISSING = object()
_CHUNK = 1 << 20


# What this process last hashed, by (path, size, mtime): ``sha256_seen`` answers from it so a
# command that reads a verified bundle's hashes again does not read a 2 GiB file twice.
_SEEN: dict[tuple[str, int, int], str] = {}
_SEEN_MAX = 4096


def _stat_key(path: str | Path) -> tuple[str, int, int]:
    st = os.stat(path)
    return (os.path.abspath(path), st.st_size, st.st_mtime_ns)


def sha256_file(path: str | Path) -> str:
    """Hex sha256 of a file's bytes, read in 1 MiB chunks (always read: integrity checks call
    this; what it finds is kept for ``sha256_seen``)."""
    key = _stat_key(path)
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        while chunk := fh.read(_CHUNK):
            digest.update(chunk)
    if _stat_key(path) == key:  # not written while it was read
        if len(_SEEN) >= _SEEN_MAX:
            _SEEN.clear()
        _SEEN[key] = digest.hexdigest()
    return digest.hexdigest()


def sha256_seen(path: str | Path) -> str:
    """``sha256_file``, answered without reading the file again while its path, size and mtime
    are those of the last hash this process took of it (``Bundle.load`` has just hashed every
    artifact). For reports only: a file rewritten in place within the file system's clock tick
    keeping its size reads as unchanged, so integrity checks use ``sha256_file``."""
    seen = _SEEN.get(_stat_key(path))
    return seen if seen is not None else sha256_file(path)


def _version(dist: str) -> str | None:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return None


def provenance() -> dict[str, Any]:
    """Versions that made an artifact (read from package metadata: imports nothing heavy)."""
    return {
        "edgekit": _version("edgekit"),
        "torch": _version("torch"),
        "onnx": _version("onnx"),
        "onnxruntime": _version("onnxruntime"),
        "numpy": _version("numpy"),
        "python": platform.python_version(),
        "platform": f"{platform.system()}-{platform.machine()}",
    }


def write_json_atomic(path: Path, doc: Mapping[str, Any]) -> None:
    """Write JSON through a temp file in the same directory, fsync, then rename over ``path``."""
    tmp = path.with_name(f"{STAGING_PREFIX}{uuid.uuid4().hex[:8]}-{path.name}")
    try:
        with open(tmp, "w") as fh:
            json.dump(doc, fh, indent=2, sort_keys=False, allow_nan=False)  # NaN is not JSON
            fh.write("\n")
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except ValueError as exc:  # a NaN/inf slipped into a document: a bug, never written to disk
        raise BundleError(f"refusing to write {path}: {exc}") from None
    finally:
        with contextlib.suppress(OSError):  # cleanup must not hide the error that got us here
            tmp.unlink(missing_ok=True)


def read_json(path: Path, what: str = "manifest") -> Any:
    """``json.loads`` of a file as one-line errors (bad UTF-8, bad JSON, nesting deep enough to
    exhaust the recursion limit)."""
    # A bundle at a non-UTF-8 path would reach onnx and ONNX Runtime, which take UTF-8 only: one line now.
    check_utf8_path(path.parent, "bundle path", error=BundleError, hint="rename the folder to a UTF-8 name")
    text = read_user_text(path, what, max_bytes=MAX_MANIFEST_BYTES, error=BundleError)  # regular, bounded: never a FIFO
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise BundleError(f"{what} {path} is not valid JSON ({exc})", hint="re-run the stage that wrote it") from None
    except RecursionError:
        raise BundleError(
            f"{what} {path} is nested too deeply to be a manifest", hint="re-run the stage that wrote it"
        ) from None


def inside(root: Path, rel: str) -> Path:
    """``root / rel`` if it stays inside ``root`` (after resolving links), else a BundleError."""
    base = Path(root).resolve()
    path = (Path(root) / rel).resolve()
    if base not in path.parents:
        raise BundleError(
            f"path {rel!r} points outside the bundle {root}", hint="edgekit writes only inside the bundle"
        )
    return path


def live_paths(manifest: Mapping[str, Any]) -> set[str]:
    """Every bundle-relative file the manifest names (artifacts, side files, engines, fused)."""
    out: set[str] = set()

    def walk(obj: Any) -> None:
        if isinstance(obj, Mapping):
            for key, value in obj.items():
                if key == "path" and isinstance(value, str):
                    out.add(Path(value).as_posix())
                else:
                    walk(value)
        elif isinstance(obj, list):
            for value in obj:
                walk(value)

    for section in ("artifacts", "engines", "fused"):
        walk(manifest.get(section) or {})
    return out


def narrowed(
    manifest: Mapping[str, Any], artifacts: Iterable[str], engines: Iterable[str] | None, *, fused: bool = True
) -> dict[str, Any]:
    """A copy of ``manifest`` naming only ``artifacts`` and ``engines`` (None: no engines section),
    and the fused graphs only if ``fused``."""
    doc = copy.deepcopy(dict(manifest))
    keep = set(artifacts)
    doc["artifacts"] = {k: v for k, v in doc["artifacts"].items() if k in keep}
    if engines is None:
        doc.pop("engines", None)
    elif isinstance(doc.get("engines"), dict):
        kept = set(engines)
        doc["engines"] = {k: v for k, v in doc["engines"].items() if k in kept}
    if not fused:
        doc.pop("fused", None)
    return doc


def prune_empty(folder: Path, root: Path) -> None:
    """Remove ``folder`` and its parents up to (not including) ``root`` while they are empty."""
    folder = folder.resolve()
    while folder != root and root in folder.parents:
        try:
            folder.rmdir()
        except OSError:
            return
        folder = folder.parent


def merge_manifest(base: Mapping[str, Any], mine: Mapping[str, Any], disk: Mapping[str, Any]) -> dict[str, Any]:
    """``disk`` (the manifest as it is now) plus what this stage changed between ``base`` (as it
    loaded it) and ``mine``: entries another stage committed meanwhile survive."""
    out = copy.deepcopy(dict(disk))
    for key in set(base) | set(mine):
        if mine.get(key, _MISSING) == base.get(key, _MISSING):
            continue
        if key in _MERGED_SECTIONS and isinstance(mine.get(key), dict) and isinstance(out.get(key), dict):
            old = base.get(key)
            if not isinstance(old, dict):
                old = {}
            for sub in set(old) | set(mine[key]):
                if mine[key].get(sub, _MISSING) == old.get(sub, _MISSING):
                    continue
                if sub in mine[key]:
                    out[key][sub] = copy.deepcopy(mine[key][sub])
                else:
                    out[key].pop(sub, None)
        elif key in mine:
            out[key] = copy.deepcopy(mine[key])
        else:
            out.pop(key, None)
    return out
