"""The ``edgekit`` command line: each command parses options, calls one stage function and renders
its document through one ``Output`` (the stage's own ``render`` module).

``app``: the typer app, the command decorator and the shared options; one module per group of
commands registers them (importing it is what adds them, in the order ``edgekit --help`` lists
them); ``main``: the entry point. Stage modules are imported inside their command: ``edgekit
--help`` and every ``--help`` then load only typer and rich (fast, and working with only the core
installed). This is the top layer: nothing imports back into it.
"""

# ruff: noqa: I001 -- the import order is the order of the commands in `edgekit --help`
from edgekit.cli.app import app
from edgekit.cli import model, accuracy, measure, stream, targets, ship, demo  # noqa: F401  (registers the commands)
from edgekit.cli.main import main

__all__ = ["app", "main"]
