"""Installing built files into a bundle: content-addressed names under ``engines/<target>/``, and
removing an old engine's files once the manifest no longer names them."""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from edgekit.bundle import Bundle, EngineRecord, inside, sha256_file
from edgekit.errors import BundleError
from edgekit.runtimes.engines import ENGINES_DIR
from edgekit.targets import Target

# The .bin of an OpenVINO IR takes its .xml's name (what ``read_model`` looks for beside it).
_SUFFIXES = {"metadata": ".plan.json", "required_operators": ".required_operators.config", "weights": ".bin"}
# Files the engine's model names from inside (ONNX external data, a QNN context binary): installed
# under that very name, recorded with their size like an artifact's side files.
_NAMED_BY_MODEL = ("external_data",)
# Side files that hold weights: recorded with their size, like an artifact's side files.
_WEIGHTS = ("external_data", "weights")


def check_engine_folder(bundle: Bundle, target: Target) -> Path:
    """``engines/<target>/`` inside the bundle, each part a folder or absent: checked before a
    build (a file put where the folder goes is one line, not an error after minutes of work)."""
    folder = inside(bundle.root, f"{ENGINES_DIR}/{target.name}/x").parent  # never outside the bundle, whatever the name
    for path in (folder.parent, folder):
        if path.is_symlink() or (path.exists() and not path.is_dir()):
            raise BundleError(
                f"{path} is not a folder; edgekit keeps the bundle's engines there",
                hint=f"move it away (rm {path}), then build again",
            )
    return folder


def install(bundle: Bundle, target: Target, precision: str, files: Mapping[str, Path]) -> dict[str, Any]:
    """Move the built files to ``engines/<target>/<precision>-<sha8><suffix>``; the entry's file fields."""
    model = files["model"]
    digest = sha256_file(model)
    stem = f"{precision}-{digest[:8]}"
    folder = check_engine_folder(bundle, target)
    folder.mkdir(parents=True, exist_ok=True)
    rel = lambda p: p.relative_to(bundle.root.resolve()).as_posix()  # noqa: E731  (inside() resolves: a relative bundle path too)
    final = folder / f"{stem}{model.suffix}"
    dests = [final] + [
        folder / (p.name if r in _NAMED_BY_MODEL else f"{stem}{_SUFFIXES[r]}") for r, p in files.items() if r != "model"
    ]
    for dest in dests:
        if dest.is_symlink() or (dest.exists() and not dest.is_file()):
            raise BundleError(
                f"{dest} is in the way of the engine edgekit built (a folder or link where its file goes)",
                hint=f"move it away (rm -r {dest}), then build again",
            )
    entry: dict[str, Any] = {"path": rel(final), "sha256": digest, "bytes": model.stat().st_size}
    for role, path in files.items():
        if role == "model":
            continue
        dest = folder / (path.name if role in _NAMED_BY_MODEL else f"{stem}{_SUFFIXES[role]}")
        os.replace(path, dest)
        entry[role] = {"path": rel(dest), "sha256": sha256_file(dest)} | (
            {"bytes": dest.stat().st_size} if role in _WEIGHTS else {}
        )
    os.replace(model, final)
    return entry


def remove_superseded(bundle: Bundle, old: EngineRecord | None) -> None:
    """Delete an old engine's files once the manifest no longer names them (only ever inside
    ``engines/`` of this bundle, whatever the manifest said)."""
    live = {f for e in bundle.engines.values() for f in e.files}
    engines = (bundle.root / ENGINES_DIR).resolve()
    for rel in set(old.files if old is not None else ()) - live:
        path = (bundle.root / rel).resolve()
        if engines in path.parents:
            path.unlink(missing_ok=True)
