"""TensorRT backend: build static-shape engines from ONNX, key them to the host, run them.

An engine only runs on the TensorRT version and GPU (and, on Jetson, the L4T/JetPack release)
that built it, so every ``.plan`` gets a sidecar ``<plan>.json`` (``EngineMetadata``) and
``load_engine`` refuses, listing every reason, or rebuilds when asked. Written against the
TensorRT 10 Python API; TensorRT 11 (no ``BuilderFlag.FP16/INT8``, strong typing by default) is
detected with ``hasattr``. ``tensorrt``, ``torch`` and ``cuda-python`` are imported lazily.
"""

from __future__ import annotations

import ctypes
import hashlib
import importlib
import json
import logging
import math
import os
from dataclasses import asdict, dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Mapping

import numpy as np

from edgekit._deps import require
from edgekit.errors import (
    BundleError,
    EdgekitError,
    MissingDependency,
    TargetUnavailable,
    UsageError,
)
from edgekit.host import L4T_RELEASE_PATH, parse_l4t, read_l4t  # noqa: F401  (re-exported: engines are keyed to L4T)
from edgekit.runtimes._specs import load_onnx, onnx_graph_specs, specs_from_entries
from edgekit.runtimes.base import BaseRuntime

log = logging.getLogger(__name__)

PRECISIONS: tuple[str, ...] = ("fp32", "fp16", "int8")
ENGINE_SCHEMA = "edgekit.engine/1"
REBUILD_HINT = "pass --rebuild to rebuild it from the source ONNX (load_engine(..., rebuild=True))"
_CUDA_HINT = "pip install 'edgekit[trt]' (brings cuda-python), or use a torch build with CUDA"

# ---------------------------------------------------------------------------------------------
# Engine metadata: what an engine is tied to


@dataclass(frozen=True)
class HostMetadata:
    """The facts of this host an engine is tied to."""

    tensorrt_version: str
    gpu_name: str
    compute_capability: str  # "8.7"
    l4t: str | None  # "35.4.1" on Jetson (identifies JetPack), None elsewhere


@dataclass(frozen=True)
class EngineMetadata:
    """What built a ``.plan``: stored next to it as ``<plan>.json``."""

    tensorrt_version: str
    gpu_name: str
    compute_capability: str
    l4t: str | None
    source_onnx_sha256: str
    precision: str  # fp32 | fp16 | int8
    created: str  # ISO-8601, UTC
    edgekit_version: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {"schema": ENGINE_SCHEMA, **asdict(self)}

    @classmethod
    def from_json(cls, doc: Mapping[str, Any]) -> "EngineMetadata":
        if doc.get("schema") != ENGINE_SCHEMA:
            raise BundleError(f"engine metadata schema {doc.get('schema')!r} is unknown; expected {ENGINE_SCHEMA!r}")
        required = [f for f in cls.__dataclass_fields__ if f != "edgekit_version"]
        missing = [f for f in required if f not in doc]
        if missing:
            raise BundleError(f"engine metadata lacks {missing}", hint=REBUILD_HINT)
        if doc["precision"] not in PRECISIONS:
            raise BundleError(f"engine precision {doc['precision']!r} is unknown; valid: {', '.join(PRECISIONS)}")
        return cls(**{f: doc.get(f) for f in cls.__dataclass_fields__})


def sidecar_path(plan_path: str | Path) -> Path:
    plan_path = Path(plan_path)
    return plan_path.with_name(plan_path.name + ".json")


def write_metadata(plan_path: str | Path, meta: EngineMetadata) -> Path:
    path = sidecar_path(plan_path)
    _write_atomic(path, (json.dumps(meta.to_json(), indent=2) + "\n").encode())
    return path


def read_metadata(plan_path: str | Path) -> EngineMetadata:
    path = sidecar_path(plan_path)
    try:
        doc = json.loads(path.read_text())
    except FileNotFoundError:
        raise BundleError(f"engine metadata {path} does not exist", hint=REBUILD_HINT) from None
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise BundleError(f"engine metadata {path} is not valid JSON ({exc})", hint=REBUILD_HINT) from None
    return EngineMetadata.from_json(doc)


