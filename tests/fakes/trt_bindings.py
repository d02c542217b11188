"""Recording fakes of the ``tensorrt`` and cuda-python runtime bindings, per TensorRT version.

They behave like the real bindings where edgekit depends on it (read from the TensorRT 8.5.3,
8.6.1, 10.3 and 11.x Python API docs, onnx-tensorrt and Polygraphy):

- which enum members and attributes exist: ``IBuilderConfig.builder_optimization_level`` only
  from 8.6 (setting it on 8.5 raises AttributeError, as a pybind11 object does);
  ``DataType.INT64`` and ``NetworkDefinitionCreationFlag.STRONGLY_TYPED`` from 10;
  ``BuilderFlag.FP16/INT8`` gone in 11 (strong typing only);
- the 8.x ONNX parser casts INT64 graph inputs/outputs down to INT32 (onnx-tensorrt 8.x
  ``convertDtype``: INT64 -> kINT32); 10.x keeps INT64; 8.5/8.6 parse opsets up to 17;
- ``create_timing_cache`` returns None (after logging an error) for a cache from another
  TensorRT version; ``set_timing_cache`` returns False for a cache from another GPU;
  ``deserialize_cuda_engine`` returns None for a plan from another version;
- a weakly typed build of a Q/DQ graph without ``BuilderFlag.INT8`` fails (returns None after an
  error: "To enable any quantization operations, the INT8 flag must be set");
- everything is built/deserialized on the *current* CUDA device (``cudaSetDevice``).

The engine is real enough to run: a plan is the source ONNX plus the IO TensorRT would give
it, and ``execute_async_v3`` evaluates the ONNX with onnxruntime on the bytes in fake device
memory, so ``TrtRuntime`` runs end to end, with its copies, casts and buffer lifetimes.
Pinned host memory is real (ctypes) memory; ``cudaFreeHost`` overwrites it with 0xEE bytes
before releasing it, so a read through a freed buffer shows up as garbage in a test.
"""

from __future__ import annotations

import ctypes
import enum
import json
import types
from dataclasses import dataclass, field
from typing import Any

import numpy as np

VERSIONS = ("8.5.2.2", "8.6.2.3", "10.3.0", "11.1.0")
# onnx TensorProto element type -> DataType member name.
_ONNX_TO_TRT = {1: "FLOAT", 10: "HALF", 6: "INT32", 7: "INT64", 9: "BOOL", 3: "INT8", 2: "UINT8"}
_TRT_TO_NUMPY = {
    "FLOAT": "float32",
    "HALF": "float16",
    "INT32": "int32",
    "INT64": "int64",
    "BOOL": "bool",
    "INT8": "int8",
    "UINT8": "uint8",
}
POISON = 0xEE


def _major(version: str) -> int:
    return int(version.split(".")[0])


def _minor(version: str) -> tuple[int, int]:
    major, minor = version.split(".")[:2]
    return int(major), int(minor)


# ---------------------------------------------------------------------------------------------
# cuda-python (cuda.bindings.runtime): every call returns (cudaError_t, *values)


class cudaError_t(enum.IntEnum):  # noqa: N801 - the binding's own name
    cudaSuccess = 0
    cudaErrorInvalidValue = 1
    cudaErrorMemoryAllocation = 2
    cudaErrorInvalidDevice = 101
    cudaErrorNoDevice = 100


class cudaMemcpyKind(enum.IntEnum):  # noqa: N801
    cudaMemcpyHostToDevice = 1
    cudaMemcpyDeviceToHost = 2


class cudaStream_t:  # noqa: N801
    def __init__(self, handle: int):
        self._handle = handle

    def __int__(self) -> int:
        return self._handle


@dataclass
class _Props:
    name: bytes
    major: int
    minor: int


