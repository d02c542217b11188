"""One writer per bundle: an exclusive ``flock`` on ``<bundle>/.edgekit.lock`` held for a whole
stage, and temp directories whose owner is known to be gone.

A second stage on the same bundle fails at once with exit 1 naming the holder, or waits behind
it when the CLI was given ``--wait`` (``LOCK_WAIT``). The lock is re-entrant within a process
(``select_engine`` → ``build_bundle`` → ``Bundle.save`` take it in turn). Because every writer
holds it, anything named ``.staging-*`` found by the holder is litter of a killed stage and is
swept on acquisition. A stage that fails (an error, Ctrl-C) takes with it every file it moved
into the bundle that the manifest on disk does not list (``sweep_unlisted``): what it committed
stays, nothing unlisted is left behind.
"""

from __future__ import annotations

import contextvars
import errno
import functools
import inspect
import json
import os
import shutil
import stat
import sys
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from edgekit.errors import BundleError
from edgekit.manifest import MANIFEST, STAGING_PREFIX, live_paths, prune_empty
from edgekit.userfiles import check_utf8_path

try:  # POSIX; elsewhere bundles are written without a lock (one process at a time is on the user)
    import fcntl
except ImportError:  # pragma: no cover - Windows
    fcntl = None  # type: ignore[assignment]

LOCK_NAME = ".edgekit.lock"
# Set by the CLI's --wait: queue behind another writer instead of failing.
LOCK_WAIT: contextvars.ContextVar[bool] = contextvars.ContextVar("edgekit_lock_wait", default=False)
_held: dict[str, list[Any]] = {}  # resolved bundle root -> [fd, depth]


def _holder(fd: int) -> str:
    try:
        doc = json.loads(os.pread(fd, 4096, 0).decode() or "{}")
        return f"`edgekit {doc.get('stage', '?')}` (pid {doc.get('pid', '?')})"
    except (OSError, ValueError):
        return "another edgekit process"


def unwritable(root: Path, exc: OSError) -> BundleError:
    return BundleError(
        f"bundle {root} is not writable ({exc.strerror or exc})",
        hint="fix its permissions or free space, or copy it somewhere writable",
    )


@contextmanager
def bundle_lock(
    root: Path | str,
    stage: str,
    *,
    create: bool = False,
    wait: bool | None = None,
    notify: Callable[[str], None] | None = None,
) -> Iterator[None]:
    """Hold the bundle's writer lock for the ``with`` body. ``create``: make the directory first
    (export); otherwise a missing bundle is left to ``Bundle.load`` to report."""
    root = Path(root)
    check_utf8_path(root, "bundle path", error=BundleError, hint="rename the folder to a UTF-8 name")
    created = create and not root.exists()
    if create:
        try:
            root.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise unwritable(root, exc) from None
    key = str(root.resolve())
    if key in _held:
        _held[key][1] += 1
        try:
            yield
        finally:
            _held[key][1] -= 1
        return
    if fcntl is None or not root.is_dir():
        yield
        return
    if not os.access(root, os.W_OK):  # read-only file system or folder: found before any work
        raise unwritable(root, OSError(errno.EROFS, "the folder is not writable"))
    fd = _open_lock_file(root)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            who = _holder(fd)
            if not (LOCK_WAIT.get() if wait is None else wait):
                raise BundleError(
                    f"bundle {root} is being written by {who}; one stage writes a bundle at a time",
                    hint="wait for it to finish, or pass --wait to queue behind it",
                ) from None
            (notify or (lambda m: print(m, file=sys.stderr, flush=True)))(
                f"waiting for {who} to finish writing {root} …"
            )
            fcntl.flock(fd, fcntl.LOCK_EX)
        try:
            os.ftruncate(fd, 0)
            os.pwrite(fd, json.dumps({"pid": os.getpid(), "stage": stage}).encode(), 0)
        except OSError as exc:
            raise unwritable(root, exc) from None
        sweep_staging(root)
        _held[key] = [fd, 1]
        try:
            yield
        finally:
            del _held[key]
            if created and not (root / "edgekit.json").exists():  # a first export that failed: leave no folder
                sweep_staging(root)
                (root / LOCK_NAME).unlink(missing_ok=True)
                try:
                    root.rmdir()
                except OSError:
                    pass
    finally:
        os.close(fd)  # releases the flock


def _open_lock_file(root: Path) -> int:
    """The lock file's descriptor, opened without following a link: a bundle that arrives (git,
    rsync, zip) with ``.edgekit.lock`` pointing at ``~/.bashrc`` must never truncate or create
    that file. A link, a hard link, a FIFO or a device there is refused with one line."""
    path = root / LOCK_NAME
    flags = (
        os.O_RDWR
        | os.O_CREAT
        | getattr(os, "O_NOFOLLOW", 0)
        | getattr(os, "O_NONBLOCK", 0)
        | getattr(os, "O_CLOEXEC", 0)
    )
    try:
        fd = os.open(path, flags, 0o644)
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.EMLINK) or path.is_symlink():
            raise _not_a_lock(path, "is a symbolic link") from None
        if exc.errno in (errno.ENXIO, errno.EISDIR):
            raise _not_a_lock(path, "is not a regular file") from None
        raise unwritable(root, exc) from None  # full disk, no permission
    info = os.fstat(fd)
    problem = (
        "is not a regular file"
        if not stat.S_ISREG(info.st_mode)
        else "is a hard link to another file"
        if info.st_nlink > 1
        else None
    )
    if problem:
        os.close(fd)
        raise _not_a_lock(path, problem)
    return fd


