"""What a TensorRT engine is tied to: the host's TensorRT version, GPU and L4T release, and the
sidecar ``<plan>.json`` (``EngineMetadata``) that records them next to every ``.plan``, with the
checks that refuse an engine on another host, listing every reason."""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import edgekit.runtimes.trt.memory as memory
from edgekit._deps import require
from edgekit.bundle import sha256_file  # noqa: F401 (the one implementation; re-exported for the engine sidecars)
from edgekit.errors import BundleError, one_of
from edgekit.host import L4T_RELEASE_PATH, read_l4t

PRECISIONS: tuple[str, ...] = ("fp32", "fp16", "int8")
ENGINE_SCHEMA = "edgekit.engine/1"
REBUILD_HINT = "pass --rebuild to rebuild it from the source ONNX (load_engine(..., rebuild=True))"


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
    # What a user should know about this engine's precision (e.g. which layers stay FP32).
    notes: tuple[str, ...] = ()

    def to_json(self) -> dict[str, Any]:
        doc = {"schema": ENGINE_SCHEMA, **asdict(self)}
        doc["io_dtypes"] = dict(self.io_dtypes) if self.io_dtypes is not None else None
        doc["notes"] = list(self.notes)
        return doc

    @classmethod
    def from_json(cls, doc: Mapping[str, Any]) -> EngineMetadata:
        if doc.get("schema") != ENGINE_SCHEMA:
            raise BundleError(f"engine metadata schema {doc.get('schema')!r} is unknown; expected {ENGINE_SCHEMA!r}")
        required = [f for f in cls.__dataclass_fields__ if f not in ("edgekit_version", "io_dtypes", "notes")]
        missing = [f for f in required if f not in doc]
        if missing:
            raise BundleError(f"engine metadata lacks {missing}", hint=REBUILD_HINT)
        one_of("engine precision", doc["precision"], PRECISIONS, error=BundleError)
        values: dict[str, Any] = {f: doc.get(f) for f in cls.__dataclass_fields__}
        values["notes"] = tuple(doc.get("notes") or ())
        return cls(**values)


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
    gpu_name, capability = memory.gpu_facts(device)
    return HostMetadata(str(trt.__version__), gpu_name, capability, read_l4t(l4t_path))


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