@dataclass
class FakeCuda:
    """The cuda-python runtime API over fake devices: device memory is a dict of bytearrays keyed
    by fake pointers; pinned host memory is real ctypes memory (its address is dereferenced by
    numpy and by ``cudaMemcpyAsync``)."""

    devices: tuple[tuple[str, str], ...] = (("Orin", "8.7"),)
    current: int = 0
    calls: list[tuple] = field(default_factory=list)
    device_memory: dict[int, bytearray] = field(default_factory=dict)
    host_memory: dict[int, Any] = field(default_factory=dict)  # ptr -> ctypes buffer (kept alive)
    freed_host: list[int] = field(default_factory=list)
    streams: set[int] = field(default_factory=set)
    _next: int = 0x7F00_0000_0000

    def module(self) -> types.ModuleType:
        mod = types.ModuleType("cuda.bindings.runtime")
        mod.cudaError_t = cudaError_t
        mod.cudaMemcpyKind = cudaMemcpyKind
        for name in (
            "cudaGetDeviceCount",
            "cudaSetDevice",
            "cudaGetDevice",
            "cudaGetDeviceProperties",
            "cudaStreamCreate",
            "cudaStreamDestroy",
            "cudaStreamSynchronize",
            "cudaMalloc",
            "cudaFree",
            "cudaMallocHost",
            "cudaFreeHost",
            "cudaMemcpyAsync",
        ):
            setattr(mod, name, getattr(self, name))
        return mod

    def _ok(self, *values: Any) -> tuple:
        return (cudaError_t.cudaSuccess, *values)

    def cudaGetDeviceCount(self):  # noqa: N802
        self.calls.append(("cudaGetDeviceCount",))
        return self._ok(len(self.devices))

    def cudaSetDevice(self, device: int):  # noqa: N802
        self.calls.append(("cudaSetDevice", device))
        if not 0 <= device < len(self.devices):
            return (cudaError_t.cudaErrorInvalidDevice,)
        self.current = device
        return self._ok()

    def cudaGetDevice(self):  # noqa: N802
        return self._ok(self.current)

    def cudaGetDeviceProperties(self, device: int):  # noqa: N802
        if not 0 <= device < len(self.devices):
            return (cudaError_t.cudaErrorInvalidDevice, None)
        name, cc = self.devices[device]
        major, minor = (int(v) for v in cc.split("."))
        return self._ok(_Props(name.encode() + b"\x00" * 8, major, minor))

    def cudaStreamCreate(self):  # noqa: N802
        self._next += 0x100
        self.streams.add(self._next)
        self.calls.append(("cudaStreamCreate", self._next))
        return self._ok(cudaStream_t(self._next))

    def cudaStreamDestroy(self, stream):  # noqa: N802
        self.streams.discard(int(stream))
        self.calls.append(("cudaStreamDestroy", int(stream)))
        return self._ok()

    def cudaStreamSynchronize(self, stream):  # noqa: N802
        assert int(stream) in self.streams, "synchronize on a destroyed stream"
        return self._ok()

    def cudaMalloc(self, nbytes: int):  # noqa: N802
        self._next += 0x10000
        self.device_memory[self._next] = bytearray(nbytes)
        return self._ok(self._next)

    def cudaFree(self, ptr: int):  # noqa: N802
        del self.device_memory[int(ptr)]
        return self._ok()

    def cudaMallocHost(self, nbytes: int):  # noqa: N802
        buf = (ctypes.c_byte * nbytes)()
        ptr = ctypes.addressof(buf)
        self.host_memory[ptr] = buf
        return self._ok(ptr)

    def cudaFreeHost(self, ptr: int):  # noqa: N802
        buf = self.host_memory.pop(int(ptr))
        ctypes.memset(ctypes.addressof(buf), POISON, ctypes.sizeof(buf))
        # Keep the poisoned bytes mapped (a real free would unmap or reuse them): a view that
        # outlived the free reads 0xEE instead of crashing the test process.
        self.freed_host.append(int(ptr))
        self._graveyard.append(buf)
        return self._ok()

    def __post_init__(self) -> None:
        self._graveyard: list[Any] = []

    def memcpy_kind_ok(self, kind) -> bool:
        return kind in (cudaMemcpyKind.cudaMemcpyHostToDevice, cudaMemcpyKind.cudaMemcpyDeviceToHost)

    def cudaMemcpyAsync(self, dst, src, nbytes, kind, stream):  # noqa: N802
        assert int(stream) in self.streams, "copy on a destroyed stream"
        if kind == cudaMemcpyKind.cudaMemcpyHostToDevice:
            mem = self.device_memory[int(dst)]
            mem[:nbytes] = ctypes.string_at(int(src), nbytes)
        else:
            mem = self.device_memory[int(src)]
            ctypes.memmove(int(dst), bytes(mem[:nbytes]), nbytes)
        return self._ok()

    def read(self, ptr: int, dtype: str, shape: tuple[int, ...]) -> np.ndarray:
        return np.frombuffer(bytes(self.device_memory[ptr]), dtype=dtype).reshape(shape).copy()

    def write(self, ptr: int, array: np.ndarray) -> None:
        data = np.ascontiguousarray(array).tobytes()
        self.device_memory[ptr][: len(data)] = data


