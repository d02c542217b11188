"""ONNX Runtime backend: one ``InferenceSession`` behind the ``Runtime`` protocol.

Steady state allocates no tensor memory: with ``io_binding`` the outputs live in two preallocated
sets of arrays, each wrapped once as ``OrtValue``s (same memory). Run N writes set N mod 2, so an
output stays valid through the next ``run`` (``outputs_stay_valid = 2``) and a decode loop can
feed it straight back as the next step's input (ping-pong: the KV cache, a fused graph's tokens
or x) — such a feed is bound by its existing ``OrtValue``, with no copy and no new wrapper.
Callers that keep an output longer must copy it.

How the session is made (``OrtOptions``, its ``SessionOptions``, the fused graph, load errors,
the shared arena) is ``runtimes/ort_session.py``; ``OrtOptions``, ``GRAPH_OPTIMIZATION_LEVELS``
and ``taking_turns`` are importable from here as well.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

from edgekit._deps import require
from edgekit.errors import TargetUnavailable, UsageError
from edgekit.manifest_sections import EngineRecord
from edgekit.runtimes._specs import ort_session_specs
from edgekit.runtimes.base import BaseRuntime, check_model_file, model_files_of
from edgekit.runtimes.bucketed import open_artifact
from edgekit.runtimes.engines import cross_arch_notes
from edgekit.runtimes.ort_fusions import engine_session_options, graph_changes
from edgekit.runtimes.ort_session import (
    GRAPH_OPTIMIZATION_LEVELS,
    OrtOptions,
    create_session,
    fused_model,
    make_session_options,
    run_errors,
    run_failed,
    taking_turns,
)
from edgekit.runtimes.registry import Backend, DebugHooks, EngineHooks, FileOptions, Requirement, register_backend

# Callers import these from here (``from edgekit.runtimes.ort import OrtOptions, OrtRuntime``).
__all__ = ["GRAPH_OPTIMIZATION_LEVELS", "OrtOptions", "OrtRuntime", "taking_turns"]


def session_device(session: Any) -> str:
    """The session's first provider; ``<provider>:N`` for a CUDA or TensorRT provider whose options
    chose GPU N (not 0), so a power probe reading another GPU can tell (``probes.power.scope``)."""
    first = str(session.get_providers()[0])
    options = session.get_provider_options().get(first) or {}
    device_id = str(options.get("device_id", "0")).strip()
    if first in ("CUDAExecutionProvider", "TensorrtExecutionProvider") and device_id not in ("", "0"):
        return f"{first}:{device_id}"
    return first


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
        check_model_file(self.model_path, "ort")
        self.model_files = model_files_of(self.model_path)

        providers, provider_options = self._available_providers(ort, options)
        session_options = make_session_options(ort, options)
        model, self.fusions = fused_model(self.model_path, providers, options)
        if model is not None:  # the graph comes from memory: its external weights resolve against the model's folder
            session_options.add_session_config_entry(
                "session.model_external_initializers_file_folder_path", str(self.model_path.parent)
            )
        disabled = options.disabled_optimizers
        if disabled is None:
            disabled = graph_changes(providers).disabled_optimizers
        self.disabled_optimizers: tuple[str, ...] = tuple(disabled)
        self.session = create_session(
            ort,
            self.model_path,
            session_options,
            providers,
            provider_options,
            model=model,
            disabled=self.disabled_optimizers,
        )

        self.providers_used: list[str] = list(self.session.get_providers())
        self.device = session_device(self.session)
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
        self._run_errors = run_errors(ort)  # what a refused run raises (run_failed makes it one line)
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
        try:
            return self._run_session(feeds)
        except self._run_errors as exc:
            raise run_failed(self.model_path, exc) from None

    def _run_session(self, feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
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


# ---- the registry entry -----------------------------------------------------------------------
def _open_file(path: Path, o: FileOptions) -> OrtRuntime:
    return OrtRuntime(
        path,
        taking_turns(
            OrtOptions(intra_op_threads=o.threads, spin_between_runs=o.spin, io_binding=o.io_binding), o.shared
        ),
    )


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
