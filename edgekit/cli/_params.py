"""Help text a user can read: metavars say what to type (TEXT, PATH), not Python types, for
every option and argument of every command (``registry_options._PlainParams`` mixes them into the
app's command and group classes); and the comma-separated list parser the options share."""

from __future__ import annotations

from typer.core import TyperArgument, TyperOption

from edgekit.errors import UsageError

try:  # typer >= 0.22 vendors click
    from typer import _click as click  # noqa: F401
except ImportError:  # pragma: no cover - older typer on click
    import click  # type: ignore[no-redef]  # noqa: F401


_PLAIN_TYPES = {
    "str": "TEXT",
    "int": "INTEGER",
    "float": "FLOAT",
    "path": "PATH",
    "file": "PATH",
    "directory": "PATH",
    "int range": "INTEGER",
    "float range": "FLOAT",
    "bool": "",
}


def _plain(label: str | None, is_flag: bool) -> str | None:
    """typer's ``<list[str]>``/``<bool>``/``<a|b>`` -> ``TEXT`` / nothing / ``[a|b]``."""
    if label is None or is_flag:
        return ""
    inner = label.strip("<>")
    while inner.startswith("list[") and inner.endswith("]"):  # repeatable: the help text says so
        inner = inner[5:-1]
    if "|" in inner:
        return f"[{inner}]"
    return _PLAIN_TYPES.get(inner, inner.upper())


class _PlainOption(TyperOption):
    def display_type_rich(self, ctx):
        if self.metavar is not None:
            return self.metavar
        return _plain(self.display_type(ctx), self.is_bool_flag)


class _PlainArgument(TyperArgument):
    @property
    def display_name_raw(self) -> str:
        return self.metavar or self.name.upper()

    def display_type_rich(self, ctx):
        return _plain(self.display_type(ctx), False)

    def _usage_display_name(self) -> str:
        name = self.display_name_raw + ("..." if self.nargs != 1 else "")
        return name if self.required else f"[{name}]"


def parse_csv(option: str, value: str | None, cast=str) -> tuple:
    """'a,b' -> ('a', 'b'); a bad item is a one-line usage error naming the option."""
    if value is None:
        return ()
    items = [v.strip() for v in value.split(",") if v.strip()]
    try:
        return tuple(cast(v) for v in items)
    except ValueError:
        raise UsageError(f"{option} {value!r} is not a comma-separated list of {cast.__name__}s") from None


def parse_skippable_csv(option: str, value: str, cast=str) -> tuple:
    """``parse_csv``, where 'none' or 'off' (or nothing) is no items: an option whose help says
    "'none' to skip" (``options.skippable_option``)."""
    return () if value.strip().lower() in ("none", "off", "") else parse_csv(option, value, cast)