# ---------------------------------------------------------------------------------------------
# tensorrt


class FakeTensorRT:
    """``module()`` is a ``tensorrt`` of ``version``; ``calls`` records what edgekit asked of it;
    ``cuda`` is the FakeCuda whose current device builds and deserializations happen on."""

    def __init__(self, version: str, cuda: FakeCuda):
        self.version = version
        self.cuda = cuda
        self.calls: list[tuple] = []
        self.log_counts: dict[str, int] = {}
        self.mod = self._make_module()

    # -- enums per version ----------------------------------------------------------------

    def _make_module(self) -> types.ModuleType:
        v, major = self.version, _major(self.version)
        trt = types.ModuleType("tensorrt")
        trt.__version__ = v
        severity = enum.IntEnum(
            "Severity", [("INTERNAL_ERROR", 0), ("ERROR", 1), ("WARNING", 2), ("INFO", 3), ("VERBOSE", 4)]
        )

        class ILogger:
            Severity = severity
            INTERNAL_ERROR, ERROR, WARNING, INFO, VERBOSE = (severity[n] for n in severity.__members__)

            def __init__(self) -> None:
                pass

        trt.ILogger = ILogger
        trt.Logger = ILogger  # trt.Logger.WARNING etc. are the same Severity values
        dtypes = ["FLOAT", "HALF", "INT8", "INT32", "BOOL", "UINT8"]
        if _minor(v) >= (8, 6):
            dtypes.append("FP8")
        if major >= 10:
            dtypes += ["BF16", "INT64", "INT4"]
        trt.DataType = enum.Enum("DataType", dtypes)
        flags = [
            "FP16",
            "INT8",
            "DEBUG",
            "GPU_FALLBACK",
            "REFIT",
            "DISABLE_TIMING_CACHE",
            "TF32",
            "SPARSE_WEIGHTS",
            "OBEY_PRECISION_CONSTRAINTS",
            "PREFER_PRECISION_CONSTRAINTS",
            "DIRECT_IO",
        ]
        if major >= 11:
            flags = [
                f
                for f in flags
                if f not in ("FP16", "INT8", "OBEY_PRECISION_CONSTRAINTS", "PREFER_PRECISION_CONSTRAINTS", "DIRECT_IO")
            ]
        trt.BuilderFlag = enum.Enum("BuilderFlag", flags)
        creation = (
            [("EXPLICIT_BATCH", 0), ("EXPLICIT_PRECISION", 1)]
            if major < 10
            else [("EXPLICIT_BATCH", 0), ("STRONGLY_TYPED", 1)]
        )
        if major >= 11:
            creation = [("STRONGLY_TYPED", 1)]
        trt.NetworkDefinitionCreationFlag = enum.IntEnum("NetworkDefinitionCreationFlag", creation)
        trt.MemoryPoolType = enum.Enum("MemoryPoolType", ["WORKSPACE", "DLA_MANAGED_SRAM"])
        trt.TensorIOMode = enum.Enum("TensorIOMode", ["NONE", "INPUT", "OUTPUT"])
        fake = self

        trt.Builder = lambda logger: _Builder(fake, logger)
        trt.OnnxParser = lambda network, logger: _Parser(fake, network, logger)
        trt.Runtime = lambda logger: _Runtime(fake, logger)
        return trt

    def log(self, logger: Any, severity: str, msg: str) -> None:
        self.log_counts[severity] = self.log_counts.get(severity, 0) + 1
        logger.log(self.mod.ILogger.Severity[severity], msg)


