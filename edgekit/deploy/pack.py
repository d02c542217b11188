"""`edgekit pack` / `edgekit unpack`: a bundle as a tarball with only what a target needs (the
manifest, the models of the precisions it runs, its engines), and an extraction that refuses any
member that would land outside the destination."""

from __future__ import annotations

import copy
import io
import json
import os
import re
import shutil
import tarfile
import uuid
from pathlib import Path, PurePosixPath
from typing import Any

from edgekit.bundle import MANIFEST, Bundle, now_iso
from edgekit.errors import BundleError, UsageError
from edgekit.targets import Target, load_target

PACK_SCHEMA = "edgekit.pack/1"


def bundle_contents(bundle: Bundle, target: Target | None, *, engines: bool = True) -> tuple[list[str], dict[str, Any], list[str]]:
    """``(files, manifest, left_out)``: the bundle-relative files ``target`` needs, the manifest
    that names exactly those, and what was left out. ``target`` None: every artifact and engine
    (and nothing the manifest does not name). ``engines`` False: no engines at all."""
    manifest = copy.deepcopy(bundle.manifest)
    keep_models = None if target is None else {"fp32", *target.precisions}
    left_out: list[str] = []
    files: list[str] = []
    for name in list(manifest["artifacts"]):
        if keep_models is not None and name not in keep_models:
            left_out.append(f"artifact {name} ({manifest['artifacts'][name]['path']})")
            del manifest["artifacts"][name]
            continue
        files.append(manifest["artifacts"][name]["path"])
        files += [side["path"] for side in manifest["artifacts"][name].get("side_files") or []]
    for key in list(manifest.get("engines") or {}):
        entry = manifest["engines"][key]
        if not engines or (target is not None and entry.get("target", key.split("/")[0]) != target.name):
            left_out.append(f"engine {key} ({entry.get('path')})")
            del manifest["engines"][key]
            continue
        files.append(entry["path"])
        files += [entry[role]["path"] for role in ("metadata", "required_operators") if isinstance(entry.get(role), dict)]
    root = bundle.root.resolve()
    for rel in files:
        path = (bundle.root / rel).resolve()
        if root not in path.parents or not path.is_file():
            raise BundleError(f"bundle {bundle.root}: {rel} is missing or outside the bundle", hint="re-run the stage that makes it")
    manifest["packed"] = {"target": target.name if target else None, "from": str(bundle.root), "created": now_iso(), "left_out": left_out}
    return files, manifest, left_out


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
    out.parent.mkdir(parents=True, exist_ok=True)
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
    finally:
        tmp.unlink(missing_ok=True)
    return {"schema": PACK_SCHEMA, "bundle": str(bundle.root), "target": tgt.name if tgt else None, "out": str(out),
            "files": [MANIFEST, *files], "bytes": out.stat().st_size, "content_bytes": total, "left_out": left_out}


def _anonymous(info: tarfile.TarInfo) -> tarfile.TarInfo:
    info.uid = info.gid = 0
    info.uname = info.gname = ""
    return info


def safe_extract(archive: str | Path | tarfile.TarFile, dest: str | Path) -> list[Path]:
    """Unpack ``archive`` into ``dest`` after checking every member: no absolute paths, no
    ``..``, no link pointing outside ``dest``, no devices or FIFOs. One bad member refuses the
    whole archive before anything is written. Returns the extracted paths."""
    if not isinstance(archive, tarfile.TarFile):
        try:
            with tarfile.open(archive, "r:*") as tar:
                return safe_extract(tar, dest)
        except tarfile.TarError as exc:
            first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__  # tarfile lists every codec tried
            raise BundleError(f"{archive} is not a readable tar archive ({first.rstrip(' (:')})", hint="make one with `edgekit pack`") from None
    dest = Path(dest).resolve()
    members = archive.getmembers()
    for member in members:
        problem = _member_problem(member, dest)
        if problem:
            raise BundleError(
                f"archive member {member.name!r} {problem}; refusing to unpack the archive into {dest}",
                hint="only unpack archives made by `edgekit pack` from a source you trust",
            )
    dest.mkdir(parents=True, exist_ok=True)
    if hasattr(tarfile, "data_filter"):  # Python >= 3.11.4 / 3.12: the stdlib re-checks too
        archive.extractall(dest, members=members, filter="data")
    else:
        archive.extractall(dest, members=members)
    return [dest / m.name for m in members]


def _member_problem(member: tarfile.TarInfo, dest: Path) -> str | None:
    name = member.name
    if name.startswith(("/", "\\")) or re.match(r"^[A-Za-z]:", name):
        return "has an absolute path"
    if ".." in PurePosixPath(name.replace("\\", "/")).parts:
        return "contains '..'"
    where = (dest / name).resolve()
    if where != dest and dest not in where.parents:
        return "would be written outside the destination"
    if member.issym() or member.islnk():
        link = member.linkname
        if link.startswith(("/", "\\")):
            return f"is a link to the absolute path {link!r}"
        base = dest if member.islnk() else (dest / name).parent
        resolved = (base / link).resolve()
        if resolved != dest and dest not in resolved.parents:
            return f"is a link to {link!r}, outside the destination"
        return None
    if member.isdev() or member.isfifo():
        return "is a device or FIFO"
    if not (member.isfile() or member.isdir()):
        return "is not a regular file or directory"
    return None


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
