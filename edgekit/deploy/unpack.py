"""`edgekit unpack`: a tarball made by `edgekit pack` extracted after every member is checked by its
name and type (``safe_extract``: nothing lands outside the destination, no links, bounded size),
then verified as a bundle in a staging folder and swapped in by rename (``unpack_bundle``)."""

from __future__ import annotations

import os
import re
import shutil
import tarfile
import tempfile
import zlib
from pathlib import Path, PurePosixPath
from typing import Any

from edgekit._lock import bundle_lock
from edgekit._userhooks import forget_bundle
from edgekit.bundle import MANIFEST, STAGING_PREFIX, Bundle, sha256_file
from edgekit.errors import BundleError

# Bounds of what `unpack` writes (a tarball of a few hundred bytes can claim terabytes): bundles
# are a manifest, a few models and engines, so these are generous; the free space of the
# destination bounds the bytes too.
MAX_MEMBERS = 10_000
MAX_UNPACK_BYTES = 64 << 30


def _open_error(archive: Any, exc: BaseException) -> BundleError:
    text = str(exc).splitlines()[0] if str(exc) else type(exc).__name__  # tarfile lists every codec tried
    return BundleError(
        f"{archive} is not a readable tar archive ({text.rstrip(' (:')}); it may be truncated or corrupt",
        hint="make one with `edgekit pack`, and copy it again",
    )


def _read_members(tar: tarfile.TarFile, archive: Any) -> list[tarfile.TarInfo]:
    """Every member header, read to the end of the archive (a truncated or corrupt stream fails
    here, before anything is written), at most MAX_MEMBERS of them."""
    members = []
    try:
        for member in tar:
            members.append(member)
            if len(members) > MAX_MEMBERS:
                raise BundleError(
                    f"{archive} has more than {MAX_MEMBERS} members; a bundle has a handful",
                    hint="only unpack archives made by `edgekit pack`",
                )
    except (tarfile.TarError, EOFError, zlib.error, OSError) as exc:
        raise _open_error(archive, exc) from None
    # tarfile stops at the end-of-archive blocks, or at the end of the data when they are cut
    # off: a gzip stream missing only its tail still lists every member. Read the compressed
    # stream to its end marker so such an archive is refused too.
    stream = getattr(tar, "fileobj", None)
    if stream is not None and hasattr(stream, "read") and stream is not getattr(tar, "_stream_raw", None):
        try:
            while stream.read(1 << 20):
                pass
        except (EOFError, zlib.error, OSError, tarfile.TarError) as exc:
            raise _open_error(archive, exc) from None
    return members


def safe_extract(
    archive: str | Path | tarfile.TarFile,
    dest: str | Path,
    *,
    max_bytes: int = MAX_UNPACK_BYTES,
    shown: str | Path | None = None,
) -> list[Path]:
    """Unpack ``archive`` into ``dest`` after checking every member by its name and type alone:
    no absolute paths, no ``..``, no links of any kind, no devices, FIFOs or sparse files, at
    most MAX_MEMBERS members and ``max_bytes`` bytes. One bad member refuses the whole archive
    before anything is written. Files are written by edgekit itself (never ``extractall``), so
    nothing on disk can redirect them. ``shown``: the folder errors name (default ``dest``).
    Returns the extracted paths."""
    if not isinstance(archive, tarfile.TarFile):
        if not Path(archive).is_file():
            raise BundleError(f"archive {archive} does not exist or is not a file", hint="make one with `edgekit pack`")
        try:
            tar = tarfile.open(archive, "r:*")
        except (tarfile.TarError, EOFError, zlib.error, OSError) as exc:
            raise _open_error(archive, exc) from None
        with tar:
            return safe_extract(tar, dest, max_bytes=max_bytes, shown=shown)
    name = archive.name or "archive"
    members = _read_members(archive, name)
    for member in members:
        problem = _member_problem(member)
        if problem:
            raise BundleError(
                f"archive member {member.name!r} {problem}; refusing to unpack the archive into {shown or dest}",
                hint="only unpack archives made by `edgekit pack` from a source you trust",
            )
    total = sum(m.size for m in members if m.isfile())
    dest = Path(dest)
    probe = next((p for p in (dest, *dest.parents) if p.exists()), Path("."))
    limit = min(max_bytes, shutil.disk_usage(probe).free)
    if total > limit:
        raise BundleError(
            f"{name} would unpack to {total} bytes, more than {'the free space' if limit < max_bytes else 'the limit'} "
            f"({limit} bytes) at {shown or dest}",
            hint="only unpack archives made by `edgekit pack`; free some space",
        )
    try:
        dest.mkdir(parents=True, exist_ok=True)
        out = []
        for member in members:
            path = dest.joinpath(*PurePosixPath(member.name).parts)
            if member.isdir():
                path.mkdir(parents=True, exist_ok=True)
            else:
                path.parent.mkdir(parents=True, exist_ok=True)
                src = archive.extractfile(member)
                with src, open(path, "xb") as fh:  # "x": never through an existing file or link
                    shutil.copyfileobj(src, fh, 1 << 20)
                    if fh.tell() != member.size:
                        raise BundleError(f"{name}: member {member.name!r} is truncated", hint="copy the archive again")
            out.append(path)
    except (tarfile.TarError, EOFError, zlib.error) as exc:
        raise _open_error(name, exc) from None
    except FileExistsError as exc:
        raise BundleError(
            f"{name}: member {exc.filename} appears twice or already exists in {shown or dest}",
            hint="unpack into a new folder",
        ) from None
    except OSError as exc:
        raise BundleError(
            f"cannot unpack {name} into {shown or dest} ({exc.strerror or exc})",
            hint="free some space or choose a writable -o folder",
        ) from None
    return out


