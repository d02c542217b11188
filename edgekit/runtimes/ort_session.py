"""How edgekit makes an ONNX Runtime session: ``OrtOptions`` (providers, threads, optimization
level, spinning, the shared arena, edgekit's graph changes), the ``SessionOptions`` they make,
the graph in memory with edgekit's contrib fusions (``runtimes/ort_fusions.py``), the session
itself with its load errors said in one line, and the environment's shared arena.

``ort.OrtRuntime`` (and ``qnn.QnnRuntime``) open their sessions through here."""

from __future__ import annotations

import threading
from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from edgekit._deps import require
from edgekit.errors import EdgekitError, TargetUnavailable, UsageError, one_of
from edgekit.limits import MAX_THREADS
from edgekit.runtimes.ort_fusions import apply_contrib_fusions, graph_changes

# OrtOptions.graph_optimization -> onnxruntime.GraphOptimizationLevel member.
GRAPH_OPTIMIZATION_LEVELS: dict[str, str] = {
    "disable": "ORT_DISABLE_ALL",
    "basic": "ORT_ENABLE_BASIC",
    "extended": "ORT_ENABLE_EXTENDED",
    "all": "ORT_ENABLE_ALL",
}

# onnxruntime exception names that mean "this file is not a model ORT can load".
_LOAD_ERRORS = ("InvalidProtobuf", "InvalidGraph", "NoModel", "Fail", "InvalidArgument", "NotImplemented")


# More threads than any board has cores only costs thread creation (100,000 hung session setup):
# limits.MAX_THREADS, the bound of every --threads.


@dataclass(frozen=True)
class OrtOptions:
    # Priority order; ORT assigns each node to the first provider that supports it. A name that
    # this onnxruntime build lacks is dropped with a warning (a typo must not silently mean CPU).
    providers: tuple[str, ...] = ("CPUExecutionProvider",)
    # One mapping per provider, same order (e.g. {"device_id": 0} for CUDA); None = defaults.
    provider_options: tuple[Mapping[str, Any], ...] | None = None
    # 0 = ORT default (one thread per physical core); pin lower on shared or thermally limited boards.
    intra_op_threads: int = 0
    # Only matters in parallel execution mode; 0 = ORT default.
    inter_op_threads: int = 0
    # disable|basic|extended|all. "all" adds hardware-specific fusions, so a model saved with it
    # (optimized_model_path) only runs on the same kind of machine.
    graph_optimization: str = "all"
    # ORT writes the optimized graph here when the session is created: a cache that skips
    # optimization at the next load (mobile/offline). None = write nothing.
    optimized_model_path: str | None = None
    # Bind preallocated outputs once and reuse them every run (no per-step allocation in decode
    # loops); False = plain session.run with fresh arrays per call.
    io_binding: bool = True
    # Apply edgekit's contrib-op fusions (runtimes/ort_fusions.py: tanh GELU -> FastGelu) to the
    # graph in memory before the session is created, when every provider implements them (CPU,
    # CUDA). The file on disk is never changed. False = the file exactly as written.
    contrib_fusions: bool = True
    # ORT graph transformers to switch off, by name. None = edgekit's measured choice: on a
    # CPU-only session the ones in ort_fusions.CPU_DISABLED_OPTIMIZERS (slower on ORT's CPU
    # kernels), none otherwise.
    disabled_optimizers: tuple[str, ...] | None = None
    # Session config entries (key, value) as an app adds them (``add_session_config_entry``):
    # what a built engine's entry says its file needs (``session_options.config_entries``).
    session_config: tuple[tuple[str, str], ...] = ()
    # ORT's per-node profiler: every run's kernel times go to a JSON trace (chrome://tracing
    # format) that ``end_profiling()`` closes and names; for finding which op dominates.
    profiling: bool = False
    # ORT's intra-op threads busy-wait for work (inside a run, between its parallel sections, and
    # for tens of ms after it returns: about 50 ms of a core measured, AMD EPYC). False: idle
    # threads sleep at once; every parallel section then pays a wake-up (measured 1.08x a spinning
    # session's decode time, flow demo, AVX2).
    allow_spinning: bool = True
    # False: spin inside a run only, stopping when it returns (ORT's ``session.force_spinning_stop``).
    # For sessions that take turns inside one decode (step buckets): a session's threads still
    # spinning after its run take the cores of the next session's (flow demo, 4 buckets: 1.6x one
    # session's decode time spinning after runs, 1.1-1.2x not spinning at all, 1.04x spinning in runs).
    spin_between_runs: bool = True
    # Take tensor memory from ONE arena registered with ORT's environment, shared by every session
    # of the process that asks, instead of an arena per session: for sessions that take turns inside
    # one decode (step buckets), each of which would otherwise keep an arena sized for a whole
    # forward. Flow demo, 4 buckets: 2.3x one session's memory with an arena each, 1.15x shared.
    shared_arena: bool = False

    def __post_init__(self) -> None:
        if isinstance(self.providers, str) or not self.providers:
            raise UsageError(f"providers must be a non-empty sequence of names, got {self.providers!r}")
        object.__setattr__(self, "providers", tuple(self.providers))
        if self.provider_options is not None:
            object.__setattr__(self, "provider_options", tuple(self.provider_options))
            if len(self.provider_options) != len(self.providers):
                raise UsageError(
                    f"provider_options has {len(self.provider_options)} entries for "
                    f"{len(self.providers)} providers {list(self.providers)}; give one mapping per provider"
                )
        one_of("graph_optimization", self.graph_optimization, GRAPH_OPTIMIZATION_LEVELS)
        for field_name in ("intra_op_threads", "inter_op_threads"):
            value = getattr(self, field_name)
            if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_THREADS:
                raise UsageError(
                    f"{field_name} (--threads) must be an int in [0, {MAX_THREADS}] (0 = ORT default), got {value!r}"
                )


