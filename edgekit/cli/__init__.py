"""The ``edgekit`` command line: each command parses options, calls one stage function and renders
its document through one ``Output`` (the stage's own ``render`` module).

``app``: the typer app, the command decorator and the shared options; one module per command
(or command group: ``pack`` holds pack and unpack), named after it, registers it (importing it
is what adds it, in the order ``edgekit --help`` lists them); ``main``: the entry point. Stage
modules are imported inside their command: ``edgekit --help`` and every ``--help`` then load
only typer and rich (fast, and working with only the core installed). This is the top layer:
nothing imports back into it.
"""

# ruff: noqa: I001 -- the import order is the order of the commands in `edgekit --help`
from edgekit.cli.app import app
from edgekit.cli import export, inspect, train_demo, run, quantize, check, debug, profile, loadtest  # noqa: F401  (registers the commands)
from edgekit.cli import targets, doctor, build, lint, pack, deploy, demo  # noqa: F401
from edgekit.cli.main import main

__all__ = ["app", "main"]
