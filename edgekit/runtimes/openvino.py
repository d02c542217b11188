"""OpenVINO backend: a bundle's ONNX (FP32, or the QDQ INT8) or a compiled blob behind ``Runtime``.

OpenVINO reads the ONNX files unchanged (its low-precision transformations turn the QDQ pairs
into int8 kernels: VNNI/AMX on Intel CPUs) and compiles them for one device (CPU, GPU, NPU).
Every setting that changes speed or numerics is explicit and read back from the compiled model
(``settings``) for the reports: threads, streams, performance hint and inference precision. The
precision matters most: on a CPU with bf16 support (AMX, AVX512-BF16) the CPU plugin's *default*
is bf16, so an "fp32" run that leaves it unset is really a bf16 run. edgekit asks for f32 unless
told otherwise, and edgekit's ``bf16`` precision is the FP32 ONNX compiled with ``bf16``.

Steady state allocates no tensor memory and copies nothing it can avoid: two infer requests,
each with its own preallocated output arrays wrapped once as ``ov.Tensor`` (same memory) and set
as that request's outputs. Run N uses request N mod 2, so an output stays valid through the next
``run`` (``outputs_stay_valid = 2``) and a loop can feed it straight back (the AR KV cache, a
fused graph's tokens or x): such a feed is set by its existing tensor, no copy, no new wrapper.
Other feeds are wrapped without a copy (``shared_memory=True``) for the duration of the call.
"""

from __future__ import annotations

import io
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from edgekit._deps import require
from edgekit.errors import EdgekitError, TargetUnavailable, UsageError, one_of, unknown
from edgekit.runtimes._specs import specs_from_entries
from edgekit.runtimes.base import BaseRuntime, check_model_file, model_files_of
from edgekit.runtimes.onnx_file import load_onnx
from edgekit.runtimes.openvino_sin import rewrite_sins
from edgekit.targets.schema import OPENVINO_DEVICES, OPENVINO_HINTS, OPENVINO_PRECISIONS, OpenVinoSettings

# The values a setting may take are the target files' (``targets.schema``), one definition.
DEVICES = OPENVINO_DEVICES
PERFORMANCE_HINTS = OPENVINO_HINTS
INFERENCE_PRECISIONS = OPENVINO_PRECISIONS
# The device capability (OPTIMIZATION_CAPABILITIES) each inference precision needs.
_PRECISION_CAPABILITY = {"f32": "FP32", "bf16": "BF16", "f16": "FP16"}
# Files OpenVINO reads as a model; anything else is imported as a compiled blob (export_model).
MODEL_SUFFIXES: tuple[str, ...] = (".onnx", ".xml")
# ov element type names -> edgekit dtype names (anything else keeps its ov name for the error).
_OV_DTYPES = {"f32": "float32", "f16": "float16", "i64": "int64", "i32": "int32", "boolean": "bool"}
INSTALL_HINT = "pip install 'edgekit[openvino]'"


