"""The options the commands share, one definition each (as huggingface_hub's ``hf`` CLI does):
an ``Annotated`` alias where an option reads the same in every command that has it, and a
factory where only its help differs from command to command (the flag, its short form and its
``limits.BOUNDS`` check stay in one place). Commands import the module (``from edgekit.cli
import options as opt``) and declare ``seed: opt.Seed = 0`` or
``seed: Annotated[int | None, opt.seed_option("...")] = None``.

The registry-driven ``--runtime`` / ``--precision`` / ``--profile`` are made in
``registry_options`` and handed out from here with the rest."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any

import typer

from edgekit.cli._params import click
from edgekit.cli.registry_options import precision_option, profile_option, runtime_option
from edgekit.errors import UsageError
from edgekit.limits import check_option

__all__ = ["precision_option", "profile_option", "runtime_option"]  # re-exported: the commands take them from here


def bounded(bound: str) -> Callable:
    """An option's callback: its value within ``limits.BOUNDS[bound]`` (one line, exit 2, before
    any work), the same bound in every command that has the option."""

    def check(ctx: typer.Context, param: typer.CallbackParam, value):
        if value is None or ctx.resilient_parsing:
            return value
        try:
            return check_option(param.opts[0] if param.opts else f"--{param.name}", value, bound)
        except UsageError as exc:
            raise click.exceptions.UsageError(str(exc), ctx) from None

    return check


# ---- factories: the same option, a command's own help ------------------------------------------
def seed_option(help: str = "Seed of all decode noise (same seed, same output on every runtime).") -> Any:
    return typer.Option("--seed", callback=bounded("seed"), help=help)


def threads_option(help: str = "Runtime threads (0 = runtime default).") -> Any:
    return typer.Option("--threads", callback=bounded("threads"), help=help)


def rows_option(flag: str, help: str) -> Any:
    """A count of rows (``--n``, ``--batch``, ``--frontier-n``): bounded by ``limits.BOUNDS['rows']``."""
    return typer.Option(flag, callback=bounded("rows"), help=help)


def target_option(help: str = "Target name (see `edgekit targets`) or a path to your own target .toml.") -> Any:
    return typer.Option("--target", "-t", help=help)


def out_option(help: str, **kwargs: Any) -> Any:
    """``-o`` / ``--out``: what the command writes (``show_default`` and the like in ``kwargs``)."""
    return typer.Option("-o", "--out", help=help, **kwargs)


def latency_budget_option(help: str) -> Any:
    return typer.Option("--latency-budget-ms", callback=bounded("ms"), help=help)


# ---- aliases: the same option in every command ---------------------------------------------------
Bundle = Annotated[
    Path, typer.Argument(help="Bundle directory (made by `edgekit export` or `edgekit demo`).", show_default=False)
]
Json = Annotated[bool, typer.Option("--json", help="Print one JSON document on stdout instead of tables.")]
Batch = Annotated[int | None, rows_option("--batch", "Static batch size baked into the graph.")]
Seed = Annotated[int, seed_option()]
Threads = Annotated[int, threads_option()]
Target = Annotated[str, target_option()]
Runtime = Annotated[str, runtime_option()]
Precision = Annotated[str, precision_option()]
# check and debug: a variant given as a bare precision (int8) runs on this runtime.
VariantRuntime = Annotated[str, runtime_option("Runtime of a variant given as a bare precision")]
TrustCode = Annotated[
    bool,
    typer.Option(
        "--trust-code",
        help="Run Python code the bundle's manifest names (condition sampler, model source) although you did not export the bundle here.",
    ),
]
Wait = Annotated[
    bool,
    typer.Option(
        "--wait", help="When another edgekit stage is writing the bundle, wait for it instead of failing (exit 1)."
    ),
]
Cond = Annotated[
    list[str] | None, typer.Option("--cond", help="NAME=VALUE (a number) or NAME=FILE.npy for every row; repeatable.")
]
CondData = Annotated[
    Path | None,
    typer.Option(
        "--cond-data",
        help="Real conditions: an .npz (or a directory of .npz / NAME.npy) with arrays named like the conditioning inputs, [N, ...] each.",
    ),
]
