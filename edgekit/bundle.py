"""The bundle: one directory, one manifest (``edgekit.json``), every artifact hashed.

Stages write artifacts under content-addressed names (``fp32-<sha8>.onnx``) and then replace the
manifest atomically, so a stage interrupted at any point leaves the previous manifest pointing at
intact files. Files the new manifest no longer names are deleted only after it is on disk.
"""

from __future__ import annotations

import copy
import datetime as _dt
import json
import os
import shutil
import uuid
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from edgekit._lock import LOCK_NAME, STAGING_PREFIX, bundle_lock
from edgekit._sidefiles import check_side_files_listed
from edgekit.errors import BundleError
from edgekit.manifest import (
    MANIFEST,
    SCHEMA,
    inside,
    live_paths,
    merge_manifest,
    provenance,
    prune_empty,
    read_json,
    sha256_file,
    write_json_atomic,
)
from edgekit.manifest_schema import validate_manifest
from edgekit.manifest_sections import (
    Artifact,
    BucketGraphs,
    EngineRecord,
    QuantizationSummary,
    Verification,
    bucket_binding,
)
from edgekit.manifest_views import ManifestViews
from edgekit.spec import TensorSpec

# Bundles whose manifest this process committed (the CLI says so when Ctrl-C comes after a commit).
COMMITTED: list[str] = []

__all__ = [
    "Artifact",
    "BucketGraphs",
    "Bundle",
    "EngineRecord",
    "MANIFEST",
    "QuantizationSummary",
    "SCHEMA",
    "STAGING_PREFIX",
    "Verification",
    "bucket_binding",
    "inside",
    "now_iso",
    "sha256_file",
    "write_json_atomic",
]
_TAMPERED = "re-run the stage that makes it (edgekit never loads a tampered artifact)"


def now_iso() -> str:
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")


