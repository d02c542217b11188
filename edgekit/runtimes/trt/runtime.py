"""Running an engine: ``load_engine`` (refuse or rebuild one that does not fit this host) and
``TrtRuntime`` (buffers bound once, int64 IO kept on TensorRT 8.x by casting at the boundary)."""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

import edgekit.runtimes.trt.builder as builder
import edgekit.runtimes.trt.memory as memory
import edgekit.runtimes.trt.metadata as metadata
from edgekit._deps import require
from edgekit.errors import BundleError, EdgekitError
from edgekit.runtimes._specs import onnx_graph_specs, specs_from_entries
from edgekit.runtimes.base import BaseRuntime
from edgekit.runtimes.onnx_file import load_onnx
from edgekit.runtimes.trt.builder import TrtBuildConfig
from edgekit.runtimes.trt.metadata import (
    L4T_RELEASE_PATH,
    REBUILD_HINT,
    HostMetadata,
    _read_metadata_or_none,
    check_compatible,
    read_metadata,
    sha256_file,
)

log = logging.getLogger(__name__)
_INT32 = np.iinfo(np.int32)


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
    host = host if host is not None else metadata.host_metadata(l4t_path, device)
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
) -> TrtRuntime:
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
        builder.build_engine(source_onnx, plan_path, build_config, l4t_path=l4t_path, device=device)
    io_dtypes = None
    recorded = _read_metadata_or_none(plan_path)
    if source_onnx is not None and (recorded is None or recorded.io_dtypes is None):
        # A sidecar from an older edgekit: the source ONNX gives the IO contract instead.
        inputs, outputs = onnx_graph_specs(load_onnx(source_onnx), source_onnx)
        io_dtypes = {n: s.dtype for n, s in (*inputs.items(), *outputs.items())}
    return TrtRuntime(plan_path, device=device, io_dtypes=io_dtypes)