class _Network:
    def __init__(self, flags: int):
        self.flags = flags
        self.io: list[dict[str, Any]] = []
        self.onnx_bytes = b""
        self.has_qdq = False


class _Builder:
    def __init__(self, fake: FakeTensorRT, logger: Any):
        self.fake, self.logger = fake, logger
        fake.current_logger = logger
        fake.calls.append(("Builder", fake.cuda.current))

    def create_network(self, flags: int = 0) -> _Network:
        self.fake.calls.append(("create_network", flags))
        return _Network(flags)

    def create_builder_config(self) -> Any:
        return (_Config86 if _minor(self.fake.version) >= (8, 6) else _Config85)(self.fake)

    def build_serialized_network(self, network: _Network, config: Any) -> Any:
        fake, trt = self.fake, self.fake.mod
        fake.calls.append(("build_serialized_network", fake.cuda.current))
        for i in range(200):  # a real build logs thousands of VERBOSE lines
            fake.log(self.logger, "VERBOSE", f"tactic {i}")
        strongly = hasattr(trt.NetworkDefinitionCreationFlag, "STRONGLY_TYPED") and bool(
            network.flags & (1 << int(trt.NetworkDefinitionCreationFlag.STRONGLY_TYPED))
        )
        if _major(fake.version) >= 11:
            strongly = True
        if network.has_qdq and not strongly and trt.BuilderFlag.INT8 not in config.flags:
            fake.log(self.logger, "ERROR", "To enable any quantization operations, the INT8 flag must be set")
            return None
        plan = {
            "version": fake.version,
            "device": fake.cuda.current,
            "io": network.io,
            "flags": sorted(f.name for f in config.flags),
            "strongly_typed": strongly,
            "onnx": network.onnx_bytes.hex(),
        }
        return bytearray(json.dumps(plan).encode())


class _TimingCache:
    def __init__(self, version: str, device: str, entries: int = 0):
        self.version, self.device, self.entries = version, device, entries

    def serialize(self) -> bytearray:
        return bytearray(json.dumps({"version": self.version, "device": self.device, "entries": self.entries}).encode())


class _Config85:
    """IBuilderConfig of TensorRT 8.5: no ``builder_optimization_level`` (slots mimic pybind11:
    setting an unknown attribute raises AttributeError)."""

    __slots__ = ("fake", "flags", "pools", "timing_cache")

    def __init__(self, fake: FakeTensorRT):
        self.fake = fake
        self.flags = {fake.mod.BuilderFlag.TF32}  # TF32 is on by default
        self.pools: dict[Any, int] = {}
        self.timing_cache: _TimingCache | None = None

    def set_memory_pool_limit(self, pool: Any, size: int) -> None:
        self.pools[pool] = size

    def set_flag(self, flag: Any) -> None:
        self.fake.calls.append(("set_flag", flag.name))
        self.flags.add(flag)

    def clear_flag(self, flag: Any) -> None:
        self.fake.calls.append(("clear_flag", flag.name))
        self.flags.discard(flag)

    def get_flag(self, flag: Any) -> bool:
        return flag in self.flags

    def create_timing_cache(self, data: bytes) -> _TimingCache | None:
        fake = self.fake
        fake.calls.append(("create_timing_cache", len(data)))
        device = fake.cuda.devices[fake.cuda.current][0]
        if not data:
            return _TimingCache(fake.version, device)
        doc = json.loads(bytes(data))
        if doc["version"] != fake.version:
            # What TensorRT does with a cache serialized by another version: an error, no cache.
            fake.log(
                self.fake_logger,
                "ERROR",
                f"Timing cache was created by TensorRT {doc['version']}, this is {fake.version}",
            )
            return None
        return _TimingCache(doc["version"], doc["device"], doc["entries"])

    def set_timing_cache(self, cache: _TimingCache, ignore_mismatch: bool) -> bool:
        if not isinstance(cache, _TimingCache):
            raise TypeError("set_timing_cache(): incompatible function arguments")  # None is not an ITimingCache
        fake = self.fake
        fake.calls.append(("set_timing_cache", cache.entries))
        if cache.device != fake.cuda.devices[fake.cuda.current][0] and not ignore_mismatch:
            fake.log(self.fake_logger, "ERROR", "Timing cache device mismatch")
            return False
        self.timing_cache = _TimingCache(cache.version, cache.device, cache.entries + 1)
        return True

    def get_timing_cache(self) -> _TimingCache | None:
        return self.timing_cache

    @property
    def fake_logger(self) -> Any:
        return self.fake.current_logger


