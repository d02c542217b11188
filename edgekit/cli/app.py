"""The typer app, the command decorator (user errors print one line and exit with their code;
Ctrl-C says nothing was recorded) and the parsers the commands share (their options: ``options``)."""

from __future__ import annotations

import errno
import functools
import inspect
import json
import os
import sys
from collections.abc import Callable
from typing import Annotated

import typer
from typer.core import TyperCommand, TyperGroup

from edgekit._lock import LOCK_WAIT
from edgekit._userhooks import TRUST_CODE
from edgekit.bundle import COMMITTED
from edgekit.cli._params import (  # noqa: F401 (parse_csv, parse_skippable_csv: the commands import them from here)
    click,
    parse_csv,
    parse_skippable_csv,
)
from edgekit.cli.interrupts import Terminated, _interrupted, _watch_sigint
from edgekit.cli.registry_options import _PlainParams
from edgekit.errors import EXIT_USAGE, EdgekitError
from edgekit.output import Output, clean


class _Command(_PlainParams, TyperCommand):
    pass


class _Group(_PlainParams, TyperGroup):
    """Usage errors (unknown option, bad choice, missing argument) are one line on stderr and exit
    2; with ``--json`` stdout also gets the one document ``{"error": ..., "exit_code": 2}``."""

    def main(self, args=None, prog_name=None, complete_var=None, standalone_mode=True, **extra):
        if not standalone_mode:
            return super().main(args, prog_name, complete_var, standalone_mode=False, **extra)
        argv = list(sys.argv[1:] if args is None else args)
        Output.documents_written = 0
        try:
            rv = super().main(argv, prog_name, complete_var, standalone_mode=False, **extra)
        except (
            click.exceptions.NoArgsIsHelpError
        ) as exc:  # `edgekit` alone: the help (typer's rich help is printed already)
            if exc.format_message().strip():
                typer.echo(exc.format_message())
            sys.exit(EXIT_USAGE)
        except click.exceptions.ClickException as exc:
            where = f" (see `{exc.ctx.command_path} --help`)" if getattr(exc, "ctx", None) is not None else ""
            message = " ".join(exc.format_message().replace("Value error, ", "").split())
            print_error(f"{message}{where}", exc.exit_code or EXIT_USAGE, json_mode="--json" in argv)
            sys.exit(exc.exit_code or EXIT_USAGE)
        except typer.Abort:
            Output().err.print("interrupted: nothing was recorded for the unfinished stage")
            sys.exit(130)
        sys.exit(rv if isinstance(rv, int) else 0)


def print_error(message: str, exit_code: int, json_mode: bool) -> None:
    """The one error line on stderr; with --json also the one document on stdout (unless the
    command already printed its document, e.g. a check that ran and failed)."""
    from rich.markup import escape

    message = clean(message)  # terminal control characters shown escaped (as every console line)
    Output().err.print(f"[red]error:[/red] {escape(message)}", highlight=False)
    if json_mode and not Output.documents_written:
        sys.stdout.write(json.dumps({"error": message, "exit_code": exit_code}) + "\n")
        sys.stdout.flush()


app = typer.Typer(
    name="edgekit",
    help="Export, quantize, build, run and check non-autoregressive generative models on edge devices.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
    rich_markup_mode="rich",
    cls=_Group,
)


def _version(value: bool) -> None:
    if value:
        from edgekit import __version__

        typer.echo(f"edgekit {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: Annotated[
        bool | None,
        typer.Option("--version", callback=_version, is_eager=True, help="Print edgekit's version and exit."),
    ] = None,
) -> None:
    """Export, quantize, build, run and check non-autoregressive generative models on edge devices."""


def debug_enabled() -> bool:
    return os.environ.get("EDGEKIT_DEBUG", "") not in ("", "0")


