"""ONNX Runtime backend: one ``InferenceSession`` behind the ``Runtime`` protocol.

Steady state allocates no tensor memory: with ``io_binding`` the outputs live in two preallocated
sets of arrays, each wrapped once as ``OrtValue``s (same memory). Run N writes set N mod 2, so an
output stays valid through the next ``run`` (``outputs_stay_valid = 2``) and a decode loop can
feed it straight back as the next step's input (ping-pong: the KV cache, a fused graph's tokens
or x) — such a feed is bound by its existing ``OrtValue``, with no copy and no new wrapper.
Callers that keep an output longer must copy it.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

from edgekit._deps import require
from edgekit.errors import EdgekitError, TargetUnavailable, UsageError
from edgekit.limits import MAX_THREADS
from edgekit.manifest_sections import EngineRecord
from edgekit.runtimes._specs import ort_session_specs
from edgekit.runtimes.base import BaseRuntime, model_files_of
from edgekit.runtimes.bucketed import open_artifact
from edgekit.runtimes.engines import cross_arch_notes
from edgekit.runtimes.ort_fusions import apply_contrib_fusions, engine_session_options, graph_changes
from edgekit.runtimes.registry import Backend, DebugHooks, EngineHooks, FileOptions, Requirement, register_backend

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
        if self.graph_optimization not in GRAPH_OPTIMIZATION_LEVELS:
            raise UsageError(
                f"graph_optimization {self.graph_optimization!r} is unknown; "
                f"valid: {', '.join(GRAPH_OPTIMIZATION_LEVELS)}"
            )
        for field_name in ("intra_op_threads", "inter_op_threads"):
            value = getattr(self, field_name)
            if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_THREADS:
                raise UsageError(
                    f"{field_name} (--threads) must be an int in [0, {MAX_THREADS}] (0 = ORT default), got {value!r}"
                )


class OrtRuntime(BaseRuntime):
    """A model file run by ONNX Runtime.

    ``providers_used`` is what the session actually runs with; ``device`` its first entry.
    ``session`` is the underlying ``InferenceSession`` for advanced use.
    """

    name = "ort"

    def __init__(self, model_path: str | Path, options: OrtOptions = OrtOptions()):
        super().__init__({}, {})
        ort = require("onnxruntime")
        self.model_path = Path(model_path)
        self.options = options
        _check_model_file(self.model_path)
        self.model_files = model_files_of(self.model_path)

        providers, provider_options = self._available_providers(ort, options)
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
        model, self.fusions = _fused_model(self.model_path, providers, options)
        if model is not None:  # the graph comes from memory: its external weights resolve against the model's folder
            session_options.add_session_config_entry(
                "session.model_external_initializers_file_folder_path", str(self.model_path.parent)
            )
        disabled = options.disabled_optimizers
        if disabled is None:
            disabled = graph_changes(providers).disabled_optimizers
        self.disabled_optimizers: tuple[str, ...] = tuple(disabled)
        self.session = _create_session(
            ort,
            self.model_path,
            session_options,
            providers,
            provider_options,
            model=model,
            disabled=self.disabled_optimizers,
        )

        self.providers_used: list[str] = list(self.session.get_providers())
        self.device = self.providers_used[0]
        failed = [p for p in providers if p not in self.providers_used]
        if failed:
            # Listed as available but failed to initialize (missing CUDA/cuDNN libraries, ...):
            # ORT then quietly runs those nodes elsewhere.
            self.warn(
                f"ort: providers {failed} failed to initialize for {self.model_path}; "
                f"the session runs with {self.providers_used} (check that provider's libraries)"
            )
        self.inputs, self.outputs = ort_session_specs(self.session, self.model_path)
        self._prepare_binding(ort, options.io_binding)

    def _prepare_binding(self, ort: Any, io_binding: bool) -> None:
        """The two preallocated output sets and their OrtValues (``io_binding``), or plain runs."""
        self._binding: Any = None
        # Two output sets (ping-pong), their OrtValues, and id(array) -> (OrtValue, set) of all of them.
        self._output_sets: list[dict[str, np.ndarray]] = []
        self._output_values: list[dict[str, Any]] = []
        # (ids stay unique: the arrays live as long as the runtime)
        self._own: dict[int, tuple[Any, int]] = {}
        self._parity = 0
        if io_binding:
            self._binding = self.session.io_binding()
            for which in range(2):
                buffers, values = {}, {}
                for name, spec in self.outputs.items():
                    buffer = np.empty(spec.shape, dtype=spec.dtype)  # (spec.shape) reused every other run
                    # The OrtValue wraps the numpy memory (no copy): ORT writes results straight into it.
                    values[name] = ort.OrtValue.ortvalue_from_numpy(buffer)
                    buffers[name] = buffer
                    self._own[id(buffer)] = (values[name], which)
                self._output_sets.append(buffers)
                self._output_values.append(values)  # the binding must never see freed memory

    # An output array survives the next ``run`` too: double-buffered with IOBinding, fresh arrays without.
    outputs_stay_valid = 2

    def _available_providers(self, ort: Any, options: OrtOptions) -> tuple[list[str], list[Mapping[str, Any]] | None]:
        available = list(ort.get_available_providers())
        keep = [i for i, p in enumerate(options.providers) if p in available]
        missing = [p for p in options.providers if p not in available]
        if not keep:
            raise TargetUnavailable(
                f"ort: none of the requested execution providers {list(options.providers)} is available "
                f"in this onnxruntime build; available: {available}",
                hint="use an available provider in the target, or install the onnxruntime package "
                "that has it (e.g. onnxruntime-gpu for CUDAExecutionProvider)",
            )
        if missing:
            self.warn(
                f"ort: execution providers {missing} are not available in this onnxruntime build "
                f"(available: {available}); dropping them and running with "
                f"{[options.providers[i] for i in keep]}"
            )
        providers = [options.providers[i] for i in keep]
        if options.provider_options is None:
            return providers, None
        return providers, [dict(options.provider_options[i]) for i in keep]

    def _run_impl(self, feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        if self._binding is None:
            results = self.session.run(list(self.outputs), dict(feeds))
            return dict(zip(self.outputs, results))
        write = self._parity
        kept = []  # bind_cpu_input reads the arrays during run_with_iobinding: keep copies alive
        for name in self.inputs:
            array = feeds[name]
            own = self._own.get(id(array))
            if own is not None and own[1] != write:
                self._binding.bind_ortvalue_input(name, own[0])  # ping-pong: last run's output, as is
                continue
            if own is not None:
                array = array.copy()  # an output of the set this run overwrites: read a copy
            array = np.ascontiguousarray(array)
            kept.append(array)
            self._binding.bind_cpu_input(name, array)
        for name, value in self._output_values[write].items():
            self._binding.bind_ortvalue_output(name, value)
        self.session.run_with_iobinding(self._binding)
        self._binding.synchronize_outputs()
        self._parity ^= 1
        return dict(self._output_sets[write])

    def end_profiling(self) -> Path:
        """Stop ORT's profiler (``OrtOptions(profiling=True)``); the trace file it wrote."""
        if not self.options.profiling:
            raise UsageError("end_profiling() needs OrtOptions(profiling=True)")
        return Path(self.session.end_profiling())

    def _close_impl(self) -> None:
        self._binding = None
        self._output_sets = []
        self._output_values = []
        self._own = {}
        self.session = None


