"""A target file read strictly into a ``Target`` (``parse_target``): an unknown key is an error
listing the valid ones, a wrong type names the key, a value outside its choices lists them.
TOML parsing is the standard library's ``tomllib`` (``tomli`` on Python 3.10)."""

from __future__ import annotations

import collections.abc
import dataclasses
import re
import typing
from collections.abc import Mapping
from typing import Any

from edgekit._deps import require
from edgekit.errors import UsageError
from edgekit.host import ISA_CLASSES
from edgekit.targets.aihub import check_aihub
from edgekit.targets.qnn import check_qnn
from edgekit.targets.quantization import QUANTIZATION_PROFILES
from edgekit.targets.schema import (
    ARCHES,
    GRAPH_OPTIMIZATIONS,
    OPENVINO_DEVICES,
    OPENVINO_HINTS,
    OPENVINO_PRECISIONS,
    ORT_FORMATS,
    ORT_OPTIMIZATION_STYLES,
    POWER_PROBES,
    SUPPORTED_OPS_SOURCES,
    Target,
)
from edgekit.vocabulary import PRECISIONS, TARGET_RUNTIMES


def parse_target(text: str, source: str, default_name: str = "custom") -> Target:
    """A ``Target`` from TOML ``text``; ``source`` names the file in every error."""
    tomllib = _tomllib()
    try:
        table = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise UsageError(
            f"target file {source} is not valid TOML ({exc})",
            hint="fix the file (see `edgekit targets --json` for the schema)",
        ) from None
    except RecursionError:
        raise UsageError(f"target file {source} is nested too deeply to be a target", hint="fix the file") from None
    table.setdefault("name", default_name)
    name = table["name"]
    # The name becomes a folder (engines/<name>/) and an engine key: a plain slug, nothing that
    # could leave the bundle (``..``, ``/``, an absolute path) or hide in a listing.
    if isinstance(name, str) and not _SLUG.fullmatch(name):
        raise UsageError(
            f"target file {source}: name {name!r} is not a plain name (letters, digits, '.', '_', '-'; "
            "starting with a letter or digit; at most 64 characters)",
            hint='e.g. name = "my-board"',
        )
    target = dataclasses.replace(_build(Target, table, source, ""), source=source)
    _check_values(target, source)
    return target


_SLUG = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")


def _tomllib() -> Any:
    try:
        import tomllib
    except ModuleNotFoundError:  # Python 3.10
        return require("tomli")
    return tomllib


def _build(cls: type, table: Mapping[str, Any], source: str, where: str) -> Any:
    """Instantiate dataclass ``cls`` from ``table``, rejecting unknown keys and wrong types."""
    hints = typing.get_type_hints(cls)
    fields = {f.name: f for f in dataclasses.fields(cls) if f.name != "source"}
    unknown = [k for k in table if k not in fields]
    section = f" in [{where.rstrip('.')}]" if where else ""
    if unknown:
        raise UsageError(
            f"target file {source}: unknown key {unknown[0]!r}{section}; valid: {', '.join(fields)}",
            hint="fix the key's spelling (see `edgekit targets --json` for every key)",
        )
    missing = [
        n
        for n, f in fields.items()
        if n not in table and f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
    ]
    if missing:
        raise UsageError(
            f"target file {source}: required key {where}{missing[0]!r} is missing",
            hint=f"add {missing[0]} = ... (see a built-in target with `edgekit targets --json`)",
        )
    values = {name: _convert(hints[name], value, source, f"{where}{name}") for name, value in table.items()}
    return cls(**values)


