"""``--runtime`` / ``--precision`` / ``--profile``: one definition each, their choices and help read
from the runtime and quantize-profile registries when shown."""

from __future__ import annotations

from collections.abc import Callable, Mapping

import typer
from typer.core import TyperArgument, TyperOption

from edgekit.cli._params import _PlainArgument, _PlainOption, click, parse_csv
from edgekit.errors import UsageError


class RegistryHelp:
    """An option's help whose list of runtimes or precisions is read from the registry when the
    help is shown (a backend registered after the CLI loaded is listed too, and ``edgekit --help``
    imports no backend module). typer keeps help as a plain string, so the options are found by
    their lead text (``LEADS``)."""

    def __init__(self, lead: str, kind: str, extra: Mapping[str, str] | None = None):
        self.lead, self.kind, self.extra = lead, kind, dict(extra or {})

    def render(self) -> str:
        if self.kind == "profile":
            from edgekit.quantize import registry as profiles  # deferred: importing it registers the built-in profiles

            listing = profiles.profile_help()
        else:
            from edgekit.runtimes import registry  # deferred: the registry imports the backend modules

            listing = registry.runtime_help() if self.kind == "runtime" else registry.precision_help()
        listing += "".join(f" | {value} ({what})" for value, what in self.extra.items())
        return f"{self.lead}: {listing}.".replace("[", "\\[")  # edgekit[qnn] is text, not rich markup


LEADS: dict[str, RegistryHelp] = {}


class _RegistryOption(_PlainOption):
    @property
    def help(self) -> str:
        return LEADS[self.__dict__["help"]].render()

    def display_type_rich(self, ctx):
        if LEADS[self.__dict__["help"]].kind == "profile":  # the choices, as typer shows a Literal's
            return f"[{'|'.join(_profile_names())}]"
        return super().display_type_rich(ctx)

    @help.setter
    def help(self, value: str) -> None:
        self.__dict__["help"] = value


def _check_registry(kind: str, many: bool, extra: Mapping[str, str] | None = None) -> Callable:
    """The option's callback: every value (comma-separated when ``many``) checked by the registry,
    the one error listing the valid ones (exit 2, before any work); ``extra`` values (a command's
    own, e.g. build's ``auto``) pass."""

    def check(ctx: typer.Context, param: typer.CallbackParam, value: str | None) -> str | None:
        if value is None or ctx.resilient_parsing:
            return value
        from edgekit.runtimes import registry  # deferred: the registry imports the backend modules

        flag = param.opts[0] if param.opts else f"--{kind}"
        items = parse_csv(flag, value) if many else (value,)
        try:
            if kind == "runtime":
                registry.check_runtimes(items, flag)
            else:
                registry.check_precisions(items, flag, also=tuple(extra or {}))
        except UsageError as exc:
            raise click.exceptions.UsageError(str(exc), ctx) from None
        return value

    return check


def runtime_option(lead: str = "Runtime", *, many: bool = False) -> typer.models.OptionInfo:
    """``--runtime`` for every command: ``lead`` says what the runtime is for; the registry gives
    the choices, their help and the check (``many``: a comma-separated list)."""
    return typer.Option("--runtime", help=_lead(lead, "runtime"), callback=_check_registry("runtime", many))


def precision_option(
    lead: str = "Precision", *, many: bool = False, extra: Mapping[str, str] | None = None
) -> typer.models.OptionInfo:
    """``--precision`` for every command, as ``runtime_option``; ``extra``: the command's own
    values beyond the precisions ({value: what it means}, e.g. build's ``auto``)."""
    return typer.Option(
        "--precision", help=_lead(lead, "precision", extra), callback=_check_registry("precision", many, extra)
    )


def _lead(lead: str, kind: str, extra: Mapping[str, str] | None = None) -> str:
    if lead in LEADS and (LEADS[lead].kind, LEADS[lead].extra) != (kind, dict(extra or {})):
        raise ValueError(f"help lead {lead!r} is used by two different options: make them differ")
    LEADS[lead] = RegistryHelp(lead, kind, extra)
    return lead


def _profile_names() -> tuple[str, ...]:
    from edgekit.quantize import registry  # deferred: importing it registers the built-in profiles

    return registry.names()


def profile_option(lead: str = "Quantization profile") -> typer.models.OptionInfo:
    """``--profile`` (quantize): the quantization-profile registry gives its choices, their help
    and the check, read when shown or checked (a profile registered after the CLI loaded too)."""
    return typer.Option("--profile", help=_lead(lead, "profile"), callback=_check_profile)


def _check_profile(ctx: typer.Context, param: typer.CallbackParam, value: str | None) -> str | None:
    if value is None or ctx.resilient_parsing or value in _profile_names():
        return value
    valid = ", ".join(repr(n) for n in _profile_names())
    raise click.exceptions.BadParameter(f"{value!r} is not one of {valid}.", ctx, param)


def _plain_params(params) -> None:
    for param in params:
        if type(param) is TyperOption:
            param.__class__ = _RegistryOption if param.help in LEADS else _PlainOption
        elif type(param) is TyperArgument:
            param.__class__ = _PlainArgument


class _PlainParams:
    """Plain metavars (TEXT, INTEGER, [a|b]) for a command's or group's options and its --help."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        _plain_params(self.params)

    def get_help_option(self, ctx):
        option = super().get_help_option(ctx)
        _plain_params([option] if option is not None else [])
        return option
