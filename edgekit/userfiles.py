"""Opening a file a user names (``--thresholds``, ``--baseline``, ``--overrides``, ``--cond FILE``,
``--cond-data``, a target ``.toml``, ssh keys, a bundle's manifest): a regular file of bounded
size, or one line naming the option, the path and why, before anything is read.

A FIFO would block the command until a writer appears; a device (``/dev/zero``,
``/dev/urandom``) or a file that keeps growing would be read until the out-of-memory killer
comes. Both are refused up front: the path is checked with ``stat`` (never opened when it is not
a regular file), then opened without blocking and checked again on the open descriptor (the path
cannot be swapped in between), and reading stops one byte past the cap.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import BinaryIO

from edgekit.errors import EdgekitError, UsageError
from edgekit.limits import human_bytes

# A document a person writes (thresholds, baselines, quantize overrides, target files): far below this.
MAX_DOCUMENT_BYTES = 16 << 20
# A bundle's manifest (tens of KiB for the demo models; every artifact and engine listed).
MAX_MANIFEST_BYTES = 64 << 20


def check_utf8_path(
    path: str | os.PathLike, what: str, *, error: type[EdgekitError] = UsageError, hint: str = ""
) -> None:
    """``path`` (as given, absolute, and where its links lead) is valid UTF-8: onnx, ONNX Runtime
    and OpenVINO take no other path, and said here it is one line naming ``what`` (``-o``, "bundle
    path"), not a TypeError from inside their bindings after minutes of work."""
    for form in (os.fspath(path), os.path.abspath(path), os.path.realpath(path)):
        try:
            form.encode("utf-8")
        except UnicodeEncodeError:
            raise error(
                f"{what} {os.fsencode(form)!r} is not valid UTF-8; edgekit takes UTF-8 paths only",
                hint=hint or "rename it to a UTF-8 name",
            ) from None


def _kind(mode: int) -> str:
    if stat.S_ISDIR(mode):
        return "a directory"
    if stat.S_ISFIFO(mode):
        return "a FIFO (named pipe)"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    if stat.S_ISSOCK(mode):
        return "a socket"
    return "not a regular file"


def _shown(path: Path, flag: str) -> str:
    """How messages name the file: "--baseline b.json"; a flag ending in "=" is glued to it
    ("--cond class_id=c.npy")."""
    return f"{flag}{path}" if flag.endswith("=") else f"{flag} {path}"


def check_user_file(
    path: str | os.PathLike, flag: str, *, max_bytes: int | None = None, error: type[EdgekitError] = UsageError
) -> Path:
    """``path`` exists and is a regular file (after links) of at most ``max_bytes``: for a file
    another program opens (``ssh -i KEY``) and as the first check of ``open_user_file``."""
    path = Path(path)
    try:
        st = os.stat(path)
    except FileNotFoundError:
        raise error(f"{_shown(path, flag)} does not exist", hint="check the path") from None
    except OSError as exc:
        raise error(f"{_shown(path, flag)} cannot be read ({exc.strerror or exc})") from None
    _check_stat(st, path, flag, max_bytes, error)
    return path


def _check_stat(st: os.stat_result, path: Path, flag: str, max_bytes: int | None, error: type[EdgekitError]) -> None:
    if not stat.S_ISREG(st.st_mode):
        raise error(
            f"{_shown(path, flag)} is {_kind(st.st_mode)}, not a regular file; edgekit reads only regular files",
            hint="copy a stream to a regular file first",
        )
    if max_bytes is not None and st.st_size > max_bytes:
        raise error(
            (
                f"{_shown(path, flag)} is {human_bytes(st.st_size)}, more "
                f"than edgekit reads for it ({human_bytes(max_bytes)})"
            ),
            hint="check that it is the file you meant",
        )


def open_user_file(
    path: str | os.PathLike, flag: str, *, max_bytes: int | None = None, error: type[EdgekitError] = UsageError
) -> BinaryIO:
    """``path`` opened for binary reading once it is known to be a regular file of at most
    ``max_bytes`` (None: any size; the caller bounds what it reads, e.g. by a .npy header)."""
    path = check_user_file(path, flag, max_bytes=max_bytes, error=error)
    flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOCTTY", 0) | getattr(os, "O_CLOEXEC", 0)
    try:
        fd = os.open(path, flags)  # O_NONBLOCK: a FIFO swapped in after the stat does not block the open
    except OSError as exc:
        raise error(f"{_shown(path, flag)} cannot be read ({exc.strerror or exc})") from None
    try:
        _check_stat(os.fstat(fd), path, flag, max_bytes, error)
        if hasattr(os, "set_blocking"):
            os.set_blocking(fd, True)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def read_user_bytes(
    path: str | os.PathLike, flag: str, *, max_bytes: int = MAX_DOCUMENT_BYTES, error: type[EdgekitError] = UsageError
) -> bytes:
    """The bytes of ``path`` (``open_user_file``), read up to the cap: a file that grows while it
    is read (a /proc file reports 0 bytes) stops at it, as one error."""
    with open_user_file(path, flag, max_bytes=max_bytes, error=error) as fh:
        try:
            data = fh.read(max_bytes + 1)
        except OSError as exc:
            raise error(f"{_shown(Path(path), flag)} cannot be read ({exc.strerror or exc})") from None
    if len(data) > max_bytes:
        raise error(
            f"{_shown(Path(path), flag)} holds more than edgekit reads for it ({human_bytes(max_bytes)})",
            hint="check that it is the file you meant",
        )
    return data


def read_user_text(
    path: str | os.PathLike, flag: str, *, max_bytes: int = MAX_DOCUMENT_BYTES, error: type[EdgekitError] = UsageError
) -> str:
    """``read_user_bytes`` decoded as UTF-8, or one error saying it is not UTF-8 text."""
    data = read_user_bytes(path, flag, max_bytes=max_bytes, error=error)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise error(
            f"{_shown(Path(path), flag)} is not UTF-8 text (byte {exc.start}: {data[exc.start : exc.start + 1]!r})",
            hint="save it as UTF-8",
        ) from None