class TrtRuntime(BaseRuntime):
    """A deserialized engine with device buffers bound once (``set_tensor_address``).

    Each ``run`` copies the feeds to the device, enqueues the engine and copies the outputs into
    preallocated pinned host arrays, which ``run`` returns and reuses on the next call (copy what
    you keep). Returned arrays stay readable after ``close()``: their memory is freed when the
    last of them is gone. ``load_engine`` checks the engine against this host first; this class
    does not.

    ``io_dtypes`` (default: the sidecar's record of the source ONNX) is the dtype contract
    callers see. TensorRT 8.x engines run INT64 graph IO as INT32; such a tensor keeps its int64
    spec here and is cast at the boundary: feeds are range-checked, then narrowed into a pinned
    int32 buffer; outputs are widened into a preallocated int64 array."""

    name = "trt"

    def __init__(self, plan_path: str | Path, device: int = 0, *, io_dtypes: Mapping[str, str] | None = None):
        super().__init__({}, {})
        trt = require("tensorrt")
        self.plan_path = Path(plan_path)
        if not self.plan_path.is_file():
            raise EdgekitError(f"trt: no engine at {self.plan_path}", hint="build it first (edgekit build)")
        self.model_files = (self.plan_path,)
        self.metadata = _read_metadata_or_none(self.plan_path)
        if io_dtypes is None and self.metadata is not None:
            io_dtypes = self.metadata.io_dtypes
        self._tensorrt_version = str(trt.__version__)
        # TensorRT's execution context, engine and runtime (tensorrt ships no type information).
        self.context: Any = None
        self.engine: Any = None
        self._trt_runtime: Any = None
        self._device_buffers: dict[str, Any] = {}
        self._host_buffers: dict[str, Any] = {}
        self._host_outputs: dict[str, np.ndarray] = {}
        self._engine_host: dict[str, np.ndarray] = {}  # the engine's own host output arrays
        self._narrow_inputs: dict[str, np.ndarray] = {}  # int64 feed -> pinned int32 staging array
        self._widen_outputs: dict[str, np.ndarray] = {}  # int32 engine output -> int64 array returned
        self._cuda = memory.cuda_backend(device)
        try:
            self._load(trt, dict(io_dtypes or {}))
        except BaseException:
            # Nothing of a half-built runtime may outlive it: stream, device and pinned memory.
            self._close_impl()
            raise
        self.device = f"cuda:{device}"

    def _load(self, trt: Any, io_dtypes: dict[str, str]) -> None:
        cuda = self._cuda
        cuda.make_current()  # the engine deserializes onto the current device
        self._logger = builder.make_logger(trt)
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
        engine_inputs, engine_outputs = _engine_specs(trt, self.engine, self.plan_path)
        self.inputs, self.outputs = dict(engine_inputs), dict(engine_outputs)
        for specs in (self.inputs, self.outputs):
            for name, spec in specs.items():
                if spec.dtype == "int32" and io_dtypes.get(name) == "int64":
                    specs[name] = dataclasses.replace(spec, dtype="int64")  # TensorRT 8.x narrowed it

        for name, spec in (*engine_inputs.items(), *engine_outputs.items()):
            buffer = cuda.alloc(spec.shape, spec.dtype)
            self._device_buffers[name] = buffer
            if not self.context.set_tensor_address(name, cuda.ptr(buffer)):
                raise EdgekitError(f"trt: set_tensor_address failed for {name!r} of {self.plan_path}")
        for name, spec in engine_inputs.items():
            if self.inputs[name].dtype != spec.dtype:
                self._narrow_inputs[name] = cuda.host_array(cuda.alloc_host(spec.shape, spec.dtype))
        for name, spec in engine_outputs.items():
            self._host_buffers[name] = cuda.alloc_host(spec.shape, spec.dtype)
            host = cuda.host_array(self._host_buffers[name])
            if self.outputs[name].dtype != spec.dtype:
                self._widen_outputs[name] = np.empty(spec.shape, self.outputs[name].dtype)
                self._host_outputs[name] = self._widen_outputs[name]
            else:
                self._host_outputs[name] = host
        self._engine_host = {n: cuda.host_array(b) for n, b in self._host_buffers.items()}

    def _run_impl(self, feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        cuda = self._cuda
        cuda.make_current()
        for name in self.inputs:
            feed = feeds[name]
            staging = self._narrow_inputs.get(name)
            if staging is not None:
                _check_int32_range(name, feed, self._tensorrt_version)
                np.copyto(staging, feed, casting="unsafe")
                feed = staging
            cuda.htod(self._device_buffers[name], np.ascontiguousarray(feed))
        if not self.context.execute_async_v3(cuda.stream_handle):
            raise EdgekitError(f"trt: execute_async_v3 failed: {' | '.join(self._logger.errors[-3:])}")
        for name, host in self._host_buffers.items():
            cuda.dtoh(host, self._device_buffers[name])
        cuda.synchronize()
        for name, wide in self._widen_outputs.items():
            np.copyto(wide, self._engine_host[name])
        return dict(self._host_outputs)

    def _close_impl(self) -> None:
        # Context before engine before runtime, and all of them before the memory they point at.
        # Pinned host memory is not freed here: arrays run() returned may still view it; it goes
        # when the last of them does (see _CudaPython.alloc_host).
        self.context = None
        self.engine = None
        self._trt_runtime = None
        self._host_outputs = {}
        self._engine_host = {}
        self._host_buffers = {}
        self._narrow_inputs = {}
        self._widen_outputs = {}
        self._device_buffers = {}
        self._cuda.close()


def _check_int32_range(name: str, feed: np.ndarray, version: str) -> None:
    if feed.size and (int(feed.min()) < _INT32.min or int(feed.max()) > _INT32.max):
        raise EdgekitError(
            f"trt: feed {name!r} has values in [{int(feed.min())}, {int(feed.max())}], outside int32; TensorRT "
            f"{version} runs this engine's int64 inputs as int32 (its ONNX parser casts INT64 down)",
            hint="keep token ids and positions below 2**31, or use TensorRT >= 10, which keeps INT64",
        )


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