class Bundle(ManifestViews):
    """A bundle directory and its manifest. Stages call ``staging_path`` → write there →
    ``add_artifact`` → ``save``; readers call ``Bundle.load`` (hashes verified) and ask what it
    holds through the views it inherits (``manifest_views.ManifestViews``)."""

    def __init__(self, root: Path, manifest: dict[str, Any]):
        self.root = Path(root)
        self.manifest = manifest
        self._superseded: list[Path] = []
        # The manifest as loaded: ``save`` applies only what changed since onto the one on disk.
        self._base: dict[str, Any] | None = copy.deepcopy(manifest)

    # ---- creation and loading -----------------------------------------------------------------
    @classmethod
    def new(
        cls,
        root: Path,
        *,
        model: Mapping[str, Any],
        inputs: Mapping[str, TensorSpec],
        outputs: Mapping[str, TensorSpec],
        decode_defaults: Mapping[str, Any],
    ) -> Bundle:
        """An empty bundle in memory; nothing is written until ``save``."""
        root = Path(root)
        if root.exists() and not root.is_dir():
            raise BundleError(f"bundle path {root} exists and is not a directory", hint="choose another -o path")
        superseded: list[Path] = []
        if (root / MANIFEST).is_file():
            # Re-exporting replaces the bundle: every artifact, side file and engine derived from
            # the old graph goes once the new manifest is saved (until then the old one loads).
            try:
                old = json.loads((root / MANIFEST).read_text())
                superseded = [root / rel for rel in live_paths(old)] if isinstance(old, dict) else []
            except (ValueError, RecursionError, AttributeError, TypeError):
                pass
        elif root.is_dir() and any(
            p for p in root.iterdir() if not p.name.startswith(STAGING_PREFIX) and p.name != LOCK_NAME
        ):
            raise BundleError(
                f"bundle path {root} is a non-empty directory without {MANIFEST}",
                hint="choose a new or empty -o directory (edgekit will not write into other files)",
            )
        manifest = {
            "schema": SCHEMA,
            "created": now_iso(),
            "updated": now_iso(),
            "model": dict(model),
            "io": {
                "inputs": {n: s.to_json() for n, s in inputs.items()},
                "outputs": {n: s.to_json() for n, s in outputs.items()},
            },
            "decode_defaults": dict(decode_defaults),
            "artifacts": {},
            "verification": {},
            "quantization": None,
            "engines": {},
            "provenance": provenance(),
        }
        bundle = cls(root, manifest)
        bundle._superseded = superseded
        bundle._base = None  # a new bundle replaces whatever manifest is there
        return bundle

    @classmethod
    def load(cls, root: Path | str, verify: bool = True) -> Bundle:
        root = Path(root)
        path = root / MANIFEST
        if not path.is_file():
            hint = "create one with `edgekit export MODEL -o DIR` (or `edgekit demo`)"
            what = "does not exist" if not root.exists() else f"has no {MANIFEST}"
            raise BundleError(f"bundle {root} {what}", hint=hint)
        manifest = read_json(path)
        if not isinstance(manifest, dict):
            raise BundleError(f"manifest {path} is not a JSON object")
        schema = manifest.get("schema")
        if schema != SCHEMA:
            raise BundleError(
                f"manifest {path} has schema {schema!r}; this edgekit reads {SCHEMA!r}",
                hint="re-export the bundle with this edgekit version, or upgrade edgekit",
            )
        for key in ("model", "io", "artifacts"):
            if not isinstance(manifest.get(key), dict):
                raise BundleError(f"manifest {path} lacks the {key!r} section", hint="re-export the bundle")
        validate_manifest(manifest, path)
        bundle = cls(root, manifest)
        if verify:
            bundle.verify()
        return bundle

    # ---- recording (in memory; ``save`` commits) ---------------------------------------------
    def record(self, section: str, doc: Any) -> None:
        """Set a whole top-level section (in memory; ``save`` commits it)."""
        self.manifest[section] = doc

    def record_entry(self, section: str, key: str, doc: Any) -> None:
        """Set one entry of a section merged entry by entry at save (engines, fused, verification)."""
        if not isinstance(self.manifest.get(section), dict):
            self.manifest[section] = {}
        self.manifest[section][key] = doc

    # ---- integrity ---------------------------------------------------------------------------
    def verify(self, skip: Callable[[str], bool] | None = None) -> None:
        """Every artifact exists with its recorded size and sha256, and stays inside the bundle;
        but those ``skip(name)`` names (the caller replaces them: quantize, its int8 graphs)."""
        root = self.root.resolve()
        for name, doc in [(n, d) for n, d in self.manifest["artifacts"].items() if skip is None or not skip(n)]:
            try:
                path = (self.root / doc["path"]).resolve()
                size, digest = int(doc["bytes"]), str(doc["sha256"])
            except (KeyError, TypeError, ValueError):
                raise BundleError(
                    f"manifest entry for artifact {name!r} is malformed", hint="re-run the stage"
                ) from None
            if root not in path.parents:
                raise BundleError(f"artifact {name!r} path {doc['path']!r} points outside the bundle")
            if not path.is_file():
                raise BundleError(
                    f"artifact {name!r} ({doc['path']}) is missing from {self.root}", hint=self._remake_hint(name)
                )
            if path.stat().st_size != size or sha256_file(path) != digest:
                raise BundleError(
                    f"artifact {name!r} ({doc['path']}) does not match its recorded sha256: the file was changed "
                    "or truncated",
                    hint=_TAMPERED,
                )
            for side in doc.get("side_files") or []:
                try:
                    rel, size, digest = str(side["path"]), int(side["bytes"]), str(side["sha256"])
                except (KeyError, TypeError, ValueError):
                    raise BundleError(
                        f"manifest entry for artifact {name!r} has a malformed side file", hint="re-run the stage"
                    ) from None
                spath = inside(self.root, rel)
                if not spath.is_file() or spath.stat().st_size != size or sha256_file(spath) != digest:
                    raise BundleError(
                        f"side file {rel} of artifact {name!r} is missing or does not match its recorded sha256",
                        hint=_TAMPERED,
                    )
            check_side_files_listed(path, name, doc)  # a weights file the manifest does not list would be read unhashed

    # ---- writing -----------------------------------------------------------------------------
    def staging_path(self, filename: str) -> Path:
        """A fresh temp path inside the bundle for a stage to write ``filename`` into."""
        self.root.mkdir(parents=True, exist_ok=True)
        return self.root / f"{STAGING_PREFIX}{uuid.uuid4().hex[:8]}-{filename}"

    def add_artifact(
        self,
        name: str,
        staged: Path,
        *,
        made_by: str,
        config: Mapping[str, Any],
        suffix: str,
        side_files: Sequence[Path] = (),
    ) -> Artifact:
        """Move ``staged`` into the bundle as ``<name>-<sha8><suffix>`` and record it (in memory;
        ``save`` makes it visible). The file it replaces is deleted after ``save``.

        side_files: files the artifact refers to by name (ONNX external data), already under
        their final content-addressed names; moved beside it and hashed with it."""
        sides = []
        for side in side_files:
            dest = inside(self.root, side.name)
            sides.append({"path": side.name, "sha256": sha256_file(side), "bytes": side.stat().st_size})
            os.replace(side, dest)
        digest = sha256_file(staged)
        final = inside(self.root, f"{name}-{digest[:8]}{suffix}")
        os.replace(staged, final)
        old = self.manifest["artifacts"].get(name)
        if old:
            self._superseded += [self.root / rel for rel in live_paths({"artifacts": {name: old}})]
        art = Artifact(
            name,
            final.name,
            digest,
            final.stat().st_size,
            made_by,
            copy.deepcopy(dict(config)),
            now_iso(),
            tuple(sides),
        )
        self.manifest["artifacts"][name] = art.to_json()
        return art

    def remove_artifact(self, name: str) -> None:
        old = self.manifest["artifacts"].pop(name, None)
        if old:
            self._superseded += [self.root / rel for rel in live_paths({"artifacts": {name: old}})]

    def save(self) -> None:
        """Commit under the bundle's lock: this stage's changes applied to the manifest as it is
        on disk now (never a stale copy), written atomically; then superseded files go."""
        with bundle_lock(self.root, "save", create=True):
            base, disk = self._base, None
            if base is not None and (self.root / MANIFEST).is_file():
                try:
                    disk = read_json(self.root / MANIFEST)
                except BundleError:
                    disk = None
            # No base (a new bundle) or nothing readable on disk: this manifest is the whole truth.
            merged = (
                merge_manifest(base, self.manifest, disk)
                if base is not None and isinstance(disk, dict)
                else self.manifest
            )
            merged["updated"] = now_iso()
            try:
                write_json_atomic(self.root / MANIFEST, merged)
            except OSError as exc:
                raise BundleError(
                    f"cannot write {self.root / MANIFEST} ({exc.strerror or exc})",
                    hint="free some space or make the bundle writable, then re-run the stage",
                ) from None
            self.manifest = merged
            self._base = copy.deepcopy(merged)
            COMMITTED.append(str(self.root))
            live = live_paths(merged) | {MANIFEST, LOCK_NAME}
            root = self.root.resolve()
            # What the manifest on disk named and the merged one does not (another stage's file this
            # stage replaced) goes too: nothing is orphaned.
            dropped = [self.root / rel for rel in live_paths(disk)] if isinstance(disk, dict) else []
            for path in self._superseded + dropped:
                # Only ever delete files inside this bundle, whatever an old manifest said.
                try:
                    rel = path.resolve().relative_to(root).as_posix()
                except ValueError:
                    continue
                if rel not in live:
                    path.unlink(missing_ok=True)
                    prune_empty(path.parent, root)
            self._superseded.clear()

    def discard_staging(self) -> None:
        """Remove temp files a stage left behind (after a failure or an interrupted run)."""
        for path in self.root.glob(f"{STAGING_PREFIX}*"):
            if path.is_dir():
                shutil.rmtree(path, ignore_errors=True)
            else:
                path.unlink(missing_ok=True)
