"""Deployment targets: TOML profiles shipped with edgekit (``cpu``, ``jetson-orin-nano``, …) or
a user's own file, loaded into one frozen ``Target``.

A target says which runtimes to try in order, which execution providers and options, which
precisions it runs, which quantization profile its INT8 model needs, which power probe measures
it, what its lint rules are and how edgekit is installed on it (``schema``). Files are checked
strictly (``parse``): an unknown key is an error listing the valid ones, a wrong type names the
key. Nothing heavy is imported here (TOML parsing is the standard library's ``tomllib``; ``tomli``
on Python 3.10).
"""

from __future__ import annotations

from importlib import resources
from pathlib import Path

from edgekit.errors import UsageError, unknown
from edgekit.targets.aihub import AihubSettings
from edgekit.targets.parse import parse_target
from edgekit.targets.qnn import QNN_PERFORMANCE_MODES, QnnSettings
from edgekit.targets.quantization import QUANTIZATION_PROFILES, ProfileFacts
from edgekit.targets.schema import (
    POWER_PROBES,
    SUPPORTED_OPS_SOURCES,
    LintRules,
    OpenVinoSettings,
    OrtSettings,
    Target,
    TrtSettings,
)
from edgekit.userfiles import read_user_text

DEFAULT_TARGET = "cpu"


def builtin_names() -> list[str]:
    """Names of the targets shipped with edgekit, the default first."""
    names = sorted(p.name[: -len(".toml")] for p in resources.files(__name__).iterdir() if p.name.endswith(".toml"))
    return sorted(names, key=lambda n: n != DEFAULT_TARGET)


def list_targets() -> list[Target]:
    """Every built-in target, the default (``cpu``) first."""
    return [load_target(name) for name in builtin_names()]


def load_target(name_or_path: str | Path | Target = DEFAULT_TARGET) -> Target:
    """A built-in target by name, or a user's TOML file by path (a ``Target`` passes through)."""
    if isinstance(name_or_path, Target):
        return name_or_path
    text = str(name_or_path)
    names = builtin_names()
    if text in names:
        data = resources.files(__name__).joinpath(f"{text}.toml").read_text(encoding="utf-8")
        return parse_target(data, f"builtin:{text}", default_name=text)
    path = Path(text).expanduser()
    if path.suffix == ".toml" or path.exists():
        if not path.exists():
            raise UsageError(
                f"target file {path} does not exist",
                hint=f"pass a built-in target ({', '.join(names)}) or a path to a .toml file",
            )
        # A regular file of bounded size: a FIFO or /dev/zero named as a target is one line.
        return parse_target(read_user_text(path, "target file"), str(path), default_name=path.stem)
    raise unknown("target", text, names, also=" or a path to a .toml file", hint="list them with `edgekit targets`")


# Jetson L4T release -> JetPack, and what each JetPack ships (NVIDIA's JetPack archive and release
# notes). TensorRT's Python bindings come with JetPack for its system Python only.
L4T_JETPACK: dict[str, str] = {
    "35.2.1": "5.1",
    "35.3.1": "5.1.1",
    "35.4.1": "5.1.2",
    "35.5.0": "5.1.3",
    "35.6.0": "5.1.4",
    "36.2.0": "6.0 DP",
    "36.3.0": "6.0",
    "36.4.0": "6.1",
    "36.4.3": "6.2",
    "36.4.4": "6.2.1",
}


def jetpack_of(l4t: str | None) -> str | None:
    """The JetPack release of L4T ``l4t`` ("36.3.0" -> "6.0"), None when unknown."""
    return L4T_JETPACK.get(l4t or "")


def targets_for_l4t(l4t: str | None, like: Target) -> list[str]:
    """Built-in Jetson targets for the same board/GPU as ``like`` whose JetPack is ``l4t``'s."""
    names = []
    for target in list_targets():
        same_device = (
            target.trt.board == like.trt.board and target.trt.compute_capability == like.trt.compute_capability
        )
        if target.trt.jetson and same_device and target.trt.l4t and target.trt.l4t_matches(l4t):
            names.append(target.name)
    return names


__all__ = [
    "AihubSettings",
    "DEFAULT_TARGET",
    "POWER_PROBES",
    "SUPPORTED_OPS_SOURCES",
    "LintRules",
    "OpenVinoSettings",
    "QNN_PERFORMANCE_MODES",
    "OrtSettings",
    "ProfileFacts",
    "QUANTIZATION_PROFILES",
    "QnnSettings",
    "Target",
    "TrtSettings",
    "L4T_JETPACK",
    "builtin_names",
    "jetpack_of",
    "targets_for_l4t",
    "list_targets",
    "load_target",
    "parse_target",
]
