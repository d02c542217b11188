"""``manifest["engines"]`` typed: each engine ``edgekit build`` made (``EngineRecord``) and the
files recorded beside it (``EngineFile``, also the int8 model's files as quantize wrote them).
``manifest_sections`` re-exports them with the other sections' views."""

from __future__ import annotations

import copy
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from edgekit.manifest_values import _dict, _int, _list, _number, _numbers, _object, _text, _texts


@dataclass(frozen=True)
class EngineFile:
    """A file beside an engine (weights, TensorRT's metadata sidecar) with the sha256 it was built
    with; also a file of the int8 model as quantize wrote it (``QuantizationSummary.int8_files``)."""

    path: str
    sha256: str | None
    bytes: int | None = None  # its size where recorded

    @classmethod
    def from_json(cls, doc: Any) -> EngineFile | None:
        return (
            cls(str(doc.get("path", "")), _text(doc.get("sha256")), _int(doc.get("bytes")))
            if isinstance(doc, dict)
            else None
        )


# Files an engine entry names beside its model, by role.
ENGINE_SIDE_FILES = ("metadata", "required_operators", "external_data", "weights")


@dataclass(frozen=True)
class EngineRecord:
    """``manifest["engines"][key]``: one engine ``edgekit build`` made (key ``<target>/<precision>``,
    ``@<runtime>`` for a target's other runtime) and the keys it is compatible with."""

    key: str
    path: str
    sha256: str | None
    bytes: int | None  # the engine file's size where recorded
    runtime: str | None
    precision: str | None
    target: str  # the target it was built for (the key's first part where not recorded)
    source: str  # the artifact it was built from
    source_onnx_sha256: str | None
    runtime_version: str | None
    format: str | None  # the file's form: onnx, ort, plan, blob, ir (OpenVINO's .xml + .bin), ...
    device: str | None  # ORT: the CPU an optimized graph is tied to
    device_name: str | None  # OpenVINO: the device's full name
    cpu_isa: tuple[str, ...] | None  # OpenVINO CPU: the instruction sets of the CPU that compiled it
    portable: bool  # ORT: the optimized graph runs on any CPU
    config: dict[str, Any]  # OpenVINO: the device and compiled properties
    qnn: dict[str, Any]  # QNN: SDK, onnxruntime-qnn, HTP arch and SoC it was compiled with
    aihub: dict[str, Any]  # AI Hub: the device, chipset, model id (and bucket graphs) it was compiled for
    compile_seconds: float | None  # QNN: what compiling the graph took (what loading the context saves)
    side_files: dict[str, EngineFile]  # role (``ENGINE_SIDE_FILES``) -> file
    bucket_boundaries: tuple[float, ...]  # a step-bucketed model's edges (() for one scale)
    bucket_engines: tuple[EngineRecord, ...]  # buckets 1.. as their own engines (bucket 0 is this one)
    bucket_by: str  # the position axis the buckets were built for ("" where not recorded)
    # bucket_binding over (source, sha256) of this engine and each bucket's, as build wrote it
    bucket_binding: str | None
    bucketed: bool  # built from a step-bucketed int8 model (AI Hub links every bucket into this one file)
    session_options: dict[str, Any] | None  # ORT: the options a plain session needs for the file (None: not recorded)
    as_recorded: dict[str, Any]  # the entry (the build document shows it)

    @classmethod
    def from_json(cls, key: str, doc: Mapping[str, Any]) -> EngineRecord:
        buckets = _dict(doc.get("buckets"))
        subs = _list(buckets.get("engines"))
        cpu_isa = doc.get("cpu_isa")
        return cls(
            key=key,
            path=str(doc.get("path", "")),
            sha256=_text(doc.get("sha256")),
            bytes=_int(doc.get("bytes")),
            runtime=_text(doc.get("runtime")),
            precision=_text(doc.get("precision")),
            target=str(doc.get("target", key.split("/")[0])),
            source=str(doc.get("source", "fp32")),
            source_onnx_sha256=_text(doc.get("source_onnx_sha256")),
            runtime_version=_text(doc.get("runtime_version")),
            format=_text(doc.get("format")),
            device=_text(doc.get("device")),
            device_name=_text(doc.get("device_name")),
            cpu_isa=_texts(cpu_isa),
            portable=bool(doc.get("portable", True)),
            config=_object(doc.get("config")),
            qnn=_object(doc.get("qnn")),
            aihub=_object(doc.get("aihub")),
            compile_seconds=_number(_object(doc.get("session_seconds")).get("compile")),
            side_files={r: f for r in ENGINE_SIDE_FILES if (f := EngineFile.from_json(doc.get(r))) is not None},
            bucket_boundaries=_numbers(buckets.get("boundaries")),
            bucket_engines=tuple(
                cls.from_json(f"{key}#bucket{i + 1}", s) for i, s in enumerate(subs) if isinstance(s, dict)
            ),
            bucket_by=str(buckets.get("by", "")),
            bucket_binding=_text(buckets.get("binding")),
            bucketed=bool(buckets),
            session_options=copy.deepcopy(dict(doc["session_options"]))
            if isinstance(doc.get("session_options"), Mapping)
            else None,
            as_recorded=copy.deepcopy(dict(doc)),
        )

    @property
    def recorded_files(self) -> tuple[EngineFile, ...]:
        """Every file the entry records (with its sha256 and size where recorded): its model, the
        files beside it, each bucket's engine and theirs."""
        own = (EngineFile(self.path, self.sha256, self.bytes), *self.side_files.values())
        return (*own, *(f for e in self.bucket_engines for f in e.recorded_files))

    @property
    def files(self) -> tuple[str, ...]:
        """Every bundle-relative file the engine is: its model, the files beside it, its buckets' engines."""
        return tuple(dict.fromkeys(f.path for f in self.recorded_files if f.path))
