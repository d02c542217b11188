"""Up-front checks of what a stage will need of this host, so that a model too big for it stops
in one line before any work, never with a MemoryError (or the kernel's OOM killer) 20 minutes in,
or a half-written 2 GB side file on a full disk.

Each stage states its needs (``Need``) from the model's weight bytes and the factors measured at
real size (``docs/large-models.md``: a 2.25 GiB masked transformer on a 24 GiB host), and
``preflight`` compares them with what the host has now:

- memory: ``MemAvailable`` of ``/proc/meminfo``, capped by the cgroup's limit (a container sees
  the host's RAM in /proc/meminfo but is killed at ``memory.max``);
- disk: ``shutil.disk_usage`` of the folder the files go to (the nearest existing parent).

A host that cannot say (no /proc) passes: the check refuses only what it knows will not fit.
``EDGEKIT_NO_PREFLIGHT=1`` turns a refusal into a warning, for a user who knows better (swap, a
file system that compresses)."""

from __future__ import annotations

import os
import shutil
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from edgekit.errors import EXIT_UNAVAILABLE, EdgekitError

GIB = 1024**3
ENV_SKIP = "EDGEKIT_NO_PREFLIGHT"

# Peak resident memory per FP32 weight byte, measured on a 2.25 GiB masked transformer
# (benchmarks/real_size.py, docs/large-models.md) and rounded up: export holds the torch module,
# the exporter's copy and the ONNX serialization (5.4 GB peak: 2.4x); quantize holds one FP32
# session at a time, beside the quantizer's proto or an INT8 candidate (benchmarks/
# quantize_memory.py: 1.6x with minmax, 2.2x with percentile, whose calibration holds one call's
# calibrated tensors; 3.1-3.4x before quantize/calibrator.py). The fixed part covers the
# interpreter, torch and onnxruntime themselves.
EXPORT_MEMORY = 2.5
QUANTIZE_MEMORY = 2.5
BASE_MEMORY = 512 * 1024**2
# Disk per FP32 weight byte: quantize's scratch folder holds the prepared float copy, the
# calibrator's augmented copy and the candidates (about 0.3x each); the bundle gains the int8
# graph. Export writes the graph once into the bundle's staging folder.
QUANTIZE_SCRATCH_DISK = 2.5
QUANTIZE_BUNDLE_DISK = 0.35
EXPORT_DISK = 1.05


class HostTooSmall(EdgekitError):
    """This host lacks the memory or disk a stage needs for this model (checked before it starts)."""

    exit_code = EXIT_UNAVAILABLE


@dataclass(frozen=True)
class Need:
    """``bytes`` of ``kind`` ("memory", or "disk" under ``folder``) for ``what``."""

    kind: str
    bytes: int
    what: str
    folder: Path | None = None


def meminfo_available(meminfo: Path = Path("/proc/meminfo")) -> int | None:
    """``MemAvailable`` in bytes, or None where the file or the field is missing."""
    try:
        for line in meminfo.read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024  # kB
    except (OSError, ValueError, IndexError):
        return None
    return None


def cgroup_available(cgroup: Path = Path("/sys/fs/cgroup")) -> int | None:
    """What the cgroup (v2) still lets this process use: ``memory.max - memory.current``; None
    with no limit ("max") or no cgroup v2."""
    try:
        limit = (cgroup / "memory.max").read_text().strip()
        if limit == "max":
            return None
        return max(0, int(limit) - int((cgroup / "memory.current").read_text().strip()))
    except (OSError, ValueError):
        return None


def available_memory() -> int | None:
    """Bytes this process can still allocate: the smaller of MemAvailable and the cgroup's room."""
    known = [v for v in (meminfo_available(), cgroup_available()) if v is not None]
    return min(known) if known else None


def existing(folder: Path) -> Path:
    """``folder``, or its nearest parent that exists (where a folder still to be made will be)."""
    probe = Path(folder).absolute()
    while not probe.exists() and probe != probe.parent:
        probe = probe.parent
    return probe


def free_disk(folder: Path) -> int | None:
    """Free bytes on the file system ``folder`` is (or will be) on."""
    try:
        return shutil.disk_usage(existing(folder)).free
    except OSError:
        return None


def gib(n: int) -> str:
    return f"{n / GIB:.1f} GiB" if n >= GIB / 10 else f"{n / 1024**2:.0f} MiB"


def preflight(
    stage: str,
    needs: Sequence[Need],
    warn: Callable[[str], None] | None = None,
    memory: Callable[[], int | None] | None = None,
    disk: Callable[[Path], int | None] | None = None,
) -> list[str]:
    """Raise ``HostTooSmall`` on the first need this host cannot meet now (one line: what, how
    much, how much there is, the fix); with ``EDGEKIT_NO_PREFLIGHT=1`` say it through ``warn``
    instead and return the lines. Needs on one file system add up."""
    short: list[str] = []
    total_memory = sum(n.bytes for n in needs if n.kind == "memory")
    have = (memory or available_memory)() if total_memory else None
    if have is not None and total_memory > have:
        what = " and ".join(n.what for n in needs if n.kind == "memory")
        short.append(
            f"{stage} needs about {gib(total_memory)} of memory ({what}); this host has {gib(have)} available: "
            "close other programs, or run it on a host with more RAM"
        )
    by_device: dict[int, list[Need]] = {}
    for n in needs:
        if n.kind == "disk" and n.folder is not None:
            by_device.setdefault(os.stat(existing(n.folder)).st_dev, []).append(n)
    for group in by_device.values():
        want = sum(n.bytes for n in group)
        free = (disk or free_disk)(group[0].folder)  # type: ignore[arg-type]
        if free is not None and want > free:
            places = ", ".join(f"{gib(n.bytes)} for {n.what} in {n.folder}" for n in group)
            short.append(
                f"{stage} needs about {gib(want)} of free disk ({places}); {gib(free)} is free there: "
                "free some space, or point TMPDIR (scratch) or the bundle at a bigger disk"
            )
    if short and os.environ.get(ENV_SKIP, "") not in ("", "0"):
        for line in short:
            (warn or _stderr)(f"{line} ({ENV_SKIP} is set: going on)")
        return short
    if short:
        raise HostTooSmall(short[0], hint=f"measured needs: docs/large-models.md; {ENV_SKIP}=1 tries anyway")
    return []


def _stderr(line: str) -> None:
    print(f"warning: {line}", file=sys.stderr)  # a stage without a warn channel (export)


__all__ = [
    "BASE_MEMORY",
    "EXPORT_DISK",
    "EXPORT_MEMORY",
    "ENV_SKIP",
    "HostTooSmall",
    "Need",
    "QUANTIZE_BUNDLE_DISK",
    "QUANTIZE_MEMORY",
    "QUANTIZE_SCRATCH_DISK",
    "available_memory",
    "cgroup_available",
    "existing",
    "free_disk",
    "gib",
    "meminfo_available",
    "preflight",
]