def host_metadata(l4t_path: str | Path = L4T_RELEASE_PATH, device: int = 0) -> HostMetadata:
    """TensorRT version, GPU name, compute capability and L4T release of this host."""
    trt = require("tensorrt")
    gpu_name, capability = gpu_facts(device)
    return HostMetadata(str(trt.__version__), gpu_name, capability, read_l4t(l4t_path))


def gpu_facts(device: int = 0) -> tuple[str, str]:
    """``(name, "major.minor")`` of CUDA device ``device`` via torch.cuda or cuda-python."""
    torch = _import_optional("torch")
    if torch is not None and torch.cuda.is_available():
        major, minor = torch.cuda.get_device_capability(device)
        return torch.cuda.get_device_name(device), f"{major}.{minor}"
    cudart = _import_cudart()
    if cudart is None:
        raise MissingDependency(
            "reading the GPU needs torch with CUDA or cuda-python; neither is usable", hint=_CUDA_HINT
        )
    _cuda_device_count_or_raise(cudart)
    props = _cuda_check(cudart.cudaGetDeviceProperties(device))
    name = props.name.decode(errors="replace") if isinstance(props.name, bytes) else str(props.name)
    return name.rstrip("\x00"), f"{props.major}.{props.minor}"


def check_compatible(
    engine: EngineMetadata,
    host: HostMetadata,
    source_sha256: str | None = None,
    precision: str | None = None,
) -> list[str]:
    """Every reason ``engine`` cannot run on ``host`` (empty when it can). ``source_sha256``: hash
    of the ONNX it should come from (None = don't check); ``precision``: the one asked for."""
    reasons = []
    if engine.tensorrt_version != host.tensorrt_version:
        reasons.append(
            f"TensorRT version: engine built with {engine.tensorrt_version}, host has {host.tensorrt_version}"
        )
    if engine.compute_capability != host.compute_capability:
        reasons.append(
            f"GPU compute capability: engine built for {engine.compute_capability} ({engine.gpu_name}), "
            f"host GPU is {host.compute_capability} ({host.gpu_name})"
        )
    elif engine.gpu_name != host.gpu_name:
        # Same architecture but another model: TensorRT's tactics were timed on the other one.
        reasons.append(f"GPU: engine built on {engine.gpu_name}, host GPU is {host.gpu_name}")
    if engine.l4t != host.l4t:
        reasons.append(
            f"L4T/JetPack: engine built on {engine.l4t or 'a non-Jetson host'}, host is {host.l4t or 'not a Jetson'}"
        )
    if source_sha256 is not None and engine.source_onnx_sha256 != source_sha256:
        reasons.append(
            f"stale engine: source ONNX changed (engine from sha256 {engine.source_onnx_sha256[:12]}…, "
            f"ONNX now {source_sha256[:12]}…)"
        )
    if precision is not None and engine.precision != precision:
        reasons.append(f"precision: engine is {engine.precision}, {precision} was asked for")
    return reasons


# ---------------------------------------------------------------------------------------------
# Building


@dataclass(frozen=True)
class TrtBuildConfig:
    # fp32 | fp16 | int8. int8 means an explicitly quantized (QDQ) ONNX: edgekit has no
    # calibrator path (deprecated in TensorRT 10.1, removed in 11).
    precision: str = "fp32"
    # Scratch memory for tactics; Jetson shares it with the CPU, so keep it modest.
    workspace_mib: int = 1024
    # File of persisted tactic timings: rebuilds on the same GPU go from minutes to seconds.
    timing_cache: str | None = None
    # None = auto: True for QDQ graphs (TensorRT needs it for explicit quantization) and on
    # TensorRT >= 11 (its default); precision then comes from the graph's types.
    strongly_typed: bool | None = None
    # 0..5 (TensorRT default 3): higher searches more tactics for a faster engine, builds slower.
    builder_optimization_level: int | None = None

    def __post_init__(self) -> None:
        if self.precision not in PRECISIONS:
            raise UsageError(f"precision {self.precision!r} is unknown; valid: {', '.join(PRECISIONS)}")
        if not isinstance(self.workspace_mib, int) or self.workspace_mib <= 0:
            raise UsageError(f"workspace_mib must be a positive int, got {self.workspace_mib!r}")
        level = self.builder_optimization_level
        if level is not None and level not in range(6):
            raise UsageError(f"builder_optimization_level {level!r} is invalid; valid: 0..5 or None")