def make_session_options(ort: Any, options: OrtOptions) -> Any:
    """The ``onnxruntime.SessionOptions`` ``options`` ask for: threads, optimization level,
    profiling, the shared arena, spinning, config entries, where the optimized graph goes."""
    session_options = ort.SessionOptions()
    session_options.intra_op_num_threads = options.intra_op_threads
    session_options.inter_op_num_threads = options.inter_op_threads
    session_options.graph_optimization_level = getattr(
        ort.GraphOptimizationLevel, GRAPH_OPTIMIZATION_LEVELS[options.graph_optimization]
    )
    session_options.enable_profiling = options.profiling
    if options.shared_arena:
        _register_env_arena(ort)
        session_options.add_session_config_entry("session.use_env_allocators", "1")
    if not options.allow_spinning:
        session_options.add_session_config_entry("session.intra_op.allow_spinning", "0")
        session_options.add_session_config_entry("session.inter_op.allow_spinning", "0")
    elif not options.spin_between_runs:
        session_options.add_session_config_entry("session.force_spinning_stop", "1")
    for key, value in options.session_config:
        session_options.add_session_config_entry(str(key), str(value))
    if options.optimized_model_path is not None:
        Path(options.optimized_model_path).parent.mkdir(parents=True, exist_ok=True)
        session_options.optimized_model_filepath = str(options.optimized_model_path)
    return session_options


def fused_model(path: Path, providers: list[str], options: OrtOptions) -> tuple[bytes | None, dict[str, int]]:
    """(the serialized graph with edgekit's contrib fusions, {fusion: count}); (None, {}) when the
    fusions are off, a provider lacks the contrib ops, nothing matched, or the file does not parse
    (the session then reports that in its own words). Weights in external files stay there: the
    session reads them from the model's folder (a session option OrtRuntime sets), so sessions over one weights
    file (step buckets) share its mapped pages. (Skipping the fusion for such models made a
    bucketed masked demo decode 1.13x slower than its one-scale twin, which had it.)"""
    if not options.contrib_fusions or not graph_changes(providers).contrib_fusions:
        return None, {}
    onnx = require("onnx")
    try:
        model = onnx.load(str(path), load_external_data=False)
    except Exception:  # noqa: BLE001 - not a model (or an .ort file): create_session says so in one line
        return None, {}
    fused = apply_contrib_fusions(model)
    return (model.SerializeToString(), fused) if fused else (None, {})