def _check_model_file(path: Path) -> None:
    if not path.is_file():
        raise EdgekitError(f"ort: model file {path} does not exist", hint="check the path, or run edgekit export")
    if path.stat().st_size == 0:
        raise EdgekitError(f"ort: model file {path} is empty (0 bytes)", hint="re-export it (edgekit export)")


def _fused_model(path: Path, providers: list[str], options: OrtOptions) -> tuple[bytes | None, dict[str, int]]:
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
    except Exception:  # noqa: BLE001 - not a model (or an .ort file): _create_session says so in one line
        return None, {}
    fused = apply_contrib_fusions(model)
    return (model.SerializeToString(), fused) if fused else (None, {})


def _create_session(
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


# ---- the registry entry -----------------------------------------------------------------------
def _open_file(path: Path, o: FileOptions) -> OrtRuntime:
    return OrtRuntime(path, taking_turns(OrtOptions(intra_op_threads=o.threads, spin_between_runs=o.spin), o.shared))


def _check_host(target: Any, host: Any, precision: str) -> tuple[str | None, list[str]]:
    if precision in ("fp16", "bf16"):
        return f"ONNX Runtime runs fp32 and int8 models only, not {precision}", []
    return None, cross_arch_notes(target, host)


def _engine_problems(path: Path, entry: EngineRecord, host: Any, target: Any, facts: Any) -> list[str]:
    ort = require("onnxruntime")
    problems = []
    built = str(entry.runtime_version or "0")
    if _version_tuple(ort.__version__) < _version_tuple(built):
        # Newer ORT reads older optimized graphs and .ort files, not the other way round.
        problems.append(f"ONNX Runtime version: built with {built}, this host has older {ort.__version__}")
    if not entry.portable and entry.device != host.cpu_key:
        problems.append(f"device: optimized for {entry.device}, this host is {host.cpu_key}")
    return problems


def _open_engine(choice: Any, threads: int) -> OrtRuntime:
    ort = choice.target.ort
    options = OrtOptions(
        providers=ort.providers, provider_options=ort.provider_options or None, intra_op_threads=threads
    )
    recorded = choice.session_options
    if recorded:
        # The built file carries edgekit's graph changes: open it exactly as its entry tells an
        # app to (same graph, same outputs as the app's plain session), nothing more in memory.
        options = replace(options, **engine_session_options(recorded))
    runtime = OrtRuntime(choice.path, taking_turns(options, bool(choice.bucket_paths)))
    if choice.built and not recorded:
        runtime.warn(
            f"engine {choice.key} was built by an older edgekit: its file lacks the graph changes edgekit applies "
            "in memory (an app's plain session on it runs slower than `edgekit run`); rebuild it with --rebuild"
        )
    return runtime


def _version_tuple(version: str) -> tuple[int, ...]:
    parts = []
    for piece in version.split("+")[0].split("."):
        digits = "".join(c for c in piece if c.isdigit())
        parts.append(int(digits) if digits else 0)
    return tuple(parts)


ARTIFACTS = {"fp32": "fp32", "int8": "int8"}
register_backend(
    Backend(
        name="ort",
        title="ONNX Runtime",
        help="ONNX Runtime on the CPU",
        precisions=("fp32", "int8"),
        artifacts=ARTIFACTS,
        lacks="ONNX Runtime runs fp32 or int8 bundles",
        open=lambda bundle, precision, threads: open_artifact(
            bundle,
            ARTIFACTS[precision],
            lambda path, shared: OrtRuntime(path, taking_turns(OrtOptions(intra_op_threads=threads), shared)),
        ),
        open_file=_open_file,
        graph_precisions=("fp32",),
        requires=Requirement("onnxruntime", "pip install onnxruntime"),
        reference_rank=2,
        engine=EngineHooks(check_host=_check_host, problems=_engine_problems, open=_open_engine),
        # Tensors are matched by name between the float and the QDQ graph, as onnxruntime's
        # ``quantization.qdq_loss_debug`` matches them (the quantizer keeps the names it does not create).
        debug=DebugHooks(
            capture="graph outputs added to a copy of the ONNX, run by onnxruntime with its own kernels and fusions",
            mlas_kernels=True,
        ),
    )
)
