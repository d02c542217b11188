"""TensorRT backend: build static-shape engines from ONNX, key them to the host, run them.

An engine only runs on the TensorRT version and GPU (and, on Jetson, the L4T/JetPack release)
that built it, so every ``.plan`` gets a sidecar ``<plan>.json`` (``EngineMetadata``) and
``load_engine`` refuses, listing every reason, or rebuilds when asked.

Written against the name-based IO API that TensorRT 8.5 introduced (``execute_async_v3``,
``set_tensor_address``), so it runs on JetPack 5 (8.5.2), JetPack 6.0 (8.6.2), JetPack 6.1/6.2
(10.3) and x86 wheels (10.x, 11.x). What differs between them is detected with ``hasattr`` on
the module, never from the version string alone (Polygraphy's way):

- 8.x: the ONNX parser casts INT64 graph IO down to INT32, so ``TrtRuntime`` keeps the graph's
  int64 contract and casts at the boundary (range-checked); no strongly typed networks, so an
  explicitly quantized (Q/DQ) graph builds weakly typed with ``BuilderFlag.INT8`` set;
  8.5 has no ``builder_optimization_level``.
- 10.x: INT64 IO, ``STRONGLY_TYPED`` networks (a Q/DQ graph builds strongly typed by default).
- 11.x: strongly typed only (no ``BuilderFlag.FP16/INT8``).

``tensorrt``, ``torch`` and ``cuda-python`` are imported lazily.
"""

from __future__ import annotations

import ctypes
import dataclasses
import hashlib
import importlib
import json
import logging
import math
import os
import weakref
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
_CUDA_HINT = (
    "pip install 'edgekit[trt]' on x86 (brings cuda-python); on Jetson pip install the cuda-python of the "
    "JetPack's CUDA major ('cuda-python>=12,<13' on JetPack 6, 'cuda-python>=11.8,<12' on JetPack 5), "
    "or use a torch build with CUDA"
)
_INT32 = np.iinfo(np.int32)

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
    # IO dtypes of the source ONNX ({name: "int64", ...}): the contract callers feed, which
    # TensorRT 8.x's engine may narrow (INT64 -> INT32). None in sidecars of older edgekits.
    io_dtypes: Mapping[str, str] | None = None

    def to_json(self) -> dict[str, Any]:
        doc = {"schema": ENGINE_SCHEMA, **asdict(self)}
        doc["io_dtypes"] = dict(self.io_dtypes) if self.io_dtypes is not None else None
        return doc

    @classmethod
    def from_json(cls, doc: Mapping[str, Any]) -> "EngineMetadata":
        if doc.get("schema") != ENGINE_SCHEMA:
            raise BundleError(f"engine metadata schema {doc.get('schema')!r} is unknown; expected {ENGINE_SCHEMA!r}")
        required = [f for f in cls.__dataclass_fields__ if f not in ("edgekit_version", "io_dtypes")]
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
    # None = auto: True for QDQ graphs where this TensorRT can build strongly typed networks
    # (10.x) and always on 11.x (its only mode); 8.x builds QDQ graphs weakly typed with
    # BuilderFlag.INT8. Strongly typed, precision comes from the graph's types.
    strongly_typed: bool | None = None
    # 0..5 (TensorRT default 3): higher searches more tactics for a faster engine, builds slower.
    # TensorRT 8.5 has no such setting: ignored there with a warning.
    builder_optimization_level: int | None = None

    def __post_init__(self) -> None:
        if self.precision not in PRECISIONS:
            raise UsageError(f"precision {self.precision!r} is unknown; valid: {', '.join(PRECISIONS)}")
        if not isinstance(self.workspace_mib, int) or self.workspace_mib <= 0:
            raise UsageError(f"workspace_mib must be a positive int, got {self.workspace_mib!r}")
        level = self.builder_optimization_level
        if level is not None and level not in range(6):
            raise UsageError(f"builder_optimization_level {level!r} is invalid; valid: 0..5 or None")


@dataclass(frozen=True)
class TrtFeatures:
    """What a TensorRT Python module offers that edgekit's build depends on (read with
    ``hasattr``; ``for_version`` gives the documented answer for a version string)."""

    version: str
    strongly_typed: bool  # NetworkDefinitionCreationFlag.STRONGLY_TYPED (10.x+)
    precision_flags: bool  # BuilderFlag.FP16 / INT8 (removed in 11.x)
    weakly_typed: bool  # weakly typed networks exist (not in 11.x)
    int64_io: bool  # DataType.INT64: engines keep INT64 IO (8.x casts it to INT32)

    @classmethod
    def of(cls, trt: Any) -> "TrtFeatures":
        version = str(trt.__version__)
        has_strong = hasattr(trt.NetworkDefinitionCreationFlag, "STRONGLY_TYPED")
        return cls(version, has_strong, hasattr(trt.BuilderFlag, "FP16"), _major(version) < 11,
                   hasattr(trt.DataType, "INT64"))

    @classmethod
    def for_version(cls, version: str) -> "TrtFeatures":
        major = _major(version)
        return cls(version, major >= 10, major < 11, major < 11, major >= 10)


