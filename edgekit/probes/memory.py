"""Resident memory of this process and file sizes of artifacts.

Linux gives the current (``VmRSS``) and peak (``VmHWM``) resident set in ``/proc/self/status``;
elsewhere ``resource.getrusage`` gives the peak only. The peak is since process start (or since
the last ``clear_refs`` reset), so ``RssTracker`` resets it when the kernel allows and says when
it could not.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import sys
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

PROC_STATUS = "/proc/self/status"
# Writing "5" to clear_refs resets VmHWM to the current RSS (Linux >= 4.0).
PROC_CLEAR_REFS = "/proc/self/clear_refs"


@dataclass(frozen=True)
class MemorySnapshot:
    rss_bytes: int | None  # None where only the peak is known (getrusage fallback)
    peak_rss_bytes: int | None
    source: str  # "/proc/self/status" or "getrusage"

    def to_json(self) -> dict[str, Any]:
        return {"rss_bytes": self.rss_bytes, "peak_rss_bytes": self.peak_rss_bytes, "source": self.source}


def parse_proc_status(text: str) -> tuple[int | None, int | None]:
    """``(VmRSS, VmHWM)`` in bytes from the text of ``/proc/<pid>/status`` (values are in kB)."""
    found: dict[str, int] = {}
    for line in text.splitlines():
        key, _, rest = line.partition(":")
        if key in ("VmRSS", "VmHWM"):
            parts = rest.split()
            if parts and parts[0].isdigit():
                scale = 1024 if len(parts) < 2 or parts[1].lower() == "kb" else 1
                found[key] = int(parts[0]) * scale
    return found.get("VmRSS"), found.get("VmHWM")


def _getrusage_peak() -> int | None:
    try:
        import resource
    except ImportError:  # Windows
        return None
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    # ru_maxrss is kB on Linux, bytes on macOS.
    return int(peak) if sys.platform == "darwin" else int(peak) * 1024


def memory_snapshot(proc_status: str | Path = PROC_STATUS) -> MemorySnapshot:
    """Current and peak RSS of this process."""
    try:
        rss, peak = parse_proc_status(Path(proc_status).read_text())
    except OSError:
        rss, peak = None, None
    if rss is not None:
        return MemorySnapshot(rss, peak, str(proc_status))
    return MemorySnapshot(None, _getrusage_peak(), "getrusage")


def _libc_trim() -> Any:
    """glibc's ``malloc_trim``, or None where the C library has none (musl, macOS)."""
    name = ctypes.util.find_library("c")
    try:
        libc = ctypes.CDLL(name) if name else None
    except OSError:
        return None
    return getattr(libc, "malloc_trim", None)


_TRIM = _libc_trim() if sys.platform.startswith("linux") else None


def give_back_freed() -> bool:
    """Return the memory this process has freed to the system (glibc ``malloc_trim(0)``: every
    free page of every heap). True where it did so; False where there is no such call."""
    if _TRIM is None:
        return False
    _TRIM(0)
    return True


def reset_peak_rss(clear_refs: str | Path = PROC_CLEAR_REFS) -> bool:
    """Reset the kernel's peak RSS mark to the current RSS; False where that is not possible."""
    try:
        Path(clear_refs).write_text("5")
        return True
    except OSError:
        return False


@dataclass(frozen=True)
class RssReport:
    """RSS at named points of a run and the growth between them."""

    points: tuple[tuple[str, MemorySnapshot], ...]
    peak_reset: bool  # False: the peak includes everything since process start (model load, export)

    def rss(self, label: str) -> int | None:
        for name, snap in self.points:
            if name == label:
                return snap.rss_bytes
        raise KeyError(f"no RSS point {label!r}; points: {[n for n, _ in self.points]}")

    def growth_bytes(self, since: str = "start", until: str = "end") -> int | None:
        a, b = self.rss(since), self.rss(until)
        return None if a is None or b is None else b - a

    @property
    def peak_rss_bytes(self) -> int | None:
        return self.points[-1][1].peak_rss_bytes if self.points else None

    @property
    def session_peak_bytes(self) -> int | None:
        """The peak over the RSS at ``start``: what the run added at its worst (a session's
        weights, arenas and activations), without what the process held before it (another
        variant's leftovers, the interpreter). None where the peak could not be reset there."""
        start = next((snap.rss_bytes for name, snap in self.points if name == "start"), None)
        peak = self.peak_rss_bytes
        return None if not self.peak_reset or start is None or peak is None else max(0, peak - start)

    def to_json(self) -> dict[str, Any]:
        labels = [n for n, _ in self.points]
        doc: dict[str, Any] = {
            "points": {n: s.to_json() for n, s in self.points},
            "peak_rss_bytes": self.peak_rss_bytes,
            "peak_is_since_process_start": not self.peak_reset,
            "session_peak_bytes": self.session_peak_bytes,
        }
        if "start" in labels and "end" in labels:
            doc["growth_bytes"] = self.growth_bytes()
        if "after_warmup" in labels and "end" in labels:
            # Growth after warm-up is the leak signal: warm-up legitimately allocates arenas.
            doc["growth_after_warmup_bytes"] = self.growth_bytes("after_warmup", "end")
        return doc


@dataclass
class RssTracker:
    """Samples RSS at the start, after warm-up and at the end of a run::

    tracker = RssTracker(); tracker.start(); ...warm-up...; tracker.after_warmup()
    ...measure...; report = tracker.stop()
    """

    proc_status: str | Path = PROC_STATUS
    clear_refs: str | Path = PROC_CLEAR_REFS
    _points: list[tuple[str, MemorySnapshot]] = field(default_factory=list)
    _peak_reset: bool = False

    def start(self, reset_peak: bool = True) -> None:
        self._points = []
        self._peak_reset = reset_peak and reset_peak_rss(self.clear_refs)
        self.mark("start")

    def mark(self, label: str) -> MemorySnapshot:
        snap = memory_snapshot(self.proc_status)
        self._points.append((label, snap))
        return snap

    def after_warmup(self) -> MemorySnapshot:
        return self.mark("after_warmup")

    def stop(self) -> RssReport:
        self.mark("end")
        return RssReport(tuple(self._points), self._peak_reset)


def path_size_bytes(path: str | Path) -> int:
    """Size of a file, or the total of the files under a directory (symlinks not followed)."""
    p = Path(path)
    if p.is_dir():
        return sum(f.stat().st_size for f in p.rglob("*") if f.is_file() and not f.is_symlink())
    return p.stat().st_size


def file_sizes(paths: Iterable[str | Path]) -> dict[str, int]:
    """``{path: bytes}`` for artifacts (files or directories such as an engine cache)."""
    return {os.fspath(p): path_size_bytes(p) for p in paths}
