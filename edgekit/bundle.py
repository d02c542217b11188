"""The bundle: one directory, one manifest (``edgekit.json``), every artifact hashed.

Stages write artifacts under content-addressed names (``fp32-<sha8>.onnx``) and then replace the
manifest atomically, so a stage interrupted at any point leaves the previous manifest pointing at
intact files. Files the new manifest no longer names are deleted only after it is on disk.
"""

from __future__ import annotations

import copy
import datetime as _dt
import hashlib
import json
import os
import platform
import shutil
import uuid
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path
from typing import Any, Mapping

from edgekit.errors import BundleError
from edgekit.spec import KINDS, TensorSpec, tensor_specs_from_json

SCHEMA = "edgekit.bundle/1"
MANIFEST = "edgekit.json"
STAGING_PREFIX = ".staging-"
_CHUNK = 1 << 20


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        while chunk := fh.read(_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def now_iso() -> str:
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")


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
            json.dump(doc, fh, indent=2, sort_keys=False)
            fh.write("\n")
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def _validate(manifest: dict[str, Any], path: Path) -> None:
    """The parts every command reads: a clean error instead of a KeyError deep inside a stage."""

    def bad(what: str) -> BundleError:
        return BundleError(f"manifest {path}: {what}", hint="re-export the bundle with `edgekit export`")

    model = manifest["model"]
    if not isinstance(model.get("name"), str) or model.get("kind") not in KINDS:
        raise bad(f"model.name must be a string and model.kind one of {', '.join(KINDS)}")
    if not isinstance(model.get("meta"), dict):
        raise bad("model.meta must be an object")
    for role in ("inputs", "outputs"):
        specs = manifest["io"].get(role)
        if not isinstance(specs, dict) or not specs:
            raise bad(f"io.{role} must be a non-empty object")
        try:
            tensor_specs_from_json(specs)
        except Exception as exc:  # noqa: BLE001 - any malformed spec is the same user-facing error
            raise bad(f"io.{role} is malformed ({exc})") from None
    for name, doc in manifest["artifacts"].items():
        if not isinstance(doc, dict) or not isinstance(doc.get("path"), str):
            raise bad(f"artifact {name!r} must be an object with a string path")


@dataclass(frozen=True)
class Artifact:
    """One file of a bundle. ``path`` is relative to the bundle root."""

    name: str
    path: str
    sha256: str
    bytes: int
    made_by: str
    config: Mapping[str, Any] = field(default_factory=dict)
    created: str = ""

    def to_json(self) -> dict[str, Any]:
        return {
            "path": self.path,
            "sha256": self.sha256,
            "bytes": self.bytes,
            "made_by": self.made_by,
            "config": dict(self.config),
            "created": self.created,
        }


class Bundle:
    """A bundle directory and its manifest. Stages call ``staging_path`` → write there →
    ``add_artifact`` → ``save``; readers call ``Bundle.load`` (hashes verified)."""

    def __init__(self, root: Path, manifest: dict[str, Any]):
        self.root = Path(root)
        self.manifest = manifest
        self._superseded: list[Path] = []

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
    ) -> "Bundle":
        """An empty bundle in memory; nothing is written until ``save``."""
        root = Path(root)
        if root.exists() and not root.is_dir():
            raise BundleError(f"bundle path {root} exists and is not a directory", hint="choose another -o path")
        superseded: list[Path] = []
        if (root / MANIFEST).is_file():
            # Re-exporting replaces the bundle: every artifact derived from the old graph goes
            # once the new manifest is saved (until then the old bundle stays loadable).
            try:
                old = json.loads((root / MANIFEST).read_text()).get("artifacts", {})
                superseded = [root / d["path"] for d in old.values() if isinstance(d, dict) and "path" in d]
            except (json.JSONDecodeError, UnicodeDecodeError, AttributeError):
                pass
        elif root.is_dir() and any(p for p in root.iterdir() if not p.name.startswith(STAGING_PREFIX)):
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
        return bundle

    @classmethod
    def load(cls, root: Path | str, verify: bool = True) -> "Bundle":
        root = Path(root)
        path = root / MANIFEST
        if not path.is_file():
            hint = "create one with `edgekit export MODEL -o DIR` (or `edgekit demo`)"
            what = "does not exist" if not root.exists() else f"has no {MANIFEST}"
            raise BundleError(f"bundle {root} {what}", hint=hint)
        try:
            manifest = json.loads(path.read_text())
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            raise BundleError(f"manifest {path} is not valid JSON ({exc})", hint="re-run the stage that wrote it") from None
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
        _validate(manifest, path)
        bundle = cls(root, manifest)
        if verify:
            bundle.verify()
        return bundle

    # ---- views -------------------------------------------------------------------------------
    @property
    def kind(self) -> str:
        return self.manifest["model"]["kind"]

    @property
    def name(self) -> str:
        return self.manifest["model"]["name"]

    @property
    def meta(self) -> dict[str, Any]:
        return self.manifest["model"]["meta"]

    @property
    def inputs(self) -> dict[str, TensorSpec]:
        return tensor_specs_from_json(self.manifest["io"]["inputs"])

    @property
    def outputs(self) -> dict[str, TensorSpec]:
        return tensor_specs_from_json(self.manifest["io"]["outputs"])

    @property
    def ground_truth(self) -> str | None:
        return self.manifest["model"].get("ground_truth")

    def artifact(self, name: str) -> Artifact:
        doc = self.manifest["artifacts"].get(name)
        if doc is None:
            have = ", ".join(self.manifest["artifacts"]) or "none"
            hint = {
                "int8": f"run `edgekit quantize {self.root}` first",
                "fp32": f"re-export with `edgekit export MODEL -o {self.root}`",
            }.get(name, "run the stage that makes it")
            raise BundleError(f"bundle {self.root} has no {name!r} artifact (it has: {have})", hint=hint)
        return Artifact(name=name, **doc)

    def path_of(self, name: str) -> Path:
        return self.root / self.artifact(name).path

    # ---- integrity ---------------------------------------------------------------------------
    def verify(self) -> None:
        """Every artifact exists with its recorded size and sha256, and stays inside the bundle."""
        root = self.root.resolve()
        for name, doc in self.manifest["artifacts"].items():
            try:
                path = (self.root / doc["path"]).resolve()
                size, digest = int(doc["bytes"]), str(doc["sha256"])
            except (KeyError, TypeError, ValueError):
                raise BundleError(f"manifest entry for artifact {name!r} is malformed", hint="re-run the stage") from None
            if root not in path.parents:
                raise BundleError(f"artifact {name!r} path {doc['path']!r} points outside the bundle")
            if not path.is_file():
                raise BundleError(f"artifact {name!r} ({doc['path']}) is missing from {self.root}", hint="re-run the stage that makes it")
            if path.stat().st_size != size or sha256_file(path) != digest:
                raise BundleError(
                    f"artifact {name!r} ({doc['path']}) does not match its recorded sha256: the file was changed or truncated",
                    hint="re-run the stage that makes it (edgekit never loads a tampered artifact)",
                )

    # ---- writing -----------------------------------------------------------------------------
    def staging_path(self, filename: str) -> Path:
        """A fresh temp path inside the bundle for a stage to write ``filename`` into."""
        self.root.mkdir(parents=True, exist_ok=True)
        return self.root / f"{STAGING_PREFIX}{uuid.uuid4().hex[:8]}-{filename}"

    def add_artifact(self, name: str, staged: Path, *, made_by: str, config: Mapping[str, Any], suffix: str) -> Artifact:
        """Move ``staged`` into the bundle as ``<name>-<sha8><suffix>`` and record it (in memory;
        ``save`` makes it visible). The file it replaces is deleted after ``save``."""
        digest = sha256_file(staged)
        final = self.root / f"{name}-{digest[:8]}{suffix}"
        os.replace(staged, final)
        old = self.manifest["artifacts"].get(name)
        if old and old["path"] != final.name:
            self._superseded.append(self.root / old["path"])
        art = Artifact(name, final.name, digest, final.stat().st_size, made_by, copy.deepcopy(dict(config)), now_iso())
        self.manifest["artifacts"][name] = art.to_json()
        return art

    def remove_artifact(self, name: str) -> None:
        old = self.manifest["artifacts"].pop(name, None)
        if old:
            self._superseded.append(self.root / old["path"])

    def save(self) -> None:
        self.root.mkdir(parents=True, exist_ok=True)
        self.manifest["updated"] = now_iso()
        write_json_atomic(self.root / MANIFEST, self.manifest)
        live = {doc["path"] for doc in self.manifest["artifacts"].values()}
        root = self.root.resolve()
        for path in self._superseded:
            # Only ever delete files directly inside this bundle, whatever an old manifest said.
            if path.name not in live and path.resolve().parent == root:
                path.unlink(missing_ok=True)
        self._superseded.clear()

    def discard_staging(self) -> None:
        """Remove temp files a stage left behind (after a failure or an interrupted run)."""
        for path in self.root.glob(f"{STAGING_PREFIX}*"):
            if path.is_dir():
                shutil.rmtree(path, ignore_errors=True)
            else:
                path.unlink(missing_ok=True)