def _not_a_lock(path: Path, problem: str) -> BundleError:
    return BundleError(
        f"{path} {problem}; edgekit writes only a plain lock file there and will not follow it",
        hint=f"inspect and remove it (rm {path}) if the bundle came from elsewhere, then re-run",
    )


def sweep_staging(root: Path) -> list[str]:
    """Remove ``.staging-*`` files and directories in ``root`` (only safe while holding its lock)."""
    removed = []
    for path in root.glob(f"{STAGING_PREFIX}*"):
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path, ignore_errors=True)
        else:
            path.unlink(missing_ok=True)
        removed.append(path.name)
    return removed


def writes_bundle(stage: str, arg: str = "path", *, create: bool = False) -> Callable:
    """Decorate a stage function so it holds the lock of the bundle given as parameter ``arg``
    (a path or a ``Bundle``) for its whole run."""

    def decorate(fn: Callable) -> Callable:
        sig = inspect.signature(fn)

        @functools.wraps(fn)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            bound = sig.bind(*args, **kwargs)
            bound.apply_defaults()
            target = bound.arguments[arg]
            # A path, or a Bundle (its .root); never a Path's own .root, which is "/"
            root = target if isinstance(target, (str, os.PathLike)) else target.root
            with bundle_lock(Path(root), stage, create=create):
                before = bundle_files(Path(root))
                try:
                    return fn(*args, **kwargs)
                except BaseException:
                    sweep_unlisted(Path(root), before)
                    raise

        return wrapper

    return decorate


def bundle_files(root: Path) -> frozenset[str]:
    """Every file under ``root`` (bundle-relative, links not followed)."""
    out = set()
    for folder, dirs, files in os.walk(root):
        rel = Path(folder).relative_to(root)
        out.update((rel / f).as_posix() for f in files)
        dirs[:] = [d for d in dirs if not os.path.islink(os.path.join(folder, d))]
    return frozenset(out)


# Records a failed stage keeps: AI Hub's job book (runtimes/aihub/jobs.py) names jobs that go on
# running on the service after Ctrl-C or an error, and `--resume` collects them from it.
JOURNALS = frozenset({"aihub/jobs.json", "aihub/.jobs.lock"})


def sweep_unlisted(root: Path, before: frozenset[str]) -> list[str]:
    """After a failed stage (lock held): remove the files it added under ``root`` that the
    manifest on disk does not list (an engine installed before the save was refused, an artifact
    moved in before an error), and the folders that leaves empty. Files that were there before
    the stage are never touched. Never raises: the stage's own error is what the user sees."""
    removed: list[str] = []
    try:
        doc = json.loads((root / MANIFEST).read_text()) if (root / MANIFEST).is_file() else {}
        listed = live_paths(doc) if isinstance(doc, dict) else set()
    except Exception:  # noqa: BLE001 - an unreadable manifest lists nothing this stage added
        listed = set()
    try:
        base = root.resolve()
        for rel in sorted(bundle_files(root) - before - listed - {MANIFEST, LOCK_NAME} - JOURNALS):
            path = root / rel
            path.unlink(missing_ok=True)
            removed.append(rel)
            prune_empty(path.parent, base)
    except OSError:
        pass
    return removed


@contextmanager
def owned_tempdir(prefix: str) -> Iterator[Path]:
    """``tempfile.TemporaryDirectory`` whose owner holds a lock inside it, so a later run can
    tell (``sweep_tempdirs``) that a leftover one belongs to a killed process. The lock file is
    locked under another name and then renamed to ``LOCK_NAME``: a sweep running at that moment
    in another process never finds it unlocked (with the file created under its name and locked
    after, a sweep between the two took a live run's directory: CI saw ``debug --fix`` fail on a
    FileNotFoundError with three test processes at once)."""
    sweep_tempdirs(prefix)
    path = Path(tempfile.mkdtemp(prefix=prefix))
    fd = os.open(path / (LOCK_NAME + ".new"), os.O_RDWR | os.O_CREAT, 0o600)
    try:
        if fcntl is not None:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        os.replace(path / (LOCK_NAME + ".new"), path / LOCK_NAME)  # the lock follows the file
        yield path
    finally:
        os.close(fd)
        shutil.rmtree(path, ignore_errors=True)


def sweep_tempdirs(prefix: str) -> list[str]:
    """Remove ``$TMPDIR/<prefix>*`` directories whose lock nobody holds (their process died)."""
    if fcntl is None:
        return []
    removed = []
    for path in Path(tempfile.gettempdir()).glob(f"{prefix}*"):
        lock = path / LOCK_NAME
        if not path.is_dir() or path.is_symlink() or not lock.is_file() or path.stat().st_uid != os.getuid():
            continue
        try:
            fd = os.open(lock, os.O_RDWR | getattr(os, "O_NOFOLLOW", 0))
        except OSError:
            continue
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            continue  # alive
        finally:
            os.close(fd)
        shutil.rmtree(path, ignore_errors=True)
        removed.append(path.name)
    return removed
