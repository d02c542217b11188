"""The options the commands share, one definition each (as huggingface_hub's ``hf`` CLI does):
an ``Annotated`` alias where an option reads the same in every command that has it, and a
factory where only its help differs from command to command (the flag, its short form and its
bound, ``limits.OPTION_BOUNDS``, stay in one place). Commands import the module
(``import edgekit.cli.options as opt``) and declare ``seed: opt.Seed = 0`` or
``seed: Annotated[int | None, opt.seed_option("...")] = None``.

The registry-driven ``--runtime`` / ``--precision`` / ``--profile`` are made in
``registry_options`` and handed out from here with the rest."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Literal

import typer

from edgekit.cli._params import click
from edgekit.cli.registry_options import precision_option, profile_option, runtime_option
from edgekit.errors import UsageError
from edgekit.host import ISA_CLASSES
from edgekit.limits import OPTION_BOUNDS, check_option

__all__ = ["precision_option", "profile_option", "runtime_option"]  # re-exported: the commands take them from here


def bounded(ctx: typer.Context, param: typer.CallbackParam, value: Any) -> Any:
    """A count or time option's callback: its value within the option's bound
    (``limits.OPTION_BOUNDS``, the same in every command that has the option; one line, exit 2,
    before any work)."""
    if value is None or ctx.resilient_parsing:
        return value
    flag = param.opts[0] if param.opts else f"--{param.name}"
    try:
        return check_option(flag, value, OPTION_BOUNDS[flag])
    except UsageError as exc:
        raise click.exceptions.UsageError(str(exc), ctx) from None


# ---- factories: the same option, a command's own help ------------------------------------------
def bounded_option(flag: str, help: str) -> Any:
    """A count or time option (``--n``, ``--batch``, ``--iters``, ``--latency-budget-ms``, …):
    checked against its bound when parsed."""
    return typer.Option(flag, callback=bounded, help=help)


def latency_budget_option(does: str, note: str) -> Any:
    """``--latency-budget-ms`` (flow): the solver and steps that fit a time per decode, and what
    the command ``does`` with them."""
    return bounded_option(
        "--latency-budget-ms",
        f"flow: {does} solver and steps that fit this many ms per decode on this device ({note}).",
    )


def seed_option(help: str = "Seed of all decode noise (same seed, same output on every runtime).") -> Any:
    return bounded_option("--seed", help)


def threads_option(help: str = "Runtime threads (0 = runtime default).") -> Any:
    return bounded_option("--threads", help)


def target_option(help: str = "Target name (see `edgekit targets`) or a path to your own target .toml.") -> Any:
    return typer.Option("--target", "-t", help=help)


def out_option(help: str, **kwargs: Any) -> Any:
    """``-o`` / ``--out``: what the command writes (``show_default`` and the like in ``kwargs``)."""
    return typer.Option("-o", "--out", help=help, **kwargs)


def repeatable_option(flag: str, help: str) -> Any:
    """An option given once per value (a ``list[str]``): its help ends by saying so, since the
    usage line shows one value (``_params``)."""
    return typer.Option(flag, help=f"{help}; repeatable.")


def skippable_option(flag: str, help: str) -> Any:
    """A comma-separated list that 'none' turns off (parsed with ``app.parse_skippable_csv``)."""
    return typer.Option(flag, help=f"{help}; 'none' to skip.")


def isa_option(what: str, then: str = "") -> Any:
    """``--isa``: a CPU class whose int8 arithmetic counts, or host; the classes listed here."""
    return typer.Option("--isa", help=f"{what} (host = this machine; {' | '.join(ISA_CLASSES)}){then}.")


def aihub_option(flag: str, help: str) -> Any:
    """An option only ``--runtime aihub`` reads (``--device``, ``--resume``, …): its help says so first."""
    return typer.Option(flag, help=f"With --runtime aihub: {help}")


def resume_option(command: str, jobs: str = "jobs") -> Any:
    """``--resume`` of a command that submits AI Hub jobs: one wording in every command."""
    return aihub_option(
        "--resume",
        f"collect the {jobs} an earlier, interrupted {command} submitted (the bundle's aihub/jobs.json) "
        "instead of submitting new ones.",
    )


def metric_option(purpose: str = "") -> Any:
    """``--metric``: the user's quality hook, its contract, and that it runs their code."""
    return typer.Option(
        "--metric",
        help=f"Quality metric module:function(output, cond) -> {{name: float}}, higher = better{purpose}. "
        "RUNS THAT CODE.",
    )


# The forms a bundle's network comes in (``spec.GRAPHS``), the choices of export's and run's --graph.
GraphForm = Literal["host", "step", "unrolled"]


# ---- aliases: the same option in every command ---------------------------------------------------
Bundle = Annotated[
    Path, typer.Argument(help="Bundle directory (made by `edgekit export` or `edgekit demo`).", show_default=False)
]
Json = Annotated[bool, typer.Option("--json", help="Print one JSON document on stdout instead of tables.")]
Batch = Annotated[int | None, bounded_option("--batch", "Static batch size baked into the graph.")]
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
        help=(
            "Run Python code the bundle's manifest names (condition sampler, model source) although you did not "
            "export the bundle here."
        ),
    ),
]
Wait = Annotated[
    bool,
    typer.Option(
        "--wait", help="When another edgekit stage is writing the bundle, wait for it instead of failing (exit 1)."
    ),
]
Cond = Annotated[list[str] | None, repeatable_option("--cond", "NAME=VALUE (a number) or NAME=FILE.npy for every row")]
CondData = Annotated[
    Path | None,
    typer.Option(
        "--cond-data",
        help=(
            "Real conditions: an .npz (or a directory of .npz / NAME.npy) with arrays named like the conditioning "
            "inputs, [N, ...] each."
        ),
    ),
]
