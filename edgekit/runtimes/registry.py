"""One entry per runtime name: how it opens for a bundle and a precision, the precisions it runs,
which bundle artifact it loads for each, what it needs installed, its one-line help, and (for a
runtime a target can list) how its engines are chosen, checked and opened.

Each backend registers itself with one ``register_backend(...)`` call in its own module
(importing ``edgekit.runtimes`` imports the built-in ones); everything else reads this table:
``open_runtime``, ``runtimes.engines``, profile's and check's variants, debug's taps, quantize's
budget runtime, ``doctor``, and the CLI's ``--runtime``/``--precision`` choices and help. The
names and precisions themselves are the hallway's vocabulary (``edgekit.vocabulary``).
Importing this module imports nothing heavy: an entry's functions import their dependency when
they run.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from edgekit.errors import UsageError, unknown
from edgekit.host import module_available
from edgekit.vocabulary import PRECISION_NOTES, PRECISIONS

if TYPE_CHECKING:  # types only: the registry imports no backend
    from pathlib import Path

    from edgekit.bundle import Bundle, EngineRecord
    from edgekit.runtimes.base import Runtime


@dataclass(frozen=True)
class Requirement:
    """What must be importable for a runtime to run, and the line that installs it."""

    module: str  # import name, e.g. "onnxruntime_qnn"
    install: str  # the exact install line, e.g. "pip install 'edgekit[qnn]'"
    extra: str | None = None  # the edgekit extra that brings it (None: not an edgekit extra)

    def available(self) -> bool:
        return module_available(self.module)


@dataclass(frozen=True)
class EngineHooks:
    """How ``runtimes.engines`` treats a target's engine of this runtime (targets may list the
    runtime only when it has these)."""

    # (target, host, precision) -> (why this host skips the runtime for the target, or None;
    # notes for the report). May raise MissingDependency where skipping would hide the cause.
    check_host: Callable[[Any, Any, str], tuple[str | None, list[str]]]
    # (engine file, the bundle's record of it, host, target or None, device facts a stage already
    # read or None) -> every reason the built engine cannot be loaded here.
    problems: Callable[[Any, EngineRecord, Any, Any, Any], list[str]]
    # (runtimes.engines.EngineChoice, threads) -> the ready Runtime.
    open: Callable[[Any, int], Runtime]
    # True: with no engine built, the target runs the bundle's own model (``artifacts``);
    # False: an engine must be built first (TensorRT).
    runs_unbuilt: bool = True


@dataclass(frozen=True)
class FileOptions:
    """How a stage opens one ONNX file on a backend (``Backend.open_file``): a fused graph, a step
    bucket's graph, a quantize candidate, debug's copy with tensors added as outputs."""

    precision: str = "fp32"  # what the file computes in (OpenVINO: its inference precision; QNN fp16)
    threads: int = 0  # intra-op threads; 0 = the runtime's default
    # One of several sessions that take turns in one decode (step buckets): ORT's threads stop
    # spinning when a run returns and the sessions share one arena (``runtimes.ort.taking_turns``).
    shared: bool = False
    spin: bool = True  # ORT: threads spin between runs (False where other work runs in between)
    target: str | None = None  # a target name or TOML whose options the file compiles with (QNN: HTP arch, SoC)
    scratch: Path | None = None  # a folder for what opening builds (TensorRT: the engine); None = the file's
    # ORT/QNN: outputs written into two preallocated output sets (decode loops allocate nothing).
    # False: fresh arrays per run; debug's tapped copies, whose outputs are every tensor of the
    # graph (4.5 GiB of float tensors a call at aMUSEd-256, by their inferred shapes), would
    # otherwise hold two such sets per session.
    io_binding: bool = True


@dataclass(frozen=True)
class DebugHooks:
    """What ``edgekit debug`` needs of a backend to capture the tensors a variant computes (a
    backend without it is refused by ``debug``): an ONNX backend runs a copy of the graph with the
    tensors as extra outputs through ``Backend.open_file``; one that runs the module itself hooks it."""

    capture: str  # one line for the debug document (``capture``): how the tensors come out
    # A backend without an ONNX graph (torch): (bundle, precision, threads, {module path: the
    # tensor its output stands for}) -> (a Runtime whose ``run`` also returns each hooked
    # module's output under that tensor's name, the tensors it hooked).
    open_hooked: Callable[[Bundle, str, int, Mapping[str, str]], tuple[Runtime, tuple[str, ...]]] | None = None
    # With a target, True: the variant is the bundle's model opened with the target's options
    # (``FileOptions.target``), not the target's built engine, so the tapped copy and the plain
    # variant compile alike (the QNN HTP's arch and SoC).
    target_options: bool = False
    # Its int8 MatMul/Gemm run MLAS's u8·s8 kernels, whose accumulation ``arithmetic`` models per
    # CPU class: debug's attribution takes the accumulation apart.
    mlas_kernels: bool = False


@dataclass(frozen=True)
class Backend:
    """One runtime. ``open(bundle, precision, threads)`` gets a precision from ``precisions``."""

    name: str  # what --runtime takes and manifests record
    title: str  # its name in sentences ("ONNX Runtime", "TensorRT")
    help: str  # one line for --runtime help: what it is
    precisions: tuple[str, ...]  # the precisions it runs, from vocabulary.PRECISIONS
    open: Callable[[Bundle, str, int], Runtime]
    requires: Requirement
    # precision -> the bundle artifact it loads ({}: none, e.g. the PyTorch module or a built engine)
    artifacts: Mapping[str, str] = field(default_factory=dict)
    # Why the precisions it lacks are missing (said in the error that refuses one).
    lacks: str = ""
    # (bundle, precision) -> raise when the artifact cannot run here (e.g. the HTP refuses an int8
    # model of another quantization profile); None = any artifact of the precision runs.
    check_artifact: Callable[[Bundle, str], None] | None = None
    # Any ONNX file of the bundle's model: (file, FileOptions) -> Runtime (fused graphs, quantize's
    # budget candidates, debug's tapped copies); None: it opens no ONNX file itself.
    open_file: Callable[[Path, FileOptions], Runtime] | None = None
    # The precisions it runs fused graphs (export --graph, fp32 ONNX) in through ``open_file``.
    graph_precisions: tuple[str, ...] = ()
    # A backend that runs a torch module itself: (module, inputs, outputs) -> Runtime at the
    # framework's default threads (profile's length sweep times architecture-only modules so).
    open_module: Callable[[Any, Mapping[str, Any], Mapping[str, Any]], Runtime] | None = None
    engine: EngineHooks | None = None
    debug: DebugHooks | None = None
    # The quantize profile whose int8 model it runs (``quantize --profile``: its hints name it);
    # None: any profile's.
    quantize_profile: str | None = None
    # It runs as jobs on a device cloud's hosted devices, never in this process (AI Hub): the
    # commands that drive it take the devices (``--devices``) and branch to its own modules.
    hosted: bool = False
    # Side-by-side ratios put the deployment candidate over its reference: 0 = a device runtime
    # (TensorRT, the NPU), higher = more of a reference (ORT 2, the torch eager module 3).
    reference_rank: int = 0

    def artifact(self, bundle: Bundle, precision: str) -> str:
        """The bundle artifact this runtime loads in ``precision`` (checked for this runtime)."""
        check_precision(self.name, precision)
        name = self.artifacts[precision]
        if self.check_artifact is not None:
            self.check_artifact(bundle, precision)
        return name


_BACKENDS: dict[str, Backend] = {}


def register_backend(backend: Backend, *, replace: bool = False) -> Backend:
    """Add ``backend`` under its name (a second one of that name is refused unless ``replace``)."""
    bad = [p for p in backend.precisions if p not in PRECISIONS]
    if bad or not backend.precisions:
        raise ValueError(
            f"backend {backend.name!r}: precisions {list(backend.precisions)} must be some of {', '.join(PRECISIONS)}"
        )
    missing = [p for p in backend.artifacts if p not in backend.precisions]
    if missing:
        raise ValueError(f"backend {backend.name!r}: artifacts for precisions it does not run: {missing}")
    if backend.graph_precisions and backend.open_file is None:
        raise ValueError(
            f"backend {backend.name!r}: graph_precisions {list(backend.graph_precisions)} without open_file"
        )
    if backend.debug is not None and backend.open_file is None and backend.debug.open_hooked is None:
        raise ValueError(
            f"backend {backend.name!r}: debug taps a copy of the graph through open_file, "
            "or the module through open_hooked"
        )
    if backend.name in _BACKENDS and not replace:
        raise ValueError(f"a backend named {backend.name!r} is already registered")
    _BACKENDS[backend.name] = backend
    return backend


def unregister_backend(name: str) -> None:
    """Remove a registered backend (a plugin's, in tests)."""
    _BACKENDS.pop(name, None)


def names() -> tuple[str, ...]:
    """Every registered runtime name: the built-in ones in vocabulary order, then plugins."""
    return tuple(_BACKENDS)


def backends() -> tuple[Backend, ...]:
    return tuple(_BACKENDS.values())


def backend(name: str, flag: str = "--runtime") -> Backend:
    """The entry of runtime ``name``; an unknown name is the one error listing the valid ones."""
    found = _BACKENDS.get(name)
    if found is None:
        raise unknown(flag, name, _BACKENDS)
    return found


def check_runtimes(values: tuple[str, ...] | list[str], flag: str = "--runtime") -> tuple[str, ...]:
    """``values`` when every one is a registered runtime and there is at least one."""
    if not values:
        raise UsageError(f"{flag} is empty; valid: {', '.join(_BACKENDS)}")
    for v in values:
        backend(v, flag)
    return tuple(values)


def check_precisions(
    values: tuple[str, ...] | list[str], flag: str = "--precision", also: tuple[str, ...] = ()
) -> tuple[str, ...]:
    """``values`` when every one is a precision of the vocabulary (or one of a command's own
    values ``also``, e.g. build's "auto")."""
    valid = (*PRECISIONS, *also)
    bad = [v for v in values if v not in valid]
    if bad:
        raise unknown(flag, bad[0], valid)
    return tuple(values)


def check_precision(name: str, precision: str) -> Backend:
    """The entry of ``name`` when it runs ``precision``; otherwise the one error saying which
    precisions it runs and which runtimes run ``precision``."""
    b = backend(name)
    check_precisions([precision])
    if precision not in b.precisions:
        others = runs(precision)
        raise UsageError(
            f"--runtime {name} has no {precision}"
            + (f" ({b.lacks})" if b.lacks else "")
            + f"; valid: {', '.join(b.precisions)}",
            hint=f"use --precision {' or '.join(b.precisions)}"
            + (f", or --runtime {' or '.join(others)} for {precision}" if others else ""),
        )
    return b


def runs(precision: str) -> list[str]:
    """The registered runtimes that run ``precision``."""
    return [n for n, b in _BACKENDS.items() if precision in b.precisions]


def runtime_help() -> str:
    """``ort (ONNX Runtime ...) | torch (...; edgekit[export]) | ...``: every registered runtime
    with its line and the extra it needs."""
    return " | ".join(
        f"{b.name} ({b.help}" + (f"; edgekit[{b.requires.extra}]" if b.requires.extra else "") + ")"
        for b in _BACKENDS.values()
    )


def precision_help() -> str:
    """``fp32 (...; ort, torch, ...) | ...``: every precision, what it is and who runs it."""
    return " | ".join(f"{p} ({PRECISION_NOTES[p]}; {', '.join(runs(p)) or 'no runtime'})" for p in PRECISIONS)


__all__ = [
    "Backend",
    "DebugHooks",
    "EngineHooks",
    "FileOptions",
    "Requirement",
    "backend",
    "backends",
    "check_precision",
    "check_precisions",
    "check_runtimes",
    "names",
    "precision_help",
    "register_backend",
    "runs",
    "runtime_help",
    "unregister_backend",
]