def create_session(
    ort: Any,
    path: Path,
    session_options: Any,
    providers: list[str],
    provider_options: Any,
    *,
    model: bytes | None = None,
    disabled: tuple[str, ...] = (),
) -> Any:
    state = ort.capi.onnxruntime_pybind11_state
    load_errors = tuple(getattr(state, n) for n in _LOAD_ERRORS if hasattr(state, n))
    try:
        return ort.InferenceSession(
            model if model is not None else str(path),
            sess_options=session_options,
            providers=providers,
            provider_options=provider_options,
            disabled_optimizers=list(disabled) or None,
        )
    except getattr(state, "EPFail", ()) as exc:
        raise TargetUnavailable(
            f"ort: an execution provider in {providers} failed to start for {path}: {str(exc).splitlines()[0][:300]}",
            hint="check that provider's libraries (CUDA, cuDNN, ...) or drop it from the target",
        ) from None
    except load_errors as exc:
        first_line = next((line for line in str(exc).splitlines() if line.strip()), type(exc).__name__)
        raise EdgekitError(
            f"ort: {path} is not a model ONNX Runtime can load: {first_line[:300]}",
            hint="re-export it (edgekit export)",
        ) from None


# What ONNX Runtime raises when a run fails on what it was fed (an index past a Gather's table, a
# shape the graph cannot broadcast): its own pybind types from ``session.run``, a RuntimeError from
# ``run_with_iobinding``.
_RUN_ERRORS = ("Fail", "InvalidArgument", "RuntimeException")


def run_errors(ort: Any) -> tuple[type[BaseException], ...]:
    """The exception types a failed ``session.run`` / ``run_with_iobinding`` raises."""
    state = ort.capi.onnxruntime_pybind11_state
    return (RuntimeError, *(getattr(state, n) for n in _RUN_ERRORS if hasattr(state, n)))


def run_failed(path: Path, exc: BaseException) -> EdgekitError:
    """One line for a run that ONNX Runtime refused: the op and its message, and what to check."""
    text = " ".join(line.strip() for line in str(exc).splitlines() if line.strip()) or type(exc).__name__
    return EdgekitError(
        f"ort: running {path.name} failed: {text[:400]}",
        hint="the values fed are outside what the graph accepts: check the conditions (--cond, --cond-data, "
        "the bundle's io low/high) and the decode options, or re-export the model",
    )


def taking_turns(options: OrtOptions, shared: bool = True) -> OrtOptions:
    """``options`` for one of several sessions that take turns inside one decode (``shared``; step
    buckets): threads that stop spinning when a run returns, and one environment arena for all of
    them. ``options`` unchanged for a session that runs alone."""
    return replace(options, spin_between_runs=False, shared_arena=True) if shared else options


# ---- the environment's shared arena (OrtOptions.shared_arena) ---------------------------------
_ENV_ARENA: list[bool] = []  # [True] once registered in this process
_ENV_ARENA_LOCK = threading.Lock()


def _register_env_arena(ort: Any) -> None:
    """Register one CPU arena with ORT's environment, once per process (ORT's default arena
    settings); sessions opt in with ``session.use_env_allocators``."""
    with _ENV_ARENA_LOCK:
        if not _ENV_ARENA:
            cpu = ort.OrtMemoryInfo("Cpu", ort.OrtAllocatorType.ORT_ARENA_ALLOCATOR, 0, ort.OrtMemType.DEFAULT)
            ort.create_and_register_allocator(cpu, None)
            _ENV_ARENA.append(True)
