"""Bounds edgekit checks before it allocates or loops: a hostile or mistyped number (a file header
claiming 10^12 rows, ``--batch 1000000000``, ``--n 10**9``; decode steps are bounded in
``decode.dispatch``) fails at once in one line naming
the bound and how to move it, instead of after minutes or in an out-of-memory kill.

Memory: the arrays a command builds from what it is given (condition rows, decode outputs) must
fit under ``EDGEKIT_MEMORY_CAP_MB`` (default 4096 MiB); set it higher for bigger inputs.
"""

from __future__ import annotations

import math
import os

from edgekit.errors import UsageError

MEMORY_CAP_ENV = "EDGEKIT_MEMORY_CAP_MB"
DEFAULT_MEMORY_CAP_MB = 4096
# Rows one command decodes (`run` decodes every row it is given, in graph batches).
MAX_ROWS = 65536
# Files of a --cond-data folder, arrays of one .npz.
MAX_FILES = 10_000


def memory_cap() -> int:
    """The cap in bytes (``EDGEKIT_MEMORY_CAP_MB``; a bad value is one clear error)."""
    raw = os.environ.get(MEMORY_CAP_ENV, "")
    if not raw:
        return DEFAULT_MEMORY_CAP_MB << 20
    try:
        mb = float(raw)
    except ValueError:
        mb = float("nan")
    if not math.isfinite(mb) or mb <= 0:
        raise UsageError(f"{MEMORY_CAP_ENV}={raw!r} is not a positive number of MiB", hint=f"e.g. {MEMORY_CAP_ENV}=16384")
    return int(mb * (1 << 20))


def human_bytes(n: float) -> str:
    for unit in ("bytes", "KiB", "MiB", "GiB", "TiB", "PiB"):
        if n < 1024 or unit == "PiB":
            return f"{n:.0f} {unit}" if unit == "bytes" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} EiB"  # pragma: no cover


def check_bytes(what: str, nbytes: int, fix: str) -> None:
    """Refuse ``what`` (e.g. "--cond-data x.npz") needing ``nbytes`` over the memory cap."""
    cap = memory_cap()
    if nbytes > cap:
        raise UsageError(
            f"{what} needs {human_bytes(nbytes)} of memory, more than edgekit's cap of {human_bytes(cap)}",
            hint=f"{fix}, or raise the cap with {MEMORY_CAP_ENV}=<MiB>",
        )


def check_count(what: str, n: int, most: int, fix: str) -> None:
    """Refuse a count (rows, steps, files) over its bound before the loop starts."""
    if n > most:
        raise UsageError(f"{what} is {n}, more than edgekit takes ({most})", hint=fix)
