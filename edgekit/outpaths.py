"""Paths a command will write, checked before the work: a folder that is a file, a file under a
file, a name longer than the file system takes or not valid UTF-8, a device (``/dev/null``) or a
folder where a file goes, a folder nobody may write (tried: an entry is made there and removed,
so a read-only mount or ``/proc`` is found too): one line naming the option and the path, before
minutes of work are thrown away. ``write_text_into`` then writes such a report whole or not at all."""

from __future__ import annotations

import os
import stat
import tempfile
from pathlib import Path

from edgekit.errors import UsageError
from edgekit.userfiles import check_utf8_path


def check_dir(path: Path | str, flag: str) -> Path:
    """``path`` can be (or already is) a folder this user may write into."""
    path = Path(path)
    _check_folder(path, flag, path)
    return path


def check_file(path: Path | str, flag: str, suffix: str | None = None) -> Path:
    """``path`` can be written as a regular file (replaced if one is there): not a folder, not a
    device or FIFO, its folder writable; ``suffix`` (".npz") when the format needs one."""
    path = Path(path)
    if suffix is not None and path.suffix != suffix:
        raise UsageError(f"{flag} {path} must end in {suffix}")
    _check_names(path, flag)
    mode = _mode(path)
    if mode is not None and stat.S_ISDIR(mode):
        raise UsageError(
            f"{flag} {path} is a folder; it names the file to write",
            hint=f"e.g. {flag} {path / ('out' + (suffix or ''))}",
        )
    if mode is not None and not stat.S_ISREG(mode):
        raise UsageError(
            f"{flag} {path} is not a regular file (a device, FIFO or link); edgekit will not replace it",
            hint=f"choose another {flag} path",
        )
    _check_folder(path.parent, flag, path)
    return path


def _mode(path: Path) -> int | None:
    try:
        return os.lstat(path).st_mode
    except OSError:
        return None


def _check_folder(folder: Path, flag: str, shown: Path) -> None:
    """``folder`` exists as a writable folder, or can be made below its nearest existing ancestor."""
    _check_names(folder, flag)
    base = next((p for p in (folder, *folder.parents) if _mode(p) is not None), Path("."))
    mode = os.stat(base).st_mode if _mode(base) is not None and Path(base).exists() else _mode(base)
    if mode is None or not stat.S_ISDIR(mode):
        what = "is a file" if mode is not None and stat.S_ISREG(mode) else "is not a folder"
        where = str(base) if base == shown else f"{base}, on the way to {shown},"
        raise UsageError(f"{flag} {shown}: {where} {what}", hint=f"choose another {flag} path")
    if not os.access(base, os.W_OK | os.X_OK):
        raise UsageError(f"{flag} {shown}: {base} is not writable", hint=f"choose a {flag} path you may write")
    try:  # what the permission bits do not say (a read-only mount, /proc, a full inode table)
        os.rmdir(tempfile.mkdtemp(prefix=".edgekit-probe-", dir=base))
    except OSError as exc:
        raise UsageError(
            f"{flag} {shown}: nothing can be written in {base} ({exc.strerror or exc})",
            hint=f"choose a {flag} path you may write",
        ) from None


def _check_names(path: Path, flag: str) -> None:
    """Every part of ``path`` fits the file system's limit on one name."""
    try:
        limit = os.pathconf(".", "PC_NAME_MAX")
    except (OSError, ValueError, AttributeError):
        limit = 255
    check_utf8_path(path, flag, hint="choose a UTF-8 name")
    for part in path.parts:
        if len(os.fsencode(part)) > limit:
            raise UsageError(
                (
                    f"{flag}: the name {part[:40]!r}… is {len(os.fsencode(part))} "
                    f"bytes, more than the file system takes ({limit})"
                ),
                hint="choose a shorter name",
            )


def write_text_into(folder: Path | str, name: str, text: str) -> Path:
    """``folder/name`` with ``text``, written under a staging name and renamed: a reader never
    sees half a report, and an interrupted write leaves only the staging file the next one sweeps."""
    out = Path(folder)
    out.mkdir(parents=True, exist_ok=True)
    path, tmp = out / name, out / f".staging-{name}"
    try:
        tmp.write_text(text, encoding="utf-8")
        tmp.replace(path)
    finally:
        tmp.unlink(missing_ok=True)
    return path
