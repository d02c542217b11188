"""Small readers shared by the probes: sysfs files under a ``root`` and short commands.

Every probe takes ``root`` so tests can build a fake ``/sys`` tree in a temporary directory; the
command runner is a parameter for the same reason.
"""

from __future__ import annotations

import subprocess
from collections.abc import Callable, Sequence
from pathlib import Path

from edgekit.host import under  # noqa: F401  (one re-rooting rule for probes and host facts)

# A command runner takes argv and returns stdout; it raises on a non-zero exit or a timeout.
CommandRunner = Callable[[Sequence[str]], str]


def read_text(path: str | Path) -> str:
    return Path(path).read_text(encoding="utf-8", errors="replace").strip()


def read_int(path: str | Path) -> int:
    return int(read_text(path))


def run_command(argv: Sequence[str], timeout_s: float = 5.0) -> str:
    """Run a short status command and return its stdout (vcgencmd, nvpmodel)."""
    done = subprocess.run(list(argv), capture_output=True, text=True, timeout=timeout_s, check=True)
    return done.stdout