def onnx_has_qdq(model: Any) -> bool:
    """Whether the graph is explicitly quantized (has QuantizeLinear/DequantizeLinear nodes)."""
    return any(node.op_type in ("QuantizeLinear", "DequantizeLinear") for node in model.graph.node)


def _onnx_has_fp16(model: Any) -> bool:
    graph = model.graph
    fp16 = 10  # onnx.TensorProto.FLOAT16
    if any(init.data_type == fp16 for init in graph.initializer):
        return True
    if any(v.type.tensor_type.elem_type == fp16 for v in (*graph.input, *graph.output, *graph.value_info)):
        return True
    return any(
        node.op_type == "Cast" and any(a.name == "to" and a.i == fp16 for a in node.attribute) for node in graph.node
    )


def resolve_build_flags(
    cfg: TrtBuildConfig, model: Any, tensorrt_version: str, has_precision_flags: bool | None = None
) -> tuple[bool, bool]:
    """``(strongly_typed, set_fp16_flag)`` for ``model`` (an ``onnx.ModelProto``), or an error
    when the precision asked for cannot come out of this graph on this TensorRT.

    ``has_precision_flags``: whether ``trt.BuilderFlag.FP16`` still exists (None: TensorRT < 11)."""
    major = int(tensorrt_version.split(".")[0])
    if has_precision_flags is None:
        has_precision_flags = major < 11
    has_qdq = onnx_has_qdq(model)
    strongly = cfg.strongly_typed if cfg.strongly_typed is not None else (has_qdq or not has_precision_flags)
    if cfg.precision == "int8" and not has_qdq:
        raise EdgekitError(
            "precision int8 needs an explicitly quantized (QDQ) ONNX; this graph has no QuantizeLinear nodes",
            hint="quantize it first (edgekit quantize with the trt profile)",
        )
    if cfg.precision == "fp32" and has_qdq:
        raise EdgekitError(
            "this ONNX is quantized (QDQ) but precision fp32 was asked for", hint="build with precision int8"
        )
    if cfg.precision != "fp16":
        return strongly, False
    if not strongly and has_precision_flags:
        return strongly, True
    if not _onnx_has_fp16(model):
        weakly_possible = has_precision_flags and not has_qdq
        raise EdgekitError(
            f"precision fp16 on a strongly typed network (TensorRT {tensorrt_version}) comes from the graph's "
            "types, and this ONNX has no float16 tensors",
            hint="export an fp16 ONNX, or build fp32"
            + (" (or pass strongly_typed=False for a graph without QDQ)" if weakly_possible else ""),
        )
    return strongly, False


