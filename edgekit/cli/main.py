"""The entry point: runs the app; an internal bug keeps its traceback but exits with the documented code."""

from __future__ import annotations

from edgekit.cli.app import app, debug_enabled
from edgekit.errors import EXIT_ERROR, EdgekitError
from edgekit.output import Output


def main() -> None:
    try:
        app()
    except EdgekitError as exc:  # raised outside a command (e.g. in a callback)
        if debug_enabled():
            raise
        Output().err.print(f"error: {exc}", highlight=False, markup=False)
        raise SystemExit(exc.exit_code) from None
    except KeyboardInterrupt:
        raise SystemExit(130) from None
    except SystemExit:
        raise
    except BaseException:  # an internal bug: keep the traceback, but the documented exit code
        import traceback

        traceback.print_exc()
        raise SystemExit(EXIT_ERROR) from None
    finally:
        _quiet_shutdown()


def _quiet_shutdown() -> None:
    """The command is over (its output written, its exit code chosen): a Ctrl-C now, while
    atexit handlers and module teardown run, would only print a KeyboardInterrupt traceback or
    end the process with -SIGINT instead of that code, so it is ignored."""
    import signal
    import sys

    sys.stdout.flush()
    try:
        signal.signal(signal.SIGINT, signal.SIG_IGN)
    except ValueError:  # not the main thread
        pass
    # CPython (3.11, 3.12) marks a KeyboardInterrupt that ends a string ``exec`` (dataclasses and
    # namedtuple build their methods that way, lazily, so a Ctrl-C during an export can land in
    # one) as unhandled even when the command caught it; under ``python -m edgekit`` the
    # interpreter then ends the process with -SIGINT instead of the exit code chosen here. A
    # string exec resets that mark.
    exec("pass", {})
