"""Deployment targets: TOML profiles shipped with edgekit (``cpu``, ``jetson-orin-nano``, …) or
a user's own file, loaded into one frozen ``Target``.

A target says which runtimes to try in order, which execution providers and options, which
precisions it runs, which quantization profile its INT8 model needs, which power probe measures
it, what its lint rules are and how edgekit is installed on it. Files are checked strictly: an
unknown key is an error listing the valid ones, a wrong type names the key. Nothing heavy is
imported here (TOML parsing is the standard library's ``tomllib``; ``tomli`` on Python 3.10).
"""

from __future__ import annotations

import collections.abc
import dataclasses
import re
import typing
from collections.abc import Mapping
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

from edgekit._deps import require
from edgekit.errors import UsageError
from edgekit.host import ISA_CLASSES
from edgekit.output import jsonable
from edgekit.targets.aihub import AihubSettings, check_aihub
from edgekit.targets.qnn import QNN_PERFORMANCE_MODES, QnnSettings, check_qnn
from edgekit.targets.quantization import QUANTIZATION_PROFILES, ProfileFacts
from edgekit.userfiles import read_user_text
from edgekit.vocabulary import PRECISIONS, TARGET_RUNTIMES

DEFAULT_TARGET = "cpu"
# The power probes a target may name (edgekit.probes.power implements each one).
POWER_PROBES: tuple[str, ...] = ("off", "auto", "nvml", "jetson", "tegrastats", "rapl", "android", "odpm", "rpi")
ARCHES: tuple[str, ...] = ("host", "x86_64", "aarch64")
ORT_FORMATS: tuple[str, ...] = ("onnx", "ort")
ORT_OPTIMIZATION_STYLES: tuple[str, ...] = ("runtime", "fixed")
SUPPORTED_OPS_SOURCES: tuple[str, ...] = ("ort", "tensorrt", "nnapi", "coreml", "openvino", "qnn")
# OpenVINO settings by edgekit name (same spellings as edgekit.runtimes.openvino.OvOptions).
OPENVINO_DEVICES: tuple[str, ...] = ("CPU", "GPU", "NPU")
OPENVINO_HINTS: tuple[str, ...] = ("LATENCY", "THROUGHPUT", "CUMULATIVE_THROUGHPUT")
OPENVINO_PRECISIONS: tuple[str, ...] = ("f32", "bf16", "f16", "default")
# ORT's graph optimization levels by edgekit name (same names as edgekit.runtimes.ort.OrtOptions).
GRAPH_OPTIMIZATIONS: tuple[str, ...] = ("disable", "basic", "extended", "all")


@dataclass(frozen=True)
class OrtSettings:
    # Priority order: ORT gives each node to the first provider that supports it.
    providers: tuple[str, ...] = ("CPUExecutionProvider",)
    # One table per provider, same order ({} = that provider's defaults); empty = all defaults.
    provider_options: tuple[Mapping[str, Any], ...] = ()
    # Level `edgekit build` bakes into the saved model. "all" adds layout transforms tuned to the
    # build machine's vector width (NCHWc), so only the host target uses it; cross-device targets
    # use "extended", whose fusions run on any CPU, and the device applies the rest at load.
    graph_optimization: str = "extended"
    # "onnx": an optimized .onnx; "ort": ORT's flatbuffer format for mobile/minimal builds, with
    # the required-operators config that a minimal ORT build is compiled from.
    format: str = "onnx"
    # .ort only: "runtime" applies basic optimizations and saves the rest to replay at load (what
    # ORT recommends when NNAPI/CoreML/QNN may take an unknown set of nodes); "fixed" bakes all.
    optimization_style: str = "runtime"


@dataclass(frozen=True)
class TrtSettings:
    # Builder scratch memory (MiB) for tactic selection; Jetsons share it with the CPU.
    workspace_mib: int = 1024
    # 0..5; -1 = TensorRT's default (3). Higher searches more tactics, builds slower.
    builder_optimization_level: int = -1
    # Engines for this target are built and run on a Jetson (L4T present): refuse elsewhere.
    jetson: bool = False
    # Compute capabilities the target's GPU has (e.g. "8.7"); empty = any NVIDIA GPU.
    compute_capability: tuple[str, ...] = ()
    # Substrings of /proc/device-tree/model naming the board (e.g. "Orin Nano"); empty = any.
    # Orin Nano and AGX Orin share compute capability 8.7, so only the board tells them apart.
    board: tuple[str, ...] = ()
    # Jetson: the JetPack release(s) the target is for ("6.1, 6.2"). One target per JetPack
    # where the TensorRT differs: an engine runs only on the TensorRT that built it, and 8.x
    # (JetPack 5, 6.0) parses older opsets and narrows INT64 IO.
    jetpack: str = ""
    # L4T releases the device must run, as prefixes of /etc/nv_tegra_release's "R36 ... 4.3"
    # -> "36.4.3" (e.g. ["36.4"]); empty = any.
    l4t: tuple[str, ...] = ()
    # What that JetPack ships (major.minor): TensorRT, CUDA, and the system Python its TensorRT
    # bindings are built for. "" = not fixed (an x86 host has what pip installed).
    tensorrt: str = ""
    cuda: str = ""
    python: str = ""

    def l4t_matches(self, l4t: str | None) -> bool:
        """Whether a Jetson running L4T ``l4t`` ("36.4.3") is this target's JetPack."""
        if not self.l4t:
            return True
        return l4t is not None and any(l4t == p or l4t.startswith(p + ".") for p in self.l4t)