def command(name: str | None = None, **kwargs) -> Callable:
    """Register a command whose user errors print one line and exit with their code (logging set
    up first, the same for every command; ``--trust-code`` and ``--wait`` set for its stage)."""

    def register(fn: Callable) -> Callable:
        @functools.wraps(fn)
        def wrapper(*args, **kw):
            configure_logging()
            interrupted, restore = _watch_sigint()
            committed = len(COMMITTED)
            Output.documents_written = 0
            # Only a command with --trust-code / --wait has them; they hold for its stage.
            trust = TRUST_CODE.set(bool(kw.get("trust_code")))
            wait = LOCK_WAIT.set(bool(kw.get("wait")))
            try:
                return _disk_errors(fn)(*args, **kw)
            except EdgekitError as exc:
                if interrupted():
                    # Ctrl-C inside a C extension's import surfaces as an ImportError (and so as
                    # MissingDependency): the user pressed Ctrl-C, say that.
                    Output().err.print(_interrupted(COMMITTED[committed:]))
                    raise typer.Exit(130) from None
                if debug_enabled():
                    raise
                print_error(str(exc), exc.exit_code, json_mode=bool(kw.get("json_out")))
                raise typer.Exit(exc.exit_code) from None
            except EOFError as exc:
                # A file that ends early (an empty .npz, a cut .npy). Left alone, click reports it
                # as Ctrl-C (exit 130, no JSON): it is bad input, say so.
                if debug_enabled():
                    raise
                detail = str(exc).splitlines()[0] if str(exc) else "no data left"
                print_error(
                    f"a file this command read ended early ({detail}): it is empty or truncated; "
                    "check the files you passed",
                    1,
                    json_mode=bool(kw.get("json_out")),
                )
                raise typer.Exit(1) from None
            except KeyboardInterrupt as exc:
                if debug_enabled():
                    raise
                term = isinstance(exc, Terminated)
                Output().err.print(
                    _interrupted(COMMITTED[committed:], "terminated (SIGTERM)" if term else "interrupted")
                )
                raise typer.Exit(143 if term else 130) from None
            finally:
                TRUST_CODE.reset(trust)
                LOCK_WAIT.reset(wait)
                restore()

        if fn.__doc__ and "help" not in kwargs:
            # A docstring wrapped in the source still reads as one line in `edgekit --help`'s list of
            # commands (typer joins a first paragraph's lines on the command's own page only).
            kwargs["help"] = "\n\n".join(" ".join(p.split()) for p in inspect.getdoc(fn).split("\n\n"))
        return app.command(name, cls=_Command, **kwargs)(wrapper)

    return register


# A full disk, no permission, and paths that cannot be what the command writes (a name over the
# file system's limit, a file where a folder goes or the other way round).
_DISK_ERRNOS = {
    errno.ENOSPC,
    errno.EROFS,
    errno.EACCES,
    errno.EPERM,
    errno.EDQUOT,
    errno.EFBIG,
    errno.ENAMETOOLONG,
    errno.ENOTDIR,
    errno.EISDIR,
    errno.EEXIST,
}


def _disk_errors(fn: Callable) -> Callable:
    """A full disk, a read-only folder or a missing permission while a command writes its files
    (-o, --html, --junit, --save-baseline, a bundle) is the user's to fix: one line naming the
    file, never a traceback. Any other OSError stays a bug with its traceback."""

    @functools.wraps(fn)
    def call(*args, **kw):
        try:
            return fn(*args, **kw)
        except OSError as exc:
            if exc.errno not in _DISK_ERRNOS:
                raise
            where = f" {exc.filename}" if exc.filename else ""
            verb = "access" if exc.errno in (errno.EACCES, errno.EPERM) else "write"
            space = exc.errno in (errno.ENOSPC, errno.EDQUOT, errno.EFBIG)
            raise EdgekitError(
                f"cannot {verb}{where} ({exc.strerror or exc})",
                hint="free some space, or choose a path you may write" if space else "choose another path",
            ) from None

    return call


def parse_cond(items: list[str] | None) -> dict[str, str]:
    """--cond NAME=VALUE items -> {NAME: VALUE} (values are parsed by the pipeline)."""
    raw: dict[str, str] = {}
    for item in items or []:
        name, sep, value = item.partition("=")
        if not sep or not name:
            raise EdgekitError(
                f"--cond {item!r} is not NAME=VALUE", hint="e.g. --cond class_id=3 or --cond tokens=tokens.npy"
            )
        raw[name] = value
    return raw


def configure_logging() -> None:
    import logging

    logging.basicConfig(
        level=logging.DEBUG if debug_enabled() else logging.WARNING, format="%(levelname)s: %(message)s"
    )
