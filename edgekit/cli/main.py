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