@dataclass(frozen=True)
class OpenVinoSettings:
    # OpenVINO device: CPU (Core/Xeon/Atom), GPU (Arc, integrated), NPU (Core Ultra).
    device: str = "CPU"
    # INFERENCE_NUM_THREADS; 0 = the plugin's choice (`--threads N` overrides it).
    threads: int = 0
    # NUM_STREAMS; 0 = what the performance hint picks (1 for LATENCY).
    streams: int = 0
    # LATENCY for decode loops (one request at a time); THROUGHPUT for many concurrent ones.
    performance_hint: str = "LATENCY"
    # Inference precision of the int8 model's float parts (LayerNorm, softmax, attention core):
    # f32, bf16, f16, or "default" = the device's choice (bf16 on AMX CPUs, f16 on GPU/NPU).
    # The fp32 precision always runs f32, bf16 bf16, fp16 f16.
    inference_precision: str = "f32"


@dataclass(frozen=True)
class LintRules:
    # Every graph input/output dim fixed, no op whose output shape depends on data.
    static_shapes: bool = True
    # Largest TopK K the runtime accepts (TensorRT: 3839, it requires K < 3840); 0 = no limit.
    max_topk_k: int = 0
    # Memory an app may use for the model on this device (MB); 0 = unknown, not checked.
    memory_budget_mb: int = 0
    # Default-domain opset range the target's runtime reads.
    opset_min: int = 7
    opset_max: int = 21
    # Where op support comes from: "ort" (the CPU EP runs every standard op), "tensorrt"
    # (edgekit's copy of the ONNX-TensorRT support matrix), "nnapi"/"coreml" (onnxruntime's
    # mobile usability checker), "qnn" (compiling for the HTP with CPU fallback off).
    supported_ops: str = "ort"


@dataclass(frozen=True)
class Target:
    # Name used on the command line (`--target NAME`) and in engine keys (engines/<name>/).
    name: str
    # Runtimes to try in order: the first this host can run is used (ort | trt | qnn).
    runtimes: tuple[str, ...]
    # Precisions the target runs, preferred first (fp32 | fp16 | int8).
    precisions: tuple[str, ...]
    # One line for `edgekit targets`.
    description: str = ""
    # CPU architecture of the device; "host" = whatever runs edgekit (the default target).
    arch: str = "host"
    # The `edgekit quantize --profile` its INT8 model must come from (cpu | trt | qnn).
    quantization_profile: str = "cpu"
    # The CPU's int8 arithmetic class (edgekit.host.ISA_CLASSES: avx2, avx512-vnni, amx, arm64-dotprod,
    # ...): the cpu profile picks its scheme by it (arithmetic.py), lint checks an int8
    # model against it. "host" = the machine edgekit runs on (the local targets).
    isa: str = "host"
    # Power probe name as `edgekit profile --power` takes it (auto, nvml, jetson, android, rpi, …).
    power_probe: str = "auto"
    # Jetson power modes: log `nvpmodel -q` with every measurement.
    nvpmodel: bool = False
    # The exact line that installs edgekit on the device (printed when deploy finds none there).
    install: str = "python3 -m pip install edgekit"
    ort: OrtSettings = field(default_factory=OrtSettings)
    trt: TrtSettings = field(default_factory=TrtSettings)
    openvino: OpenVinoSettings = field(default_factory=OpenVinoSettings)
    qnn: QnnSettings = field(default_factory=QnnSettings)
    aihub: AihubSettings = field(default_factory=AihubSettings)
    lint: LintRules = field(default_factory=LintRules)
    # Where it was loaded from ("builtin:cpu" or a file path): for messages, not from the file.
    source: str = ""

    @property
    def profile_facts(self) -> ProfileFacts:
        """What its quantization profile means to lint and build (``QUANTIZATION_PROFILES``)."""
        return QUANTIZATION_PROFILES[self.quantization_profile]

    @property
    def uses_trt(self) -> bool:
        return "trt" in self.runtimes

    @property
    def uses_openvino(self) -> bool:
        return "openvino" in self.runtimes

    @property
    def uses_qnn(self) -> bool:
        return "qnn" in self.runtimes

    def to_json(self) -> dict[str, Any]:
        return jsonable(dataclasses.asdict(self))


# ---------------------------------------------------------------------------------------------
# Loading


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
    raise UsageError(
        f"target {text!r} is unknown; valid: {', '.join(names)} or a path to a .toml file",
        hint="list them with `edgekit targets`",
    )


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
            f"target file {source}: trt.builder_optimization_level = {t.trt.builder_optimization_level} is invalid; valid: -1 (default) or 0..5"
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