def build_engine(
    onnx_path: str | Path,
    plan_path: str | Path,
    cfg: TrtBuildConfig = TrtBuildConfig(),
    *,
    l4t_path: str | Path = L4T_RELEASE_PATH,
    device: int = 0,
) -> EngineMetadata:
    """Build a static-shape engine from ``onnx_path``, write ``plan_path`` and its sidecar atomically."""
    onnx_path, plan_path = Path(onnx_path), Path(plan_path)
    model = load_onnx(onnx_path)
    onnx_graph_specs(model, onnx_path)  # static shapes only: no optimization profile needed
    trt = require("tensorrt")
    host = host_metadata(l4t_path, device)
    strongly, fp16_flag = resolve_build_flags(cfg, model, host.tensorrt_version, hasattr(trt.BuilderFlag, "FP16"))
    del model

    logger = _make_logger(trt)
    builder = trt.Builder(logger)
    flags = 0
    creation = trt.NetworkDefinitionCreationFlag
    if strongly:
        if not hasattr(creation, "STRONGLY_TYPED"):
            raise TargetUnavailable(
                f"TensorRT {host.tensorrt_version} cannot build strongly typed networks (QDQ graphs)",
                hint="use TensorRT >= 10",
            )
        flags |= 1 << int(creation.STRONGLY_TYPED)
    if int(host.tensorrt_version.split(".")[0]) < 10 and hasattr(creation, "EXPLICIT_BATCH"):
        flags |= 1 << int(creation.EXPLICIT_BATCH)  # implicit by default (and deprecated) from 10
    network = builder.create_network(flags)
    parser = trt.OnnxParser(network, logger)
    if not parser.parse_from_file(str(onnx_path)):
        errors = [str(parser.get_error(i)) for i in range(parser.num_errors)]
        raise EdgekitError(
            f"TensorRT {host.tensorrt_version} cannot parse {onnx_path}: {' | '.join(errors) or 'no parser message'}",
            hint="check the unsupported ops against the target's lint rules (edgekit build lints first)",
        )

    config = builder.create_builder_config()
    config.set_memory_pool_limit(trt.MemoryPoolType.WORKSPACE, cfg.workspace_mib << 20)
    if fp16_flag:
        config.set_flag(trt.BuilderFlag.FP16)
    if cfg.builder_optimization_level is not None:
        config.builder_optimization_level = cfg.builder_optimization_level
    if cfg.timing_cache is not None:
        _load_timing_cache(config, Path(cfg.timing_cache), logger)

    serialized = builder.build_serialized_network(network, config)
    if serialized is None:
        raise EdgekitError(
            f"TensorRT {host.tensorrt_version} failed to build {onnx_path} ({cfg.precision}): "
            f"{' | '.join(logger.errors[-5:]) or 'see the TensorRT log'}",
            hint="try a larger workspace_mib, or precision fp32 to isolate the failing layer",
        )
    if cfg.timing_cache is not None:
        _write_atomic(Path(cfg.timing_cache), memoryview(config.get_timing_cache().serialize()))

    meta = EngineMetadata(
        tensorrt_version=host.tensorrt_version,
        gpu_name=host.gpu_name,
        compute_capability=host.compute_capability,
        l4t=host.l4t,
        source_onnx_sha256=sha256_file(onnx_path),
        precision=cfg.precision,
        created=datetime.now(timezone.utc).isoformat(timespec="seconds"),
        edgekit_version=_edgekit_version(),
    )
    # A plan without a sidecar is refused at load: never leave a new plan next to an old sidecar.
    sidecar_path(plan_path).unlink(missing_ok=True)
    _write_atomic(plan_path, memoryview(serialized))
    write_metadata(plan_path, meta)
    return meta


def _load_timing_cache(config: Any, path: Path, logger: Any) -> None:
    data = path.read_bytes() if path.is_file() else b""
    if not config.set_timing_cache(config.create_timing_cache(data), False):
        log.warning("timing cache %s was made by another TensorRT/GPU; starting a fresh one", path)
        logger.errors.clear()
        config.set_timing_cache(config.create_timing_cache(b""), False)


def engine_mismatches(
    plan_path: str | Path,
    source_onnx: str | Path | None = None,
    host: HostMetadata | None = None,
    precision: str | None = None,
    *,
    l4t_path: str | Path = L4T_RELEASE_PATH,
    device: int = 0,
) -> list[str]:
    """Every reason the engine at ``plan_path`` should not be loaded here (empty: load it).
    ``host`` None reads this host (needs tensorrt)."""
    plan_path = Path(plan_path)
    if not plan_path.is_file():
        return [f"no engine at {plan_path}"]
    try:
        meta = read_metadata(plan_path)
    except BundleError as exc:
        return [f"no usable metadata sidecar ({exc.message}), so its TensorRT/GPU are unknown"]
    source_sha256 = None
    if source_onnx is not None:
        if not Path(source_onnx).is_file():
            raise EdgekitError(
                f"source ONNX {source_onnx} does not exist", hint="check the path, or run edgekit export"
            )
        source_sha256 = sha256_file(source_onnx)
    host = host if host is not None else host_metadata(l4t_path, device)
    return check_compatible(meta, host, source_sha256, precision)


