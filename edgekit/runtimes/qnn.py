"""Qualcomm Hexagon NPU (HTP) backend: ONNX Runtime with the ``onnxruntime-qnn`` plugin EP.

``onnxruntime-qnn`` ships Qualcomm's HTP backend (``libQnnHtp.so``). On a Snapdragon device it
drives the NPU; on x86 Linux the same library runs the NPU's integer (and fp16) arithmetic in
emulation, so accuracy measured here is the NPU's, while every latency is the emulator's
(``QnnRuntime.emulated``; reports label it so).

The HTP has no float32 arithmetic: a graph runs when every op is quantized (QDQ, ``edgekit
quantize --profile qnn``) or, on v73+ (``enable_htp_fp16_precision``), in float16. CPU fallback
is off by default (``session.disable_cpu_ep_fallback``): a node the NPU cannot take is an
error naming that node and op, never a silent CPU partition.

The session reuses ``OrtRuntime``'s IOBinding (two preallocated output sets, ping-pong).
``compile_context`` writes an EPContext model (the compiled QNN context binary embedded in a
one-node ONNX file) that a device loads without compiling. The options, the session and the
context binary are ``runtimes/qnn_session.py``; this module is the runtime and its registry entry.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

from edgekit._deps import require
from edgekit.errors import EdgekitError, UsageError
from edgekit.manifest_sections import EngineRecord
from edgekit.runtimes._specs import ort_session_specs
from edgekit.runtimes.base import BaseRuntime, Runtime, check_model_file, model_files_of
from edgekit.runtimes.bucketed import open_artifact
from edgekit.runtimes.engines import cross_arch_notes
from edgekit.runtimes.ort import OrtOptions, OrtRuntime
from edgekit.runtimes.qnn_nodes import float_nodes, refused_nodes
from edgekit.runtimes.qnn_session import (
    DEFAULT_HTP_ARCH,
    DEFAULT_SOC_MODEL,
    EP_NAME,
    FP16_MIN_ARCH,
    QnnCompileError,
    QnnOptions,
    captured_native_output,
    compile_context,
    create_session,
    emulated,
    is_context_model,
    qnn_options_for,
    register,
    versions,
)
from edgekit.runtimes.registry import Backend, DebugHooks, EngineHooks, FileOptions, Requirement, register_backend
from edgekit.targets import load_target

# Callers (doctor, lint, build, quantize's qnn profile, the tests) import these from here.
__all__ = [
    "ARTIFACTS",
    "DEFAULT_HTP_ARCH",
    "DEFAULT_SOC_MODEL",
    "EP_NAME",
    "FP16_MIN_ARCH",
    "QNN",
    "QnnCompileError",
    "QnnOptions",
    "QnnRuntime",
    "captured_native_output",
    "compile_context",
    "create_session",
    "emulated",
    "float_nodes",
    "qnn_options_for",
    "refused_nodes",
    "register",
    "versions",
]


class QnnRuntime(OrtRuntime):
    """A model run by ONNX Runtime on Qualcomm's HTP backend (the Hexagon NPU, or its x86
    emulation). ``session_seconds``: time to create the session (compiling the graph, or
    loading a precompiled EPContext model); ``precompiled``: the model is an EPContext one."""

    name = "qnn"

    def __init__(self, model_path: str | Path, options: QnnOptions = QnnOptions(), threads: int = 0):
        require("onnxruntime_qnn")
        BaseRuntime.__init__(self, {}, {})
        self.options = OrtOptions(io_binding=options.io_binding)
        self.model_path = Path(model_path)
        self.qnn_options = options
        check_model_file(self.model_path, "ort")  # onnxruntime-qnn's session: ORT reads it
        self.model_files = model_files_of(self.model_path)
        ort = require("onnxruntime")
        self.session, self.session_seconds, self.native_log = create_session(
            self.model_path, options, source=self.model_path, threads=threads
        )
        self.precompiled = is_context_model(self.model_path)
        self.emulated = emulated()
        self.fusions: dict[str, int] = {}
        self.disabled_optimizers: tuple[str, ...] = ()
        self.providers_used = list(self.session.get_providers())
        precision = "fp16" if options.fp16 else "QDQ int8/int16"
        where = "x86 emulation" if self.emulated else "device"
        soc = f", soc {options.soc}" if options.soc else ""
        self.device = f"{EP_NAME} HTP v{options.arch}{soc} {precision} ({where})"
        # Reports print this next to every latency: on x86 the NPU is emulated.
        self.timing_note = (
            "x86 emulation of the Hexagon NPU (HTP backend), not device latency" if self.emulated else None
        )
        self.session_info: dict[str, Any] = {"seconds": self.session_seconds, "precompiled": self.precompiled}
        if options.cpu_fallback:
            self.warn("qnn: CPU fallback is on: nodes the HTP refuses run on the CPU, not the NPU")
        self.inputs, self.outputs = ort_session_specs(self.session, self.model_path)
        self._prepare_binding(ort, options.io_binding)


# The artifact the HTP runs per precision: int8 -> ``int8`` (``quantize --profile qnn``: every op QDQ); fp16 -> ``fp32``
# in float16. No fp32: the NPU has none.
ARTIFACTS = {"int8": "int8", "fp16": "fp32"}


def _check_artifact(bundle: Any, precision: str) -> None:
    """The HTP takes only an int8 model of its quantize profile (``QNN.quantize_profile``)."""
    if precision != "int8":
        return
    if not bundle.has("int8"):
        raise EdgekitError(
            f"bundle {bundle.root} has no int8 model for the HTP",
            hint=f"make one with `edgekit quantize {bundle.root} --profile {QNN.quantize_profile}`",
        )
    q = bundle.quantization
    profile = q.profile if q is not None else None
    if profile not in (None, QNN.quantize_profile):
        raise UsageError(
            f"bundle {bundle.root}'s int8 model comes from quantize profile {profile!r}, which leaves ops in float "
            "and int8 weights the HTP cannot take",
            hint=f"re-quantize with `edgekit quantize {bundle.root} --profile {QNN.quantize_profile}`",
        )


def _open(bundle: Any, precision: str, threads: int) -> Runtime:  # a QnnRuntime, or one per step bucket
    options = QnnOptions(fp16=precision == "fp16")
    return open_artifact(
        bundle, QNN.artifact(bundle, precision), lambda path, shared: QnnRuntime(path, options, threads=threads)
    )


def _open_file(path: Path, o: FileOptions) -> QnnRuntime:
    """An ONNX file on the HTP: compiled for ``o.target``'s SoC where one is given, else the default one."""
    options = (
        qnn_options_for(load_target(o.target), o.precision) if o.target else QnnOptions(fp16=o.precision == "fp16")
    )
    return QnnRuntime(path, replace(options, io_binding=o.io_binding), threads=o.threads)