class _Config86(_Config85):
    __slots__ = ("builder_optimization_level",)

    def __init__(self, fake: FakeTensorRT):
        super().__init__(fake)
        self.builder_optimization_level = 3


class _Parser:
    def __init__(self, fake: FakeTensorRT, network: _Network, logger: Any):
        self.fake, self.network, self.logger = fake, network, logger
        self.errors: list[str] = []

    @property
    def num_errors(self) -> int:
        return len(self.errors)

    def get_error(self, i: int) -> str:
        return self.errors[i]

    def parse_from_file(self, path: str) -> bool:
        import onnx

        fake, major = self.fake, _major(self.fake.version)
        model = onnx.load(path)
        opset = next(o.version for o in model.opset_import if o.domain in ("", "ai.onnx"))
        max_opset = 17 if major < 10 else 20 if major == 10 else 22
        if opset > max_opset:
            self.errors.append(f"Unsupported ONNX opset {opset}; this parser supports up to {max_opset}")
            return False
        if major < 10:
            for value in (*model.graph.input, *model.graph.output):
                if value.type.tensor_type.elem_type == 7:
                    fake.log(
                        self.logger,
                        "WARNING",
                        "Your ONNX model has been generated with INT64 weights, while "
                        "TensorRT does not natively support INT64. Attempting to cast down to INT32.",
                    )
                    break
        initializers = {i.name for i in model.graph.initializer}
        for role, values in (("INPUT", model.graph.input), ("OUTPUT", model.graph.output)):
            for value in values:
                if value.name in initializers:
                    continue
                dtype = _ONNX_TO_TRT[value.type.tensor_type.elem_type]
                if dtype == "INT64" and major < 10:
                    dtype = "INT32"  # onnx-tensorrt 8.x: INT64 IO becomes INT32
                shape = [d.dim_value for d in value.type.tensor_type.shape.dim]
                self.network.io.append({"name": value.name, "mode": role, "dtype": dtype, "shape": shape})
        self.network.has_qdq = any(n.op_type in ("QuantizeLinear", "DequantizeLinear") for n in model.graph.node)
        self.network.onnx_bytes = model.SerializeToString()
        return True


class _Runtime:
    def __init__(self, fake: FakeTensorRT, logger: Any):
        self.fake, self.logger = fake, logger

    def deserialize_cuda_engine(self, data: bytes) -> _Engine | None:
        fake = self.fake
        fake.calls.append(("deserialize_cuda_engine", fake.cuda.current))
        try:
            plan = json.loads(bytes(data))
        except ValueError:
            fake.log(
                self.logger,
                "ERROR",
                "1: [stdArchiveReader.cpp::StdArchiveReader::32] Error Code 1: Serialization "
                "(Serialization assertion magicTagRead == kMAGIC_TAG failed.Magic tag does not match)",
            )
            return None
        if plan["version"] != fake.version:
            fake.log(
                self.logger,
                "ERROR",
                f"The engine plan file is not compatible with this version of TensorRT, "
                f"expecting library version {fake.version} got {plan['version']}, please rebuild.",
            )
            return None
        if plan["device"] != fake.cuda.current:
            fake.log(self.logger, "ERROR", "engine built on another device")
            return None
        return _Engine(fake, plan)


