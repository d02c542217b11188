"""Bounds edgekit checks before it allocates or loops: a hostile or mistyped number (a file header
claiming 10^12 rows, ``--batch 1000000000``, ``--n 10**9``; decode steps are bounded in
``decode.dispatch``) fails at once in one line naming
the bound and how to move it, instead of after minutes or in an out-of-memory kill.

Count and time options: one table of ranges (``BOUNDS``) and one of which range each option has
(``OPTION_BOUNDS``), checked at parse time (the CLI's ``bounded`` callback) and again by the
stage configs (``check_options``), the same bound for the same option in every command
(docs/reliability.md lists them). ``inf``, ``nan`` and negative seeds are one
line, never an OverflowError deep inside numpy.

Memory: the arrays a command builds from what it is given (condition rows, decode outputs) must
fit under ``EDGEKIT_MEMORY_CAP_MB`` (default 4096 MiB); set it higher for bigger inputs.
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

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
        raise UsageError(
            f"{MEMORY_CAP_ENV}={raw!r} is not a positive number of MiB", hint=f"e.g. {MEMORY_CAP_ENV}=16384"
        )
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


@dataclass(frozen=True)
class Bound:
    """A count or time option's valid range: ``low <= value <= high`` (``low < value`` when
    ``above_low``), an integer when ``integer``; ``unit`` for the message."""

    low: float
    high: float
    integer: bool
    unit: str = ""
    above_low: bool = False

    def describe(self) -> str:
        unit = f" {self.unit}" if self.unit else ""
        num = lambda x: str(int(x)) if float(x).is_integer() else f"{x:g}"  # noqa: E731
        kind = "an integer" if self.integer else "a number"
        if self.above_low:
            return f"{kind} above {num(self.low)}, at most {num(self.high)}{unit}"
        return f"{kind} from {num(self.low)} to {num(self.high)}{unit}"


# Decoded sequences of quantize's calibration and held-out sets (every call of each decode is
# recorded for calibration: far more than any calibration needs would only exhaust memory).
MAX_SAMPLES = 4096
# Rows debug replays teacher-forced with every tensor of every step captured.
MAX_REPLAY_ROWS = 1024
# Measured and warm-up decodes per profiled variant (a microsecond model reaches them in seconds).
MAX_ITERS = 10_000
MAX_WARMUP = 1_000
# Any time option: an hour per variant, stream run or budget.
MAX_SECONDS = 3600
MAX_SEED = 2**32 - 1
MAX_THREADS = 1024
MAX_STREAMS = 64  # threads and memory: far above what one device serves
# Decode steps of a --steps list (profile, loadtest): decode.dispatch.MAX_STEPS, which the decode
# loops check themselves (decode/ imports no hallway module but errors and spec).
MAX_STEPS = 10_000
# Lengths of profile's architecture-only crossover sweep (a model is exported at each).
MAX_SWEEP_LENGTH = 8192
# Budget fallbacks of quantize's search: far above any model's weighted node count.
MAX_FALLBACKS = 100_000

BOUNDS: dict[str, Bound] = {
    "rows": Bound(1, MAX_ROWS, True, "rows"),
    "replay-rows": Bound(1, MAX_REPLAY_ROWS, True, "rows"),
    "samples": Bound(1, MAX_SAMPLES, True, "decodes"),
    "fallbacks": Bound(0, MAX_FALLBACKS, True, "nodes"),
    "iters": Bound(1, MAX_ITERS, True, "decodes"),
    "warmup": Bound(0, MAX_WARMUP, True, "decodes"),
    "seconds": Bound(0, MAX_SECONDS, False, "s"),
    "duration": Bound(0, MAX_SECONDS, False, "s", above_low=True),
    "ms": Bound(0, MAX_SECONDS * 1000, False, "ms", above_low=True),
    "seed": Bound(0, MAX_SEED, True),
    "threads": Bound(0, MAX_THREADS, True),
    "streams": Bound(1, MAX_STREAMS, True, "streams"),
    "db": Bound(-1000, 1000, False, "dB"),
    "steps": Bound(1, MAX_STEPS, True, "steps"),
    "sweep-length": Bound(2, MAX_SWEEP_LENGTH, True, "tokens"),
}

# The bound of each count and time option: one per option, so an option has the same range in
# every command that has it (the CLI's ``bounded`` callback and the stage configs'
# ``check_options`` read it). The last two are config fields with no option of their own.
OPTION_BOUNDS: dict[str, str] = {
    "--n": "rows",  # check, debug, demo
    "--batch": "rows",  # export, run, profile
    "--frontier-n": "rows",  # profile
    "--rows": "replay-rows",  # debug
    "--calib-samples": "samples",  # quantize
    "--eval-samples": "samples",  # quantize
    "--max-fallback": "fallbacks",  # quantize
    "--iters": "iters",  # profile
    "--warmup": "warmup",  # profile
    "--min-seconds": "seconds",  # profile
    "--max-seconds": "seconds",  # profile (0: no bound)
    "--duration-s": "duration",  # loadtest
    "--deadline-ms": "ms",  # loadtest
    "--latency-budget-ms": "ms",  # run, profile
    "--seed": "seed",  # every command
    "--threads": "threads",  # every command
    "--streams": "streams",  # loadtest
    "--threshold": "db",  # debug
    "--steps": "steps",  # loadtest; profile's list (run's decode steps: decode.dispatch)
    "--frontier-steps": "steps",  # profile
    "--sweep": "sweep-length",  # profile
    "calib_seed": "seed",  # QuantizeConfig
    "warmup_seconds": "seconds",  # MeasureConfig
}


def check_option(flag: str, value: Any, bound: str) -> Any:
    """``value`` of option ``flag`` if it is within ``BOUNDS[bound]``; else one UsageError naming
    the option, the value and the range (None passes: the option was not given)."""
    if value is None:
        return value
    b = BOUNDS[bound]
    number = isinstance(value, (int, float)) and not isinstance(value, bool)
    finite = number and (isinstance(value, int) or math.isfinite(value))
    whole = number and (isinstance(value, int) or (finite and float(value).is_integer()))
    inside = finite and (value > b.low if b.above_low else value >= b.low) and value <= b.high
    if not (inside and (whole or not b.integer)):
        shown = repr(value) if not number else (f"{value:g}" if isinstance(value, float) else str(value))
        raise UsageError(
            f"{flag} {shown} is out of bounds; valid: {b.describe()}", hint="every bound: docs/reliability.md"
        )
    return int(value) if b.integer else value


def check_options(values: Mapping[str, Any]) -> None:
    """A config's ``{option: value}`` each within the option's bound (``OPTION_BOUNDS``; a list
    option's value, e.g. ``--steps 2,4,8``, item by item; None passes): the first one out of
    bounds is the one UsageError."""
    for flag, value in values.items():
        for item in value if isinstance(value, (list, tuple)) else (value,):
            check_option(flag, item, OPTION_BOUNDS[flag])