def _check_host(target: Any, host: Any, precision: str) -> tuple[str | None, list[str]]:
    require("onnxruntime_qnn")  # exit 3 with the install line: the target names no other runtime
    emulated_here = [
        f"target {target.name}'s NPU is emulated on this {host.arch} host: accuracy is the NPU's, latency is not"
    ]
    return None, (emulated_here if target.arch != host.arch else []) + cross_arch_notes(target, host)


def _engine_problems(path: Path, entry: EngineRecord, host: Any, target: Any, facts: Any) -> list[str]:
    """A QNN context binary loads only with the QNN SDK that compiled it (onnxruntime-qnn ships
    one) and only on the SoC it was compiled for."""
    if not QNN.requires.available():
        return [f"onnxruntime-qnn is not installed ({QNN.requires.install})"]
    built = entry.qnn
    now = versions()
    problems = [
        f"{what} version: compiled with {built.get(key)}, this host has {now[key]}"
        for key, what in (("qnn_sdk", "QNN SDK"), ("onnxruntime_qnn", "onnxruntime-qnn"))
        if built.get(key) != now[key]
    ]
    if target is not None:
        for key in ("htp_arch", "soc_model"):
            want = getattr(target.qnn, key)
            if want and built.get(key) != want:
                problems.append(f"{key}: compiled for {built.get(key)}, target {target.name} now says {want}")
    return problems


def _open_engine(choice: Any, threads: int) -> QnnRuntime:
    runtime = QnnRuntime(choice.path, qnn_options_for(choice.target, choice.precision), threads=threads)
    if choice.compile_seconds is not None:
        runtime.session_info["compile_seconds_at_build"] = choice.compile_seconds
        runtime.session_info["saved_seconds"] = choice.compile_seconds - runtime.session_seconds
    if not choice.built:
        runtime.warn(
            f"target {choice.target.name}: no precompiled context; the graph was compiled at load "
            f"({runtime.session_seconds:.2f} s; `edgekit build BUNDLE --target {choice.target.name}` saves that)"
        )
    return runtime


QNN = register_backend(
    Backend(
        name="qnn",
        title="QNN HTP",
        help="Qualcomm's Hexagon NPU, emulated on x86",
        precisions=("int8", "fp16"),
        artifacts=ARTIFACTS,
        check_artifact=_check_artifact,
        open=_open,
        lacks="the Hexagon NPU computes in integers or float16",
        requires=Requirement("onnxruntime_qnn", "pip install 'edgekit[qnn]'", extra="qnn"),
        engine=EngineHooks(check_host=_check_host, problems=_engine_problems, open=_open_engine),
        open_file=_open_file,
        quantize_profile="qnn",
        # Debug taps the DQ after each tensor (``debug.taps.capture_names``): outputs on the float
        # tensor before its Q changed the HTP's results (max |Δ logits| 22 on the test model), on the
        # DQ bit-identical; cut graphs: 1 compile each.
        debug=DebugHooks(
            capture="graph outputs on the DequantizeLinear after each tensor of a copy of the QDQ graph "
            "(the value the HTP holds), compiled by the HTP backend; outputs before the QuantizeLinear "
            "change the HTP's results",
            target_options=True,
        ),
    )
)
