"""The one exception family the CLI prints without a traceback, and the exit codes.

User mistakes raise an ``EdgekitError`` subclass; internal bugs keep their own exception types
(and their tracebacks). ``EDGEKIT_DEBUG=1`` makes the CLI show tracebacks for both. A value
that is none of the valid ones is said in one wording everywhere (``unknown``, ``one_of``).
"""

from __future__ import annotations

from collections.abc import Collection, Iterable
from typing import Any, TypeVar

T = TypeVar("T")

# Exit codes (DESIGN.md): 0 ok · 1 edgekit error · 2 usage · 3 missing dependency or target
# unavailable · 4 a budget or regression check failed.
EXIT_OK = 0
EXIT_ERROR = 1
EXIT_USAGE = 2
EXIT_UNAVAILABLE = 3
EXIT_CHECK_FAILED = 4


class EdgekitError(Exception):
    """A failure the user can fix. The message is one line: what, the bad value, what is valid,
    and (``hint``) what to run next."""

    exit_code = EXIT_ERROR

    def __init__(self, message: str, hint: str | None = None):
        super().__init__(message)
        self.message = message
        self.hint = hint

    def __str__(self) -> str:
        return f"{self.message} ({self.hint})" if self.hint else self.message


class UsageError(EdgekitError):
    """A bad option value or combination that parsing alone could not catch."""

    exit_code = EXIT_USAGE


class BundleError(EdgekitError):
    """A bundle that is missing, tampered with, or of an unknown schema."""


class ExportError(EdgekitError):
    """Export failed, or the exported graph does not match torch within tolerance."""


class MissingDependency(EdgekitError):
    """An optional package (or platform stack such as TensorRT) is not installed."""

    exit_code = EXIT_UNAVAILABLE


class TargetUnavailable(EdgekitError):
    """The requested runtime, provider or device is not usable on this host."""

    exit_code = EXIT_UNAVAILABLE


class CheckFailed(EdgekitError):
    """A budget or regression check ran and failed."""

    exit_code = EXIT_CHECK_FAILED


def unknown(
    what: str,
    value: object,
    valid: Iterable[object],
    *,
    also: str = "",
    hint: str | None = None,
    error: type[EdgekitError] = UsageError,
) -> EdgekitError:
    """The error for a value that is none of ``valid``, in the one wording every such check uses:
    ``WHAT 'value' is unknown; valid: a, b, c`` (``also``: what follows the list, e.g. another form
    the value may take)."""
    return error(f"{what} {value!r} is unknown; valid: {', '.join(map(str, valid))}{also}", hint=hint)


def one_of(what: str, value: T, valid: Collection[object], **unknown_kw: Any) -> T:
    """``value``, when it is one of ``valid``; else raises ``unknown``'s error (``also``, ``hint``,
    ``error`` as it takes them)."""
    if value not in valid:
        raise unknown(what, value, valid, **unknown_kw)
    return value
