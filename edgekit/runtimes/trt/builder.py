"""Building a static-shape engine from ONNX on the device, per TensorRT version: the network and
builder-config flags (``resolve_build_flags``), the timing cache, and a logger that keeps errors
for our messages. What differs between versions is read from the module (``TrtFeatures.of``)."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import edgekit.runtimes.trt.memory as memory
import edgekit.runtimes.trt.metadata as metadata
from edgekit._deps import require
from edgekit.errors import EdgekitError, TargetUnavailable, UsageError, one_of
from edgekit.runtimes._specs import onnx_graph_specs
from edgekit.runtimes.onnx_file import load_onnx
from edgekit.runtimes.trt.metadata import (
    L4T_RELEASE_PATH,
    PRECISIONS,
    EngineMetadata,
    _edgekit_version,
    _write_atomic,
    sha256_file,
    sidecar_path,
    write_metadata,
)

log = logging.getLogger(__name__)


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
        one_of("precision", self.precision, PRECISIONS)
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
    def of(cls, trt: Any) -> TrtFeatures:
        version = str(trt.__version__)
        has_strong = hasattr(trt.NetworkDefinitionCreationFlag, "STRONGLY_TYPED")
        return cls(
            version, has_strong, hasattr(trt.BuilderFlag, "FP16"), _major(version) < 11, hasattr(trt.DataType, "INT64")
        )

    @classmethod
    def for_version(cls, version: str) -> TrtFeatures:
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
    host = metadata.host_metadata(l4t_path, device)
    features = TrtFeatures.of(trt)
    flags = resolve_build_flags(cfg, model, host.tensorrt_version, features)
    del model
    notes = list(flags.notes)

    # TensorRT builds for the current CUDA device: make it device N before touching the builder.
    memory.select_device(device)
    logger = make_logger(trt)
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
            notes.append(
                f"TensorRT {host.tensorrt_version} has no builder_optimization_level; built with its default tactics"
            )
            log.warning(notes[-1])
    cache_path = Path(cfg.timing_cache) if cfg.timing_cache is not None else None
    cache = cache_path is not None and _load_timing_cache(config, cache_path, logger)

    serialized = builder.build_serialized_network(network, config)
    if serialized is None:
        raise EdgekitError(
            f"TensorRT {host.tensorrt_version} failed to build {onnx_path} ({cfg.precision}): "
            f"{' | '.join(logger.errors[-5:]) or 'see the TensorRT log'}",
            hint="try a larger workspace_mib, or precision fp32 to isolate the failing layer",
        )
    if cache_path is not None and cache:
        updated = config.get_timing_cache()
        if updated is not None:
            _write_atomic(cache_path, memoryview(updated.serialize()))

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
        notes=tuple(notes),
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


def make_logger(trt: Any, min_severity: Any = None) -> Any:
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


def _major(version: str) -> int:
    return int(str(version).split(".")[0])