@dataclass(frozen=True)
class BuildFlags:
    """How ``build_engine`` sets up the network and builder config for one build."""

    strongly_typed: bool
    fp16: bool  # set BuilderFlag.FP16 (weakly typed fp16)
    int8: bool  # set BuilderFlag.INT8 (weakly typed Q/DQ: TensorRT requires it for any quantization)
    no_tf32: bool  # clear BuilderFlag.TF32: "fp32" means fp32 (TF32 rounds matmul inputs to 10 bits)
    notes: tuple[str, ...] = ()  # facts about this engine's precision a user should know


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
    cfg: TrtBuildConfig, model: Any, tensorrt_version: str, features: TrtFeatures | None = None
) -> BuildFlags:
    """The network/config flags for building ``model`` (an ``onnx.ModelProto``) in
    ``cfg.precision``, or an error when that precision cannot come out of this graph on this
    TensorRT. ``features`` None: what ``tensorrt_version`` documents."""
    f = features or TrtFeatures.for_version(tensorrt_version)
    has_qdq = onnx_has_qdq(model)
    if cfg.precision == "int8" and not has_qdq:
        raise EdgekitError(
            "precision int8 needs an explicitly quantized (QDQ) ONNX; this graph has no QuantizeLinear nodes",
            hint="quantize it first (edgekit quantize with the trt profile)",
        )
    if cfg.precision == "fp32" and has_qdq:
        raise EdgekitError(
            "this ONNX is quantized (QDQ) but precision fp32 was asked for", hint="build with precision int8"
        )
    if cfg.strongly_typed is None:
        strongly = not f.weakly_typed or (has_qdq and f.strongly_typed)
    else:
        strongly = cfg.strongly_typed
    if strongly and not f.strongly_typed:
        raise TargetUnavailable(
            f"TensorRT {f.version} cannot build strongly typed networks (from 10.0)",
            hint="leave strongly_typed unset: Q/DQ graphs then build weakly typed with the INT8 flag",
        )
    if not strongly and not f.weakly_typed:
        raise UsageError(f"TensorRT {f.version} builds strongly typed networks only; strongly_typed=False is invalid")
    notes: list[str] = []
    fp16 = int8 = False
    if cfg.precision == "int8":
        if strongly:
            notes.append(
                "strongly typed INT8: only the layers inside Q/DQ pairs run in INT8; every other layer keeps the "
                "graph's type (FP32 here), so an fp16 engine can be faster than this one: measure both"
            )
        else:
            int8 = True
            notes.append("weakly typed INT8 (BuilderFlag.INT8): layers outside Q/DQ pairs run in FP32")
    elif cfg.precision == "fp16":
        if not strongly and f.precision_flags:
            fp16 = True
        elif not _onnx_has_fp16(model):
            weakly_possible = f.weakly_typed and f.precision_flags and not has_qdq
            raise EdgekitError(
                f"precision fp16 on a strongly typed network (TensorRT {f.version}) comes from the graph's "
                "types, and this ONNX has no float16 tensors",
                hint="export an fp16 ONNX, or build fp32"
                + (" (or pass strongly_typed=False for a graph without QDQ)" if weakly_possible else ""),
            )
    return BuildFlags(strongly, fp16, int8, no_tf32=cfg.precision == "fp32", notes=tuple(notes))