def load_engine(
    plan_path: str | Path,
    source_onnx: str | Path | None = None,
    rebuild: bool = False,
    *,
    host: HostMetadata | None = None,
    precision: str | None = None,
    build_config: TrtBuildConfig | None = None,
    l4t_path: str | Path = L4T_RELEASE_PATH,
    device: int = 0,
) -> "TrtRuntime":
    """A ``TrtRuntime`` for ``plan_path`` once it is known to fit this host (and ``source_onnx``).

    A mismatched, stale or unkeyed engine is refused with every reason, or rebuilt from
    ``source_onnx`` when ``rebuild`` (with ``build_config``, default: the old engine's precision)."""
    plan_path = Path(plan_path)
    reasons = engine_mismatches(plan_path, source_onnx, host, precision, l4t_path=l4t_path, device=device)
    if reasons and not rebuild:
        raise EdgekitError(f"TensorRT engine {plan_path} cannot be used here: {'; '.join(reasons)}", hint=REBUILD_HINT)
    if reasons:
        if source_onnx is None:
            raise EdgekitError(
                f"TensorRT engine {plan_path} needs a rebuild ({'; '.join(reasons)}) but no source ONNX was given",
                hint="pass the ONNX it is built from",
            )
        if build_config is None:
            old = _read_metadata_or_none(plan_path)
            build_config = TrtBuildConfig(precision=precision or (old.precision if old else "fp32"))
        log.warning("rebuilding %s from %s: %s", plan_path, source_onnx, "; ".join(reasons))
        build_engine(source_onnx, plan_path, build_config, l4t_path=l4t_path, device=device)
    return TrtRuntime(plan_path, device=device)


# ---------------------------------------------------------------------------------------------
# Running