@dataclass(frozen=True)
class OvOptions(OpenVinoSettings):
    """A target's ``[openvino]`` settings (``targets.OpenVinoSettings``: device, here also e.g.
    "GPU.1", threads, streams, performance hint, inference precision) plus what one runtime adds.
    ``inference_precision`` is the one the model is compiled with (``inference_precision_for``):
    f32 keeps "fp32" honest on CPUs whose plugin default is bf16."""

    # OpenVINO's model cache (CACHE_DIR): a compiled model is written there on first load and
    # imported at the next. None = no cache. (`edgekit build` writes an explicit blob instead.)
    cache_dir: str | None = None
    # PERF_COUNT: per-node kernel times (``op_profile()``), for finding which op dominates.
    profiling: bool = False
    # Two infer requests with preallocated outputs (ping-pong, no per-step allocation); False =
    # one request whose outputs are copied into fresh arrays every call.
    double_buffer: bool = True

    def __post_init__(self) -> None:
        if not isinstance(self.device, str) or self.device.split(".")[0] not in DEVICES:
            raise unknown("openvino device", self.device, DEVICES, also=" (or e.g. GPU.1)")
        one_of("openvino performance_hint", self.performance_hint, PERFORMANCE_HINTS)
        one_of("openvino inference_precision", self.inference_precision, INFERENCE_PRECISIONS)
        for name in ("threads", "streams"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise UsageError(f"openvino {name} must be an int >= 0 (0 = the plugin's choice), got {value!r}")

    def compile_config(self) -> dict[str, Any]:
        """The properties handed to ``compile_model`` / ``import_model``."""
        config: dict[str, Any] = {"PERFORMANCE_HINT": self.performance_hint}
        if self.threads:
            config["INFERENCE_NUM_THREADS"] = self.threads
        if self.streams:
            config["NUM_STREAMS"] = self.streams
        if self.inference_precision != "default":
            config["INFERENCE_PRECISION_HINT"] = self.inference_precision
        if self.cache_dir is not None:
            config["CACHE_DIR"] = str(self.cache_dir)
        if self.profiling:
            config["PERF_COUNT"] = True
        return config


def inference_precision_for(precision: str, rest: str = "f32") -> str:
    """OpenVINO's inference precision for an edgekit precision: fp32 -> f32, bf16 -> bf16,
    fp16 -> f16; int8 runs the QDQ model's int8 kernels with its float parts in ``rest``."""
    table = {"fp32": "f32", "bf16": "bf16", "fp16": "f16", "int8": rest}
    if precision not in table:
        raise UsageError(f"--precision {precision!r} is unknown for openvino; valid: {', '.join(table)}")
    return table[precision]


def options_for(settings: Any, precision: str, threads: int = 0) -> OvOptions:
    """``OvOptions`` from a target's ``[openvino]`` table (``targets.OpenVinoSettings``) for one
    edgekit precision (fp32 is always f32; the table's inference_precision is the int8 model's
    float parts); ``threads`` > 0 overrides the target's thread count (``--threads``)."""
    rest = settings.inference_precision
    return OvOptions(
        device=settings.device,
        threads=threads or settings.threads,
        streams=settings.streams,
        performance_hint=settings.performance_hint,
        inference_precision=inference_precision_for(precision, rest),
    )


def openvino_version() -> str:
    """The installed OpenVINO release, e.g. ``2026.4.1`` (build suffix dropped)."""
    ov = require("openvino")
    return str(ov.get_version()).split("-")[0]


def available_devices() -> list[str]:
    """OpenVINO devices this host has (``["CPU"]`` without an Intel GPU/NPU driver)."""
    ov = require("openvino")
    return list(ov.Core().available_devices)


def device_capabilities(device: str = "CPU") -> list[str]:
    """OPTIMIZATION_CAPABILITIES of ``device`` (e.g. FP32, BF16, INT8, EXPORT_IMPORT)."""
    ov = require("openvino")
    return [str(c) for c in ov.Core().get_property(device, "OPTIMIZATION_CAPABILITIES")]


class OpenVinoRuntime(BaseRuntime):
    """A model file compiled by OpenVINO for one device.

    ``device`` is the device that executes (``EXECUTION_DEVICES``); ``settings`` the effective
    configuration read back from the compiled model; ``compiled`` the ``ov.CompiledModel``.
    """

    name = "openvino"
    # An output array survives the next ``run``: two requests, alternating.
    outputs_stay_valid = 2

    def __init__(
        self, model_path: str | Path, options: OvOptions = OvOptions(), *, source_onnx: str | Path | None = None
    ):
        """``source_onnx``: for a compiled blob, the ONNX it was built from (its graph IO names
        the ports: a compiled port can carry several tensor names)."""
        super().__init__({}, {})
        ov = require("openvino")
        self.model_path = Path(model_path)
        self.options = options
        check_model_file(self.model_path, "openvino")
        self.model_files = model_files_of(self.model_path)
        core = ov.Core()
        device = options.device
        if device.split(".")[0] not in {d.split(".")[0] for d in core.available_devices}:
            raise TargetUnavailable(
                f"openvino: device {device} is not available on this host (OpenVINO {openvino_version()} sees "
                f"{', '.join(core.available_devices) or 'no device'})",
                hint=_device_hint(device),
            )
        _check_precision(core, device, options.inference_precision)
        self.compiled, graph_names, rewritten = _compile(ov, core, self.model_path, device, options.compile_config())
        if graph_names is None and source_onnx is not None:
            graph = load_onnx(source_onnx).graph
            graph_names = {v.name for v in (*graph.input, *graph.output)}
        self.device = ",".join(str(d) for d in self.compiled.get_property("EXECUTION_DEVICES"))
        self.settings: dict[str, Any] = compiled_settings(self.compiled)
        if rewritten:  # Sin over large tensors as the polynomial the CPU plugin fuses (openvino_sin.py)
            self.settings["sin_rewritten"] = rewritten
        self.inputs, self.outputs = _port_specs(self.compiled, self.model_path, graph_names or set())
        self._input_index = {name: i for i, name in enumerate(self.inputs)}

        n_requests = 2 if options.double_buffer else 1
        self._requests = [self.compiled.create_infer_request() for _ in range(n_requests)]
        self._output_sets: list[dict[str, np.ndarray]] = []
        # id(output array) -> (its ov.Tensor, request index); ids stay unique: the arrays live as
        # long as the runtime.
        self._own: dict[int, tuple[Any, int]] = {}
        if options.double_buffer:
            for which, request in enumerate(self._requests):
                arrays = {}
                for index, (name, spec) in enumerate(self.outputs.items()):
                    array = np.empty(spec.shape, dtype=spec.dtype)  # (spec.shape) rewritten every other run
                    tensor = ov.Tensor(array, shared_memory=True)  # same memory: results land in the array
                    request.set_output_tensor(index, tensor)
                    arrays[name] = array
                    self._own[id(array)] = (tensor, which)
                self._output_sets.append(arrays)
        self._parity = 0
        self._tensor = ov.Tensor

    def _run_impl(self, feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        write = self._parity
        request = self._requests[write]
        for name, index in self._input_index.items():
            array = feeds[name]
            own = self._own.get(id(array))
            if own is not None and own[1] != write:
                request.set_input_tensor(index, own[0])  # ping-pong: the other request's output, as is
                continue
            if own is not None:
                array = array.copy()  # an output this run overwrites: read a copy
            # Wrapped without a copy; the tensor keeps the array alive while the request holds it.
            request.set_input_tensor(index, self._tensor(np.ascontiguousarray(array), shared_memory=True))
        request.infer()
        if not self._output_sets:
            return {name: np.array(request.get_output_tensor(i).data) for i, name in enumerate(self.outputs)}
        self._parity ^= 1
        return dict(self._output_sets[write])

    def op_profile(self) -> list[dict[str, Any]]:
        """Per-node times of the last ``run`` (``OvOptions(profiling=True)``): node, type, kernel
        (exec_type, e.g. ``brgemm_avx512_amx_I8``) and microseconds, executed nodes only."""
        if not self.options.profiling:
            raise UsageError("op_profile() needs OvOptions(profiling=True)")
        request = self._requests[self._parity ^ (len(self._requests) - 1)]  # the one that ran last
        return [
            {"node": p.node_name, "type": p.node_type, "kernel": p.exec_type, "us": p.real_time.total_seconds() * 1e6}
            for p in request.profiling_info
            if p.status == p.Status.EXECUTED
        ]

    def export_blob(self, path: str | Path) -> int:
        """Write the compiled model as OpenVINO's ``export_model`` writes it to ``path`` (``import_model``
        reads it back on the same OpenVINO version, device and CPU ISA); its size in bytes. The
        blob holds the weights: it is written from OpenVINO's buffer, never copied into a second one."""
        stream = io.BytesIO()
        self.compiled.export_model(stream)  # OpenVINO 2026 takes only an io.BytesIO, not a file
        with open(path, "wb") as fh:
            fh.write(stream.getbuffer())
        return stream.getbuffer().nbytes

    def _close_impl(self) -> None:
        self._requests = []
        self._output_sets = []
        self._own = {}
        self.compiled = None


def compiled_settings(compiled: Any) -> dict[str, Any]:
    """The effective configuration of an ``ov.CompiledModel``, JSON-ready (what reports record)."""
    settings: dict[str, Any] = {}
    for key, name in (
        ("threads", "INFERENCE_NUM_THREADS"),
        ("streams", "NUM_STREAMS"),
        ("performance_hint", "PERFORMANCE_HINT"),
        ("inference_precision", "INFERENCE_PRECISION_HINT"),
        ("execution_mode", "EXECUTION_MODE_HINT"),
        ("runtime_requirements", "RUNTIME_REQUIREMENTS"),
    ):
        try:
            value = compiled.get_property(name)
        except RuntimeError:  # not every device reports every property
            continue
        settings[key] = _plain(value)
    if "inference_precision" in settings:
        settings["inference_precision"] = _OV_PRECISION_NAMES.get(
            settings["inference_precision"], settings["inference_precision"]
        )
    return settings


# str(ov.Type) -> edgekit's spelling of the inference precision.
_OV_PRECISION_NAMES = {
    "float32": "f32",
    "bfloat16": "bf16",
    "float16": "f16",
    "f32": "f32",
    "bf16": "bf16",
    "f16": "f16",
}


def _plain(value: Any) -> Any:
    if isinstance(value, (bool, int, float, str)):
        return value
    text = str(value)  # ov.Type "<Type: 'float32'>" prints as float32; enums as Mode.NAME
    if hasattr(value, "get_type_name"):
        return str(value.get_type_name())
    if "." in text and text.split(".")[0][:1].isupper():
        return text.split(".", 1)[1]
    return text


def _device_hint(device: str) -> str:
    kind = device.split(".")[0]
    if kind == "GPU":
        return "an Intel GPU needs its OpenCL driver (intel-opencl-icd / Intel GPU driver); run on that machine"
    if kind == "NPU":
        return "a Core Ultra NPU needs the Intel NPU driver (linux-npu-driver); run on that machine"
    return "use --target intel-cpu, or check `edgekit doctor --target intel-cpu`"


def _check_precision(core: Any, device: str, precision: str) -> None:
    """bf16/f16 only where the device computes them natively (OPTIMIZATION_CAPABILITIES)."""
    need = _PRECISION_CAPABILITY.get(precision)
    if need is None:
        return
    capabilities = [str(c) for c in core.get_property(device, "OPTIMIZATION_CAPABILITIES")]
    if need not in capabilities:
        raise TargetUnavailable(
            f"openvino: device {device} has no {precision} support (its capabilities: {', '.join(capabilities)})",
            hint="use inference precision f32 (--precision fp32), or a CPU with AMX/AVX512-BF16 for bf16",
        )


def _compile(
    ov: Any, core: Any, path: Path, device: str, config: Mapping[str, Any]
) -> tuple[Any, set[str] | None, int]:
    """(compiled model, the model file's IO tensor names or None for a blob, how many ``Sin`` the
    read rewrote): read + compile an ONNX/IR file, or import an exported blob (compiled with the
    rewrite already); one error naming the file."""
    try:
        if path.suffix in MODEL_SUFFIXES:
            model = core.read_model(str(path))
            # The graph's own IO names, before the plugin's transformations can give a port more
            # names (a QDQ model's logits port also answers to 'gemm_output_reshape_...').
            names = {n for port in (*model.inputs, *model.outputs) for n in port.get_names()}
            # The CPU plugin's Sin is a scalar reference kernel (other devices keep their own).
            rewritten = rewrite_sins(model) if device.split(".")[0] == "CPU" else 0
            return core.compile_model(model, device, dict(config)), names, rewritten
        config = {k: v for k, v in config.items() if k != "CACHE_DIR"}  # a blob is compiled already
        # Imported from the mapped file, not read into a bytes copy first: the blob holds the
        # weights, and a second copy of them is what memory cannot afford at 2 GB.
        blob = np.memmap(path, dtype=np.uint8, mode="r")
        return core.import_model(ov.Tensor(blob), device, config), None, 0
    except RuntimeError as exc:
        what = (
            "a model OpenVINO can read"
            if path.suffix in MODEL_SUFFIXES
            else "a compiled model this OpenVINO can import"
        )
        raise EdgekitError(
            f"openvino: {path} is not {what}: {_first_reason(exc)}",
            hint="re-export it (edgekit export)"
            if path.suffix in MODEL_SUFFIXES
            else "rebuild it (edgekit build --rebuild)",
        ) from None


def _first_reason(exc: BaseException) -> str:
    """The informative line of an OpenVINO exception (they start with 'Exception from src/...'),
    with the line it introduces and a frontend summary's items ("-- No conversion rule ... Op")."""
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    useful = [line for line in lines if not line.startswith("Exception from") and not line.startswith("Check '")]
    useful = useful or lines or [type(exc).__name__]
    head = useful[:2] if useful[0].endswith(":") else useful[:1]
    return " ".join(head + [line for line in useful if line.startswith("-- ")][:2])[:300]


def _port_name(port: Any, graph_names: set[str]) -> str:
    """The port's name as the graph declares it: of its tensor names, the one in ``graph_names``
    (the model file's IO), else its only name, else the alphabetically first (stable)."""
    names = sorted(port.get_names())
    declared = [n for n in names if n in graph_names]
    return (declared or names or [port.get_any_name()])[0]


def _port_specs(compiled: Any, source: Path, graph_names: set[str]) -> tuple[dict, dict]:
    def entries(ports: Any, role: str) -> Any:
        for port in ports:
            shape = port.get_partial_shape()
            dims = [d.get_length() if d.is_static else None for d in shape] if shape.rank.is_static else [None]
            kind = port.get_element_type().get_type_name()
            yield role, _port_name(port, graph_names), dims, _OV_DTYPES.get(kind, f"openvino {kind}")

    return specs_from_entries([*entries(compiled.inputs, "input"), *entries(compiled.outputs, "output")], source)


__all__ = [
    "DEVICES",
    "INFERENCE_PRECISIONS",
    "PERFORMANCE_HINTS",
    "OpenVinoRuntime",
    "OvOptions",
    "available_devices",
    "options_for",
    "compiled_settings",
    "inference_precision_for",
    "device_capabilities",
    "openvino_version",
]