def build_engine(
    onnx_path: str | Path,
    plan_path: str | Path,
    cfg: TrtBuildConfig = TrtBuildConfig(),
    *,
    l4t_path: str | Path = L4T_RELEASE_PATH,
    device: int = 0,
) -> EngineMetadata:
    """Build a static-shape engine from ``onnx_path`` on CUDA device ``device``, write
    ``plan_path`` and its sidecar atomically."""
    onnx_path, plan_path = Path(onnx_path), Path(plan_path)
    model = load_onnx(onnx_path)
    graph_inputs, graph_outputs = onnx_graph_specs(model, onnx_path)  # static shapes only: no profile needed
    io_dtypes = {n: s.dtype for n, s in (*graph_inputs.items(), *graph_outputs.items())}
    trt = require("tensorrt")
    host = host_metadata(l4t_path, device)
    features = TrtFeatures.of(trt)
    flags = resolve_build_flags(cfg, model, host.tensorrt_version, features)
    del model
    for note in flags.notes:
        log.info("%s: %s", plan_path.name, note)

    # TensorRT builds for the current CUDA device: make it device N before touching the builder.
    select_device(device)
    logger = _make_logger(trt)
    builder = trt.Builder(logger)
    network_flags = 0
    creation = trt.NetworkDefinitionCreationFlag
    if flags.strongly_typed:
        network_flags |= 1 << int(creation.STRONGLY_TYPED)
    if _major(host.tensorrt_version) < 10 and hasattr(creation, "EXPLICIT_BATCH"):
        network_flags |= 1 << int(creation.EXPLICIT_BATCH)  # 8.x: implicit batch unless asked; 10+: deprecated
    network = builder.create_network(network_flags)
    parser = trt.OnnxParser(network, logger)
    if not parser.parse_from_file(str(onnx_path)):
        errors = [str(parser.get_error(i)) for i in range(parser.num_errors)]
        raise EdgekitError(
            f"TensorRT {host.tensorrt_version} cannot parse {onnx_path}: {' | '.join(errors) or 'no parser message'}",
            hint="check the unsupported ops against the target's lint rules (edgekit build lints first)",
        )

    config = builder.create_builder_config()
    config.set_memory_pool_limit(trt.MemoryPoolType.WORKSPACE, cfg.workspace_mib << 20)
    if flags.fp16:
        config.set_flag(trt.BuilderFlag.FP16)
    if flags.int8:
        config.set_flag(trt.BuilderFlag.INT8)
    if flags.no_tf32 and hasattr(trt.BuilderFlag, "TF32"):
        config.clear_flag(trt.BuilderFlag.TF32)
    if cfg.builder_optimization_level is not None:
        # Added in 8.6: on 8.5 the attribute does not exist (Polygraphy guards it the same way).
        try:
            config.builder_optimization_level = cfg.builder_optimization_level
        except AttributeError:
            log.warning("TensorRT %s has no builder_optimization_level; building with its default tactics",
                        host.tensorrt_version)
    cache = _load_timing_cache(config, Path(cfg.timing_cache), logger) if cfg.timing_cache is not None else False

    serialized = builder.build_serialized_network(network, config)
    if serialized is None:
        raise EdgekitError(
            f"TensorRT {host.tensorrt_version} failed to build {onnx_path} ({cfg.precision}): "
            f"{' | '.join(logger.errors[-5:]) or 'see the TensorRT log'}",
            hint="try a larger workspace_mib, or precision fp32 to isolate the failing layer",
        )
    if cache:
        updated = config.get_timing_cache()
        if updated is not None:
            _write_atomic(Path(cfg.timing_cache), memoryview(updated.serialize()))

    meta = EngineMetadata(
        tensorrt_version=host.tensorrt_version,
        gpu_name=host.gpu_name,
        compute_capability=host.compute_capability,
        l4t=host.l4t,
        source_onnx_sha256=sha256_file(onnx_path),
        precision=cfg.precision,
        created=datetime.now(timezone.utc).isoformat(timespec="seconds"),
        edgekit_version=_edgekit_version(),
        io_dtypes=io_dtypes,
    )
    # A plan without a sidecar is refused at load: never leave a new plan next to an old sidecar.
    sidecar_path(plan_path).unlink(missing_ok=True)
    _write_atomic(plan_path, memoryview(serialized))
    write_metadata(plan_path, meta)
    return meta


def _load_timing_cache(config: Any, path: Path, logger: Any) -> bool:
    """Give ``config`` the timing cache in ``path`` (or a fresh one when it is absent or was made
    by another TensorRT/GPU); False when TensorRT gave no cache at all (build without one).

    ``create_timing_cache`` returns None for bytes it cannot read (NVIDIA's samples check it)
    and logs an error first; the errors a rejected cache logs are dropped from ``logger.errors``
    so they do not end up in the message of a later, unrelated failure."""
    mark = len(logger.errors)
    data = path.read_bytes() if path.is_file() else b""
    cache = config.create_timing_cache(data) if data else None
    if cache is not None and config.set_timing_cache(cache, False):
        return True
    if data:
        log.warning("timing cache %s was made by another TensorRT version or GPU; starting a fresh one", path)
    del logger.errors[mark:]
    fresh = config.create_timing_cache(b"")
    if fresh is None or not config.set_timing_cache(fresh, False):
        log.warning("TensorRT gave no timing cache; building without %s", path)
        del logger.errors[mark:]
        return False
    return True