class TrtRuntime(BaseRuntime):
    """A deserialized engine with device buffers bound once (``set_tensor_address``).

    Each ``run`` copies the feeds to the device, enqueues the engine and copies the outputs into
    preallocated pinned host arrays, which ``run`` returns and reuses on the next call (copy what
    you keep). ``load_engine`` checks the engine against this host first; this class does not."""

    name = "trt"

    def __init__(self, plan_path: str | Path, device: int = 0):
        super().__init__({}, {})
        trt = require("tensorrt")
        self.plan_path = Path(plan_path)
        if not self.plan_path.is_file():
            raise EdgekitError(f"trt: no engine at {self.plan_path}", hint="build it first (edgekit build)")
        self.metadata = _read_metadata_or_none(self.plan_path)
        self._cuda = _cuda_backend(device)
        self._logger = _make_logger(trt)
        self._trt_runtime = trt.Runtime(self._logger)
        self.engine = self._trt_runtime.deserialize_cuda_engine(self.plan_path.read_bytes())
        if self.engine is None:
            raise EdgekitError(
                f"trt: TensorRT {trt.__version__} cannot deserialize {self.plan_path} "
                f"({' | '.join(self._logger.errors[-3:]) or 'built by another TensorRT version or GPU?'})",
                hint=REBUILD_HINT,
            )
        self.context = self.engine.create_execution_context()
        if self.context is None:
            raise EdgekitError(f"trt: cannot create an execution context for {self.plan_path} (out of GPU memory?)")
        self.inputs, self.outputs = _engine_specs(trt, self.engine, self.plan_path)

        self._device_buffers: dict[str, Any] = {}
        for name, spec in (*self.inputs.items(), *self.outputs.items()):
            buffer = self._cuda.alloc(spec.shape, spec.dtype)
            self._device_buffers[name] = buffer
            if not self.context.set_tensor_address(name, self._cuda.ptr(buffer)):
                raise RuntimeError(f"set_tensor_address failed for {name!r}")
        self._host_buffers = {n: self._cuda.alloc_host(s.shape, s.dtype) for n, s in self.outputs.items()}
        self._host_outputs = {n: self._cuda.host_array(b) for n, b in self._host_buffers.items()}
        self.device = f"cuda:{device}"

    def _run_impl(self, feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        cuda = self._cuda
        for name in self.inputs:
            cuda.htod(self._device_buffers[name], np.ascontiguousarray(feeds[name]))
        if not self.context.execute_async_v3(cuda.stream_handle):
            raise EdgekitError(f"trt: execute_async_v3 failed: {' | '.join(self._logger.errors[-3:])}")
        for name, host in self._host_buffers.items():
            cuda.dtoh(host, self._device_buffers[name])
        cuda.synchronize()
        return dict(self._host_outputs)

    def _close_impl(self) -> None:
        # Context before engine before runtime, and all of them before the memory they point at.
        self.context = None
        self.engine = None
        self._trt_runtime = None
        self._host_outputs = {}
        self._host_buffers = {}
        self._device_buffers = {}
        self._cuda.close()


def _engine_specs(trt: Any, engine: Any, source: Path) -> tuple[dict, dict]:
    names = _trt_dtype_names(trt)
    entries = []
    for i in range(engine.num_io_tensors):
        name = engine.get_tensor_name(i)
        role = "input" if engine.get_tensor_mode(name) == trt.TensorIOMode.INPUT else "output"
        dtype = engine.get_tensor_dtype(name)
        entries.append((role, name, [int(d) for d in engine.get_tensor_shape(name)], names.get(dtype, str(dtype))))
    return specs_from_entries(entries, source)


def _trt_dtype_names(trt: Any) -> dict[Any, str]:
    """TensorRT ``DataType`` -> numpy dtype name, for the members this TensorRT has."""
    pairs = {"FLOAT": "float32", "HALF": "float16", "INT32": "int32", "INT64": "int64", "BOOL": "bool"}
    return {getattr(trt.DataType, k): v for k, v in pairs.items() if hasattr(trt.DataType, k)}


def _make_logger(trt: Any) -> Any:
    """A TensorRT logger that forwards to ``logging`` and keeps errors for our messages."""

    class _Logger(trt.ILogger):
        def __init__(self) -> None:
            trt.ILogger.__init__(self)
            self.errors: list[str] = []

        def log(self, severity: Any, msg: str) -> None:
            if severity in (trt.ILogger.Severity.INTERNAL_ERROR, trt.ILogger.Severity.ERROR):
                self.errors.append(msg)
                log.error("TensorRT: %s", msg)
            elif severity == trt.ILogger.Severity.WARNING:
                log.warning("TensorRT: %s", msg)
            else:
                log.debug("TensorRT: %s", msg)

    return _Logger()


# ---------------------------------------------------------------------------------------------
# CUDA memory: torch.cuda when importable with CUDA, else cuda-python's runtime API


def _cuda_backend(device: int) -> Any:
    torch = _import_optional("torch")
    if torch is not None and torch.cuda.is_available():
        return _TorchCuda(torch, device)
    cudart = _import_cudart()
    if cudart is not None:
        return _CudaPython(cudart, device)
    raise MissingDependency(
        "TensorRT device buffers need torch with CUDA or cuda-python; neither is usable", hint=_CUDA_HINT
    )


class _TorchCuda:
    def __init__(self, torch: Any, device: int):
        self.torch = torch
        self.device = torch.device("cuda", device)
        self.stream = torch.cuda.Stream(device=self.device)
        self.stream_handle = self.stream.cuda_stream

    def _dtype(self, dtype: str) -> Any:
        return getattr(self.torch, "bool" if dtype == "bool" else dtype)

    def alloc(self, shape: tuple[int, ...], dtype: str) -> Any:
        return self.torch.empty(shape, dtype=self._dtype(dtype), device=self.device)

    def ptr(self, buffer: Any) -> int:
        return buffer.data_ptr()

    def alloc_host(self, shape: tuple[int, ...], dtype: str) -> Any:
        return self.torch.empty(shape, dtype=self._dtype(dtype), pin_memory=True)

    def host_array(self, buffer: Any) -> np.ndarray:
        return buffer.numpy()  # shares the pinned memory

    def htod(self, buffer: Any, array: np.ndarray) -> None:
        with self.torch.cuda.stream(self.stream):
            buffer.copy_(self.torch.from_numpy(array), non_blocking=True)

    def dtoh(self, host: Any, buffer: Any) -> None:
        with self.torch.cuda.stream(self.stream):
            host.copy_(buffer, non_blocking=True)

    def synchronize(self) -> None:
        self.stream.synchronize()

    def close(self) -> None:
        self.stream = None


class _CudaPython:
    def __init__(self, cudart: Any, device: int):
        self.cudart = cudart
        _cuda_device_count_or_raise(cudart)
        _cuda_check(cudart.cudaSetDevice(device))
        self.stream = _cuda_check(cudart.cudaStreamCreate())
        self.stream_handle = int(self.stream)
        self._device_ptrs: list[int] = []
        self._host_ptrs: list[int] = []

    def alloc(self, shape: tuple[int, ...], dtype: str) -> tuple[int, int]:
        nbytes = max(1, math.prod(shape) * np.dtype(dtype).itemsize)
        ptr = int(_cuda_check(self.cudart.cudaMalloc(nbytes)))
        self._device_ptrs.append(ptr)
        return ptr, nbytes

    def ptr(self, buffer: tuple[int, int]) -> int:
        return buffer[0]

    def alloc_host(self, shape: tuple[int, ...], dtype: str) -> np.ndarray:
        count = math.prod(shape)
        nbytes = max(1, count * np.dtype(dtype).itemsize)
        ptr = int(_cuda_check(self.cudart.cudaMallocHost(nbytes)))
        self._host_ptrs.append(ptr)
        raw = (ctypes.c_byte * nbytes).from_address(ptr)
        return np.frombuffer(raw, dtype=dtype, count=count).reshape(shape)

    def host_array(self, buffer: np.ndarray) -> np.ndarray:
        return buffer

    def htod(self, buffer: tuple[int, int], array: np.ndarray) -> None:
        kind = self.cudart.cudaMemcpyKind.cudaMemcpyHostToDevice
        _cuda_check(self.cudart.cudaMemcpyAsync(buffer[0], array.ctypes.data, array.nbytes, kind, self.stream))

    def dtoh(self, host: np.ndarray, buffer: tuple[int, int]) -> None:
        kind = self.cudart.cudaMemcpyKind.cudaMemcpyDeviceToHost
        _cuda_check(self.cudart.cudaMemcpyAsync(host.ctypes.data, buffer[0], host.nbytes, kind, self.stream))

    def synchronize(self) -> None:
        _cuda_check(self.cudart.cudaStreamSynchronize(self.stream))

    def close(self) -> None:
        for ptr in self._device_ptrs:
            self.cudart.cudaFree(ptr)
        for ptr in self._host_ptrs:
            self.cudart.cudaFreeHost(ptr)
        self._device_ptrs, self._host_ptrs = [], []
        if self.stream is not None:
            self.cudart.cudaStreamDestroy(self.stream)
            self.stream = None


def _import_optional(module: str) -> Any:
    try:
        return importlib.import_module(module)
    except ImportError:
        return None


def _import_cudart() -> Any:
    # cuda-python >= 12.6 moved the runtime bindings to cuda.bindings; older ones have cuda.cudart.
    return _import_optional("cuda.bindings.runtime") or _import_optional("cuda.cudart")


def _cuda_check(result: tuple) -> Any:
    """Unpack a cuda-python ``(err, *values)`` tuple, raising on an error code."""
    err, *values = result
    if int(err) != 0:
        raise RuntimeError(f"CUDA call failed: {err}")
    return values[0] if len(values) == 1 else tuple(values) or None


def _cuda_device_count_or_raise(cudart: Any) -> None:
    err, count = cudart.cudaGetDeviceCount()
    if int(err) != 0 or count == 0:
        raise TargetUnavailable(
            f"no CUDA GPU is visible ({err})", hint="check the driver (nvidia-smi) and CUDA_VISIBLE_DEVICES"
        )


# ---------------------------------------------------------------------------------------------
# Files


def sha256_file(path: str | Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def _write_atomic(path: Path, data: bytes | memoryview) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        with open(tmp, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def _read_metadata_or_none(plan_path: Path) -> EngineMetadata | None:
    try:
        return read_metadata(plan_path)
    except BundleError:
        return None


def _edgekit_version() -> str | None:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("edgekit")
    except PackageNotFoundError:
        return None
