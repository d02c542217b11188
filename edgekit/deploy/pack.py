"""`edgekit pack`: a bundle as a tarball with only what a target needs (the manifest, the models of
the precisions it runs, its engines), and the same selection copied into a folder for deploy
(``stage_bundle``). `edgekit unpack` and its safe extraction are in ``unpack`` (re-exported)."""

from __future__ import annotations

import contextlib
import io
import json
import os
import shutil
import tarfile
import uuid
from pathlib import Path
from typing import Any

from edgekit.bundle import MANIFEST, Bundle, now_iso
from edgekit.deploy.unpack import MAX_MEMBERS, MAX_UNPACK_BYTES, safe_extract, unpack_bundle
from edgekit.errors import BundleError, UsageError
from edgekit.targets import Target, load_target

PACK_SCHEMA = "edgekit.pack/1"


def bundle_contents(
    bundle: Bundle, target: Target | None, *, engines: bool = True
) -> tuple[list[str], dict[str, Any], list[str]]:
    """``(files, manifest, left_out)``: the bundle-relative files ``target`` needs, the manifest
    that names exactly those, and what was left out. ``target`` None: every artifact and engine
    (and nothing the manifest does not name). ``engines`` False: no engines at all."""
    keep_models = None if target is None else {"fp32", *target.precisions}
    left_out: list[str] = []
    files: list[str] = []
    kept: list[str] = []
    for art in [bundle.artifact(name) for name in bundle.artifact_names]:
        if keep_models is not None and _artifact_precision(art.name) not in keep_models:
            left_out.append(f"artifact {art.name} ({art.path})")
            continue
        kept.append(art.name)
        files += art.files
    kept_engines: list[str] = []
    for key, entry in bundle.engines.items():
        if not engines or (target is not None and entry.target != target.name):
            left_out.append(f"engine {key} ({entry.path})")
            continue
        kept_engines.append(key)
        files += entry.files  # its sidecars, weights file and step-bucket engines too
    files = list(dict.fromkeys(files))  # a side file several artifacts share (step buckets' weights) is packed once
    root = bundle.root.resolve()
    for rel in files:
        path = (bundle.root / rel).resolve()
        if root not in path.parents or not path.is_file():
            raise BundleError(
                f"bundle {bundle.root}: {rel} is missing or outside the bundle", hint="re-run the stage that makes it"
            )
    left_out += _unnamed_files(bundle.root, bundle.named_files())
    packed = {
        "target": target.name if target else None,
        "from": str(bundle.root),
        "created": now_iso(),
        "left_out": left_out,
    }
    return files, bundle.subset(kept, kept_engines, packed=packed), left_out


def _unnamed_files(root: Path, named: set[str], most: int = 20) -> list[str]:
    """Files in the bundle folder its manifest does not name (never packed: said, not silent)."""
    found = []
    for folder, dirs, names in os.walk(root):
        dirs[:] = sorted(d for d in dirs if not d.startswith("."))
        for name in sorted(names):
            rel = (Path(folder) / name).relative_to(root).as_posix()
            if not name.startswith(".") and rel != MANIFEST and rel not in named:
                found.append(rel)
    out = [f"file {rel} (the manifest does not name it)" for rel in found[:most]]
    return out + ([f"… and {len(found) - most} more files the manifest does not name"] if len(found) > most else [])


# Artifacts that are not a model of one precision but data the device side reads: the held-out
# condition rows `edgekit quantize` gated on (`check` and `profile` decode them by default; without
# them a device check silently judged other rows than the budget did).
DEVICE_DATA = ("conditions",)


def _artifact_precision(name: str) -> str:
    """The precision an artifact belongs to (what decides whether a target's pack keeps it): a
    step bucket's graph and the calibration table go with ``int8``; device data with every
    target ("fp32", which every pack keeps); any other name is its own (``fp32``, ``int8``,
    ``fused-step``, ...)."""
    if name in DEVICE_DATA:
        return "fp32"
    if name.startswith("int8-"):  # int8-bucket-N, int8-calibration
        return "int8"
    return name


def pack_bundle(path: str | Path, out: str | Path, target: str | Path | Target | None = None) -> dict[str, Any]:
    """Write ``out`` (.tar.gz): one top-level folder named like the bundle, holding its manifest
    and what ``target`` needs (everything the manifest names when None). Returns the
    ``edgekit pack --json`` document."""
    bundle = Bundle.load(path)
    tgt = load_target(target) if target is not None else None
    files, manifest, left_out = bundle_contents(bundle, tgt)
    out = Path(out)
    if out.resolve().is_relative_to(bundle.root.resolve()):
        raise UsageError(f"-o {out} is inside the bundle {bundle.root}", hint="write the tarball somewhere else")
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise BundleError(f"cannot write {out} ({exc.strerror or exc})", hint="choose a writable -o path") from None
    top = bundle.root.resolve().name
    tmp = out.with_name(f".{out.name}.{uuid.uuid4().hex[:8]}.tmp")
    total = 0
    try:
        with tarfile.open(tmp, "w:gz") as tar:
            data = (json.dumps(manifest, indent=2) + "\n").encode()
            info = tarfile.TarInfo(f"{top}/{MANIFEST}")
            info.size, info.mode, info.mtime = len(data), 0o644, int(bundle.root.joinpath(MANIFEST).stat().st_mtime)
            tar.addfile(info, io.BytesIO(data))
            for rel in files:
                src = bundle.root / rel
                total += src.stat().st_size
                tar.add(src, arcname=f"{top}/{rel}", recursive=False, filter=_anonymous)
        os.replace(tmp, out)
    except OSError as exc:  # full disk, read-only folder: one line, and no partial tarball
        raise BundleError(
            f"cannot write {out} ({exc.strerror or exc})", hint="free some space or choose a writable -o path"
        ) from None
    finally:
        with contextlib.suppress(OSError):  # cleanup must not hide the error that got us here
            tmp.unlink(missing_ok=True)
    return {
        "schema": PACK_SCHEMA,
        "bundle": str(bundle.root),
        "target": tgt.name if tgt else None,
        "out": str(out),
        "files": [MANIFEST, *files],
        "bytes": out.stat().st_size,
        "content_bytes": total,
        "left_out": left_out,
    }


def _anonymous(info: tarfile.TarInfo) -> tarfile.TarInfo:
    info.uid = info.gid = 0
    info.uname = info.gname = ""
    return info


def stage_bundle(bundle: Bundle, dest: Path, target: Target, *, engines: bool = True) -> dict[str, Any]:
    """Copy what ``target`` needs into ``dest`` (a new directory) as a loadable bundle (hard
    links where possible); its file list and what was left out."""
    files, manifest, left_out = bundle_contents(bundle, target, engines=engines)
    dest.mkdir(parents=True)
    total = 0
    for rel in files:
        out = dest / rel
        out.parent.mkdir(parents=True, exist_ok=True)
        try:
            os.link(bundle.root / rel, out)
        except OSError:
            shutil.copy2(bundle.root / rel, out)
        total += out.stat().st_size
    (dest / MANIFEST).write_text(json.dumps(manifest, indent=2) + "\n")
    return {"files": [MANIFEST, *files], "bytes": total, "left_out": left_out}


__all__ = [
    "MAX_MEMBERS",
    "MAX_UNPACK_BYTES",
    "PACK_SCHEMA",
    "bundle_contents",
    "pack_bundle",
    "safe_extract",
    "stage_bundle",
    "unpack_bundle",
]