def select_device(device: int) -> None:
    """Make CUDA device ``device`` current for this thread: TensorRT builds for, deserializes on
    and enqueues to the current device."""
    torch = _import_optional("torch")
    if torch is not None and torch.cuda.is_available():
        torch.cuda.set_device(device)
        return
    cudart = _import_cudart()
    if cudart is None:
        raise MissingDependency("selecting a CUDA device needs torch with CUDA or cuda-python; neither is usable",
                                hint=_CUDA_HINT)
    _cuda_device_count_or_raise(cudart)
    _cuda_check(cudart.cudaSetDevice(device))


def _major(version: str) -> int:
    return int(str(version).split(".")[0])


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
    io_dtypes = None
    recorded = _read_metadata_or_none(plan_path)
    if source_onnx is not None and (recorded is None or recorded.io_dtypes is None):
        # A sidecar from an older edgekit: the source ONNX gives the IO contract instead.
        inputs, outputs = onnx_graph_specs(load_onnx(source_onnx), source_onnx)
        io_dtypes = {n: s.dtype for n, s in (*inputs.items(), *outputs.items())}
    return TrtRuntime(plan_path, device=device, io_dtypes=io_dtypes)


# ---------------------------------------------------------------------------------------------
# Running


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
        self.metadata = _read_metadata_or_none(self.plan_path)
        if io_dtypes is None and self.metadata is not None:
            io_dtypes = self.metadata.io_dtypes
        self._tensorrt_version = str(trt.__version__)
        self.context = self.engine = self._trt_runtime = None
        self._device_buffers: dict[str, Any] = {}
        self._host_buffers: dict[str, Any] = {}
        self._host_outputs: dict[str, np.ndarray] = {}
        self._narrow_inputs: dict[str, np.ndarray] = {}  # int64 feed -> pinned int32 staging array
        self._widen_outputs: dict[str, np.ndarray] = {}  # int32 engine output -> int64 array returned
        self._cuda = _cuda_backend(device)
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


def _make_logger(trt: Any, min_severity: Any = None) -> Any:
    """A TensorRT logger that forwards to ``logging`` and keeps errors for our messages.

    TensorRT calls ``log`` for every message, thousands of VERBOSE ones per build: below
    ``min_severity`` (default WARNING, or VERBOSE when this module logs at DEBUG) a message is
    dropped by one integer comparison before any formatting or ``logging`` call."""
    severity = trt.ILogger.Severity
    if min_severity is None:
        min_severity = severity.VERBOSE if log.isEnabledFor(logging.DEBUG) else severity.WARNING
    threshold = int(min_severity)
    error_levels = (int(severity.INTERNAL_ERROR), int(severity.ERROR))
    warning_level = int(severity.WARNING)

    class _Logger(trt.ILogger):
        def __init__(self) -> None:
            trt.ILogger.__init__(self)
            self.errors: list[str] = []

        def log(self, level: Any, msg: str) -> None:
            level = int(level)
            if level > threshold:
                return
            if level in error_levels:
                self.errors.append(msg)
                log.error("TensorRT: %s", msg)
            elif level == warning_level:
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
    """Device buffers and pinned host tensors from torch; a returned numpy array keeps its host
    tensor alive (``Tensor.numpy()`` shares memory and holds a reference)."""

    def __init__(self, torch: Any, device: int):
        self.torch = torch
        self.device = torch.device("cuda", device)
        self.stream = torch.cuda.Stream(device=self.device)
        self.stream_handle = self.stream.cuda_stream

    def make_current(self) -> None:
        self.torch.cuda.set_device(self.device)

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
    """cuda-python's runtime API. Device memory is freed by ``close``; pinned host memory is
    freed only when the last numpy array viewing it is gone (a finalizer on the ctypes buffer
    every such array keeps as its base), since ``run()`` hands those arrays to the caller."""

    def __init__(self, cudart: Any, device: int):
        self.cudart = cudart
        self.device_index = device
        self.stream = None
        self._device_ptrs: list[int] = []
        _cuda_device_count_or_raise(cudart)
        _cuda_check(cudart.cudaSetDevice(device))
        self.stream = _cuda_check(cudart.cudaStreamCreate())
        self.stream_handle = int(self.stream)

    def make_current(self) -> None:
        _cuda_check(self.cudart.cudaSetDevice(self.device_index))

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
        raw = (ctypes.c_byte * nbytes).from_address(ptr)
        # Every array made from raw keeps raw alive (its .base chain), so the memory is freed
        # after the last view, not at close(). Not at interpreter exit: the process frees it.
        weakref.finalize(raw, _free_host, self.cudart, ptr).atexit = False
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
        self._device_ptrs = []
        if self.stream is not None:
            self.cudart.cudaStreamDestroy(self.stream)
            self.stream = None


def _free_host(cudart: Any, ptr: int) -> None:
    cudart.cudaFreeHost(ptr)


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