def _member_problem(member: tarfile.TarInfo) -> str | None:
    name = member.name
    if name.startswith(("/", "\\")) or re.match(r"^[A-Za-z]:", name):
        return "has an absolute path"
    parts = PurePosixPath(name.replace("\\", "/")).parts
    if ".." in parts:
        return "contains '..'"
    if not parts or any(p in ("", ".") for p in parts) or "\x00" in name:
        return "has an empty or '.' path"
    if member.issym() or member.islnk():
        return f"is a link (to {member.linkname!r}); bundles hold no links"
    if member.isdev() or member.isfifo():
        return "is a device or FIFO"
    if member.issparse():
        return "is a sparse file"
    if not (member.isfile() or member.isdir()):
        return "is not a regular file or directory"
    return None


def unpack_bundle(archive: str | Path, out: str | Path, *, max_bytes: int = MAX_UNPACK_BYTES) -> dict[str, Any]:
    """Unpack a tarball made by `edgekit pack` into ``out/<bundle>``: extracted into a fresh
    staging folder (``safe_extract``), every hash verified there (``Bundle.load``), then swapped
    in by rename, so a bad archive never touches a bundle already at ``out/<bundle>``. Returns
    the ``edgekit unpack --json`` document."""
    out = Path(out)
    try:
        out.mkdir(parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(prefix=f"{STAGING_PREFIX}unpack-", dir=out))
    except OSError as exc:
        raise BundleError(
            f"cannot unpack into {out} ({exc.strerror or exc})", hint="choose a writable -o folder"
        ) from None
    try:
        paths = safe_extract(archive, staging, max_bytes=max_bytes, shown=out)
        tops = {p.relative_to(staging).parts[0] for p in paths}
        if len(tops) != 1 or not (staging / next(iter(tops)) / MANIFEST).is_file():
            raise BundleError(
                f"{archive} is not a bundle archive: it must hold one folder with {MANIFEST}",
                hint="make one with `edgekit pack`",
            )
        top = next(iter(tops))
        try:
            top.encode("utf-8")
        except UnicodeEncodeError:
            raise BundleError(
                f"{archive} holds the folder {os.fsencode(top)!r}, a name that is not valid UTF-8;"
                " edgekit reads bundles at UTF-8 paths only",
                hint="pack it again from a folder with a UTF-8 name",
            ) from None
        try:
            bundle = Bundle.load(staging / top)  # every artifact's sha256, before anything is replaced
        except BundleError as exc:
            raise BundleError(
                f"{archive}: the bundle inside does not verify: {exc.message}",
                hint="copy the archive again, or pack it anew with `edgekit pack`",
            ) from None
        _refuse_unlisted(archive, staging / top, paths, bundle.named_files())
        _verify_engines(archive, bundle)
        dest = out / top
        if dest.exists() or dest.is_symlink():
            if dest.is_symlink() or not (dest / MANIFEST).is_file():
                raise BundleError(
                    f"{dest} exists and is not a bundle; unpack will not replace it", hint="choose another -o folder"
                )
            # The bundle's writer lock: never swap a bundle under a running quantize or build.
            with bundle_lock(dest, "unpack"):
                old = staging / ".previous"
                os.rename(dest, old)  # each rename is atomic; the old bundle goes only after the new one is in
                try:
                    os.rename(staging / top, dest)
                except OSError:
                    os.rename(old, dest)
                    raise
        else:
            os.rename(staging / top, dest)
        # Nothing after the swap may fail: forgetting the export record only ever suppresses
        # its own errors (the bundle is in place and verified).
        forget_bundle(dest)  # not this user's export: the code its manifest names needs --trust-code
    except OSError as exc:
        raise BundleError(
            f"cannot unpack into {out} ({exc.strerror or exc})", hint="free some space or choose a writable -o folder"
        ) from None
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    files = [str(dest / PurePosixPath(p.relative_to(staging / top)).as_posix()) for p in paths if p != staging / top]
    return {"schema": "edgekit.unpack/1", "archive": str(archive), "out": str(out), "bundle": str(dest), "files": files}


def _verify_engines(archive: Any, bundle: Bundle) -> None:
    """Every engine file the archive holds matches its recorded size and sha256 (``Bundle.load``
    checks the artifacts; an engine's weights file changed in transit is refused here, not only
    when a target picks the engine)."""
    for key, entry in bundle.engines.items():
        for f in entry.recorded_files:  # (pack leaves another target's engines out of the manifest too)
            path = bundle.root / f.path
            if (
                not path.is_file()
                or (f.bytes is not None and path.stat().st_size != f.bytes)
                or (f.sha256 is not None and sha256_file(path) != f.sha256)
            ):
                raise BundleError(
                    f"{archive}: engine {key}'s file {f.path} is missing or does not match its recorded sha256",
                    hint="copy the archive again, or pack it anew with `edgekit pack`",
                )


def _refuse_unlisted(archive: Any, root: Path, paths: list[Path], named: set[str]) -> None:
    """Every file in the archive is one the manifest names (a payload.py riding along with a
    bundle is refused: nothing unhashed lands beside it)."""
    listed = named | {MANIFEST}
    for path in paths:
        rel = path.relative_to(root).as_posix() if path != root and root in path.parents else None
        if rel is None or path.is_dir():
            continue
        if rel not in listed:
            raise BundleError(
                f"{archive} holds {rel!r}, a file the bundle's manifest does not list; refusing to unpack it",
                hint="only unpack archives made by `edgekit pack` from a source you trust",
            )