class _Engine:
    def __init__(self, fake: FakeTensorRT, plan: dict[str, Any]):
        self.fake, self.plan = fake, plan
        self.io = {t["name"]: t for t in plan["io"]}
        self.names = [t["name"] for t in plan["io"]]

    @property
    def num_io_tensors(self) -> int:
        return len(self.names)

    def get_tensor_name(self, i: int) -> str:
        return self.names[i]

    def get_tensor_mode(self, name: str) -> Any:
        return self.fake.mod.TensorIOMode[self.io[name]["mode"]]

    def get_tensor_dtype(self, name: str) -> Any:
        return self.fake.mod.DataType[self.io[name]["dtype"]]

    def get_tensor_shape(self, name: str) -> tuple[int, ...]:
        return tuple(self.io[name]["shape"])

    def create_execution_context(self) -> _Context:
        return _Context(self)


class _Context:
    def __init__(self, engine: _Engine):
        self.engine = engine
        self.addresses: dict[str, int] = {}
        self.runs = 0

    def set_tensor_address(self, name: str, ptr: int) -> bool:
        if name not in self.engine.io:
            return False
        self.addresses[name] = int(ptr)
        return True

    def execute_async_v3(self, stream: int) -> bool:
        import onnxruntime as ort

        engine, cuda = self.engine, self.engine.fake.cuda
        assert int(stream) in cuda.streams, "enqueue on a destroyed stream"
        if cuda.current != engine.plan["device"]:
            return False
        sess = ort.InferenceSession(bytes.fromhex(engine.plan["onnx"]), providers=["CPUExecutionProvider"])
        onnx_types = {i.name: i.type for i in sess.get_inputs()}
        feeds = {}
        for name, t in engine.io.items():
            if t["mode"] != "INPUT":
                continue
            arr = cuda.read(self.addresses[name], _TRT_TO_NUMPY[t["dtype"]], tuple(t["shape"]))
            feeds[name] = arr.astype(np.int64) if onnx_types[name] == "tensor(int64)" else arr
        outputs = dict(zip([o.name for o in sess.get_outputs()], sess.run(None, feeds)))
        for name, t in engine.io.items():
            if t["mode"] == "OUTPUT":
                cuda.write(self.addresses[name], outputs[name].astype(_TRT_TO_NUMPY[t["dtype"]]))
        self.runs += 1
        return True


# ---------------------------------------------------------------------------------------------
# Installing them


def install(monkeypatch: Any, version: str, devices: tuple[tuple[str, str], ...] = (("Orin", "8.7"),)) -> FakeTensorRT:
    """Put a fake ``tensorrt`` of ``version`` and fake cuda-python runtime bindings in
    ``sys.modules`` (restored by ``monkeypatch``), and keep edgekit off torch.cuda."""
    import sys

    from edgekit.runtimes.trt import memory

    cuda = FakeCuda(devices=devices)
    fake = FakeTensorRT(version, cuda)
    fake.current_logger = None
    runtime_mod = cuda.module()
    bindings = types.ModuleType("cuda.bindings")
    bindings.runtime = runtime_mod
    cuda_pkg = types.ModuleType("cuda")
    cuda_pkg.bindings = bindings
    monkeypatch.setitem(sys.modules, "tensorrt", fake.mod)
    monkeypatch.setitem(sys.modules, "cuda", cuda_pkg)
    monkeypatch.setitem(sys.modules, "cuda.bindings", bindings)
    monkeypatch.setitem(sys.modules, "cuda.bindings.runtime", runtime_mod)
    # torch.cuda is the other memory backend; these tests drive the cuda-python one.
    real_import = memory._import_optional
    monkeypatch.setattr(memory, "_import_optional", lambda name: None if name == "torch" else real_import(name))
    return fake