def _convert(hint: Any, value: Any, source: str, key: str) -> Any:
    if dataclasses.is_dataclass(hint):
        if not isinstance(value, dict):
            raise _type_error(source, key, "a table", value)
        return _build(hint, value, source, f"{key}.")
    origin = typing.get_origin(hint)
    if origin is tuple:
        if not isinstance(value, list):
            raise _type_error(source, key, "an array", value)
        item = typing.get_args(hint)[0]
        return tuple(_convert(item, v, source, f"{key}[{i}]") for i, v in enumerate(value))
    if origin in (collections.abc.Mapping, dict):
        if not isinstance(value, dict):
            raise _type_error(source, key, "a table", value)
        return dict(value)
    if hint is bool:
        if not isinstance(value, bool):
            raise _type_error(source, key, "true or false", value)
        return value
    if hint is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise _type_error(source, key, "an integer", value)
        return value
    if hint is str:
        if not isinstance(value, str):
            raise _type_error(source, key, "a string", value)
        return value
    raise TypeError(f"target schema: unsupported field type {hint!r} for {key}")  # a bug here, not in the file


def _type_error(source: str, key: str, expected: str, value: Any) -> UsageError:
    return UsageError(f"target file {source}: key {key!r} must be {expected}, got {type(value).__name__} {value!r}")


def _check_values(t: Target, source: str) -> None:
    def one_of(key: str, value: Any, valid: tuple[str, ...]) -> None:
        if value not in valid:
            raise UsageError(f"target file {source}: {key} = {value!r} is invalid; valid: {', '.join(valid)}")

    for key, values, valid in (("runtimes", t.runtimes, TARGET_RUNTIMES), ("precisions", t.precisions, PRECISIONS)):
        if not values:
            raise UsageError(f"target file {source}: {key} is empty; give at least one of {', '.join(valid)}")
        for v in values:
            one_of(key, v, valid)
    one_of("arch", t.arch, ARCHES)
    one_of("quantization_profile", t.quantization_profile, tuple(QUANTIZATION_PROFILES))
    one_of("isa", t.isa, ("host", *ISA_CLASSES))
    one_of("power_probe", t.power_probe, POWER_PROBES)
    one_of("ort.graph_optimization", t.ort.graph_optimization, GRAPH_OPTIMIZATIONS)
    one_of("ort.format", t.ort.format, ORT_FORMATS)
    one_of("ort.optimization_style", t.ort.optimization_style, ORT_OPTIMIZATION_STYLES)
    one_of("lint.supported_ops", t.lint.supported_ops, SUPPORTED_OPS_SOURCES)
    one_of("openvino.device", t.openvino.device, OPENVINO_DEVICES)
    one_of("openvino.performance_hint", t.openvino.performance_hint, OPENVINO_HINTS)
    one_of("openvino.inference_precision", t.openvino.inference_precision, OPENVINO_PRECISIONS)
    for key in ("threads", "streams"):
        if getattr(t.openvino, key) < 0:
            raise UsageError(f"target file {source}: openvino.{key} must be >= 0 (0 = the plugin's choice)")
    if not t.ort.providers:
        raise UsageError(f'target file {source}: ort.providers is empty; e.g. ["CPUExecutionProvider"]')
    if t.ort.provider_options and len(t.ort.provider_options) != len(t.ort.providers):
        raise UsageError(
            f"target file {source}: ort.provider_options has {len(t.ort.provider_options)} tables for "
            f"{len(t.ort.providers)} providers; give one per provider ({{}} for defaults) or none"
        )
    if t.trt.builder_optimization_level not in range(-1, 6):
        raise UsageError(
            f"target file {source}: trt.builder_optimization_level = "
            f"{t.trt.builder_optimization_level} is invalid; valid: -1 (default) or 0..5"
        )
    if t.trt.workspace_mib <= 0:
        raise UsageError(f"target file {source}: trt.workspace_mib = {t.trt.workspace_mib} must be positive")
    if not 1 <= t.lint.opset_min <= t.lint.opset_max:
        raise UsageError(
            f"target file {source}: lint.opset_min..opset_max = {t.lint.opset_min}..{t.lint.opset_max} is not a range"
        )
    check_qnn(t.qnn, t.uses_qnn, source)
    check_aihub(t.aihub, "aihub" in t.runtimes, source)
    for key in ("max_topk_k", "memory_budget_mb"):
        if getattr(t.lint, key) < 0:
            raise UsageError(f"target file {source}: lint.{key} must be >= 0 (0 = not checked)")
