"""Ctrl-C and SIGTERM for every command: both unwind the stage as a KeyboardInterrupt (every
staging file and owned temp folder goes, nothing half-written is recorded), and what was left
behind is said in one line."""

from __future__ import annotations

from collections.abc import Callable


def _interrupted(committed: list[str], what: str = "interrupted") -> str:
    """What Ctrl-C (or SIGTERM) left behind: nothing, or the bundles whose manifest was already committed."""
    if not committed:
        return f"{what}: nothing was recorded for the unfinished stage"
    where = ", ".join(dict.fromkeys(committed))
    return (
        f"{what} after the manifest of {where} was written: what it records "
        "is complete and verified; the rest of the command did not run"
    )


class Terminated(KeyboardInterrupt):
    """SIGTERM (`kill`, a CI job's timeout, a container stopping): unwound like Ctrl-C, so every
    staging file and owned temp folder (``edgekit-quantize-*``) goes and nothing half-written is
    recorded; the command then exits 143 (128 + SIGTERM)."""


def _watch_sigint() -> tuple[Callable[[], bool], Callable[[], None]]:
    """Remember whether SIGINT or SIGTERM arrived (keeping Python's KeyboardInterrupt behaviour:
    SIGTERM raises ``Terminated``, a KeyboardInterrupt); the second callable puts the previous
    handlers back once the command is over."""
    import os
    import signal
    import threading

    seen = [False]
    if threading.current_thread() is not threading.main_thread():
        return (lambda: seen[0]), (lambda: None)

    def handler(signum, frame):
        seen[0] = True
        if _importing(frame):
            # Raised inside an import, the exception can cross a C++ extension's module init
            # (torch's pybind11: "terminate called after throwing an instance of
            # 'pybind11::error_already_set'", an abort instead of exit 143): sent again once the
            # import is over.
            threading.Timer(0.05, os.kill, (os.getpid(), signum)).start()
            return
        raise Terminated if signum == signal.SIGTERM else KeyboardInterrupt

    previous = {}
    try:
        for sig in (signal.SIGINT, signal.SIGTERM):
            previous[sig] = signal.signal(sig, handler)
    except ValueError:  # not settable here (embedded interpreter)
        return (lambda: seen[0]), (lambda: None)

    def restore() -> None:
        for sig, old in previous.items():
            signal.signal(sig, old)

    return (lambda: seen[0]), restore


def _importing(frame) -> bool:
    """Whether ``frame`` runs inside an import (importlib's frames are on its stack)."""
    while frame is not None:
        if frame.f_code.co_filename.startswith("<frozen importlib"):
            return True
        frame = frame.f_back
    return False
