"""What the manifest's sections hold, typed: the frozen views ``Bundle`` answers with
(``Bundle.artifact`` → ``Artifact``, ``quantization`` → ``QuantizationSummary`` with its
``BucketGraphs``, ``engines`` / ``engine_for`` → ``EngineRecord``, ``verification`` →
``Verification``), so a section's shape is said here once and stages read fields, not keys.

Built from a manifest ``manifest_schema`` checked at load: a field it does not type (from an older
or a newer edgekit) of another shape reads as absent here, never as an error deep in a stage.
Objects a section leaves open (a runtime's own build keys, the recorded QuantizeConfig) come back
as dict copies; ``as_recorded`` is the whole entry, for documents that show it."""

from __future__ import annotations

import copy
import hashlib
import json
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, fields
from typing import Any


def _text(value: Any) -> str | None:
    return value if isinstance(value, str) else None


def _number(value: Any) -> float | None:
    return float(value) if type(value) in (int, float) else None


def _int(value: Any) -> int | None:
    return value if type(value) is int else None


def _or(value: Any, default: Any) -> Any:
    return default if value is None else value


def _object(value: Any) -> dict[str, Any]:
    return copy.deepcopy(value) if isinstance(value, dict) else {}


def _list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def _texts(value: Any) -> tuple[str, ...] | None:
    return tuple(str(v) for v in value) if isinstance(value, list) else None


def _numbers(value: Any) -> tuple[float, ...]:
    return tuple(float(v) for v in value if type(v) in (int, float)) if isinstance(value, list) else ()


@dataclass(frozen=True)
class Artifact:
    """One file of a bundle. ``path`` is relative to the bundle root."""

    name: str
    path: str
    sha256: str
    bytes: int
    made_by: str
    config: Mapping[str, Any] = field(default_factory=dict)
    created: str = ""
    # Files the artifact reads beside itself (ONNX external data): [{"path", "sha256", "bytes"}].
    side_files: tuple[Mapping[str, Any], ...] = ()

    @property
    def files(self) -> tuple[str, ...]:
        """Every bundle-relative file the artifact is: its own, then its side files."""
        return (self.path, *(str(s["path"]) for s in self.side_files))

    def to_json(self) -> dict[str, Any]:
        doc = {
            "path": self.path,
            "sha256": self.sha256,
            "bytes": self.bytes,
            "made_by": self.made_by,
            "config": dict(self.config),
            "created": self.created,
        }
        if self.side_files:
            doc["side_files"] = [dict(f) for f in self.side_files]
        return doc


ARTIFACT_FIELDS = tuple(f.name for f in fields(Artifact) if f.name != "name")


@dataclass(frozen=True)
class OutputError:
    """One output of an exported graph against its reference, over every verification feed."""

    max_abs: float
    max_rel: float  # max |a - b| / max |b|: relative to the output's scale, robust to zeros
    tolerance: float
    passed: bool
    nonfinite: int = 0  # NaN/Inf values in either output over all feeds: any one fails verification


@dataclass(frozen=True)
class Verification:
    """``manifest["verification"][artifact]``: an exported graph checked against its reference."""

    passed: bool
    reference: str | None  # the runtime that ran the reference ("torch")
    candidate: str | None  # the runtime that ran the graph ("ort")
    samples: int | None  # feeds compared
    outputs: dict[str, OutputError]

    @classmethod
    def from_json(cls, doc: Mapping[str, Any]) -> Verification:
        def error(o: dict[str, Any]) -> OutputError:
            nan = float("nan")  # not recorded: no number to show
            errors = (_or(_number(o.get(k)), nan) for k in ("max_abs", "max_rel", "tolerance"))
            return OutputError(*errors, o.get("passed") is True, _or(_int(o.get("nonfinite")), 0))

        outputs = doc.get("outputs") if isinstance(doc.get("outputs"), dict) else {}
        return cls(
            doc.get("passed") is True,
            _text(doc.get("reference")),
            _text(doc.get("candidate")),
            _int(doc.get("samples")),
            {str(k): error(v) for k, v in outputs.items() if isinstance(v, dict)},
        )


@dataclass(frozen=True)
class BucketGraphs:
    """An int8 model quantized with ``--step-buckets`` (``quantization.step_buckets``): one graph
    per range of the loop's position, bucket i holding ``boundaries[i-1] <= position < boundaries[i]``."""

    n: int
    by: str | None  # the position axis: "mask share" | "t" | "position"
    boundaries: tuple[float, ...]  # n - 1 ascending edges
    graphs: tuple[str, ...]  # the artifacts, bucket 0 first ("int8", "int8-bucket-1", ...)
    hashes: tuple[str, ...] = ()  # each graph's sha256 as the artifacts section records it (Bundle fills it in)
    binding: str | None = None  # bucket_binding of the record, as quantize wrote it

    @classmethod
    def from_json(cls, doc: Any) -> BucketGraphs | None:
        """None for a one-scale model (no buckets recorded, or one)."""
        if not isinstance(doc, dict) or not isinstance(doc.get("artifacts"), list) or not doc["artifacts"]:
            return None
        n = doc.get("n") or 1
        if type(n) is not int or n < 2:
            return None
        return cls(
            n,
            _text(doc.get("by")),
            _numbers(doc.get("boundaries")),
            tuple(str(a) for a in doc["artifacts"]),
            binding=_text(doc.get("binding")),
        )


def bucket_binding(by: str, boundaries: Sequence[float], graphs: Sequence[tuple[str, str | None]]) -> str:
    """The sha256 that binds each step bucket's graph to its place: the position axis, the edges
    and, in bucket order, each graph's (name, file sha256). ``quantize`` records it with the
    buckets (and ``build`` with their engines); a reader recomputes it from the hashes it verified,
    so graphs swapped in the manifest (paths and hashes moved together, each file still
    verifying) or edges edited are refused, never run at the wrong steps."""
    doc = {"by": str(by), "boundaries": [float(b) for b in boundaries], "graphs": [[str(n), str(s)] for n, s in graphs]}
    return hashlib.sha256(json.dumps(doc, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


def step_bucket_problem(doc: Mapping[str, Any], artifact: str, sha256_of: Callable[[str], str | None]) -> str | None:
    """What is wrong with a ``quantization.step_buckets`` record (None: its parts agree: counts,
    order, ascending finite edges, every graph in the manifest, its binding). ``sha256_of(name)``:
    the artifact's recorded sha256, None when the manifest does not list it."""
    names, edges = list(doc.get("artifacts") or []), list(doc.get("boundaries") or [])
    missing = [a for a in names if sha256_of(a) is None]
    if (
        len(names) < 2
        or names[0] != artifact
        or len(set(names)) != len(names)
        or doc.get("n") != len(names)
        or len(edges) != len(names) - 1
    ):
        return (
            f"record {doc.get('n')} buckets over graphs {names[:9]} with {len(edges)} boundaries "
            f"(valid: n graphs, the first {artifact!r}, and n - 1 boundaries)"
        )
    if not all(type(e) in (int, float) and math.isfinite(e) for e in edges) or any(
        b <= a for a, b in zip(edges, edges[1:])
    ):
        return f"have boundaries {edges[:9]}, which are not ascending finite positions"
    if missing:
        return f"name graph {missing[0]!r}, which is not in the manifest"
    if doc.get("binding") != bucket_binding(doc.get("by", ""), edges, [(n, sha256_of(n)) for n in names]):
        return (
            "do not match what quantize recorded: the graphs or their boundaries changed in the manifest "
            "(each bucket's graph is bound to its place)"
        )
    return None


@dataclass(frozen=True)
class ArithmeticRecord:
    """The int8 arithmetic a cpu-profile model was quantized for and validated on."""

    isa: str | None  # the CPU class quantized for (``--isa``)
    validated_on: str | None  # the CPU class its budget was measured on
    scheme: str | None  # ``arithmetic.SCHEMES`` name


@dataclass(frozen=True)
class SpeedRecord:
    """INT8 against FP32 per decode, as quantize timed it (``measured`` False: not timed, and why)."""

    measured: bool
    isa: str | None
    runtime: str | None
    int8_speedup: float | None


@dataclass(frozen=True)
class BudgetEval:
    """The held-out evaluation quantize judged its budget on (``check`` judges the same by default)."""

    samples: int | None = None
    seed: int | None = None
    decode: dict[str, Any] = field(default_factory=dict)  # decode options it overrode


@dataclass(frozen=True)
class QuantizationSummary:
    """``manifest["quantization"]``: what ``edgekit quantize`` recorded for the int8 model."""

    profile: str | None
    passed: bool
    config: dict[str, Any]  # the QuantizeConfig it ran with (``QuantizeConfig.to_json``)
    arithmetic: ArithmeticRecord | None  # None: not recorded (a profile without CPU arithmetic, an older edgekit)
    speed: SpeedRecord | None
    fallback: tuple[str, ...]  # the layers the budget left in float, by label, in order
    budget_eval: BudgetEval
    step_buckets: BucketGraphs | None  # as recorded; ``Bundle.step_buckets`` checks it against the artifacts
    as_recorded: dict[str, Any]  # the whole summary (the ``edgekit.quantize/1`` document)

    @classmethod
    def from_json(cls, doc: Mapping[str, Any]) -> QuantizationSummary:
        arith = doc.get("arithmetic")
        scheme = arith.get("scheme") if isinstance(arith, dict) else None
        speed = doc.get("speed")
        ev = (doc.get("budget") or {}).get("eval") if isinstance(doc.get("budget"), dict) else None
        ev = ev if isinstance(ev, dict) else {}
        return cls(
            profile=_text(doc.get("profile")),
            passed=doc.get("passed") is True,
            config=_object(doc.get("config")),
            arithmetic=ArithmeticRecord(
                _text(arith.get("isa")),
                _text(arith.get("validated_on")),
                _text(scheme.get("name")) if isinstance(scheme, dict) else None,
            )
            if isinstance(arith, dict)
            else None,
            speed=SpeedRecord(
                speed.get("measured") is True,
                _text(speed.get("isa")),
                _text(speed.get("runtime")),
                _number(speed.get("int8_speedup")),
            )
            if isinstance(speed, dict)
            else None,
            fallback=tuple(str(f.get("label")) for f in _list(doc.get("fallback")) if isinstance(f, dict)),
            budget_eval=BudgetEval(_int(ev.get("samples")), _int(ev.get("seed")), _object(ev.get("decode"))),
            step_buckets=BucketGraphs.from_json(doc.get("step_buckets")),
            as_recorded=copy.deepcopy(dict(doc)),
        )


@dataclass(frozen=True)
class EngineFile:
    """A file beside an engine (weights, TensorRT's metadata sidecar) with the sha256 it was built with."""

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
    bucket_binding: (
        str | None
    )  # bucket_binding over (source, sha256) of this engine and each bucket's, as build wrote it
    bucketed: bool  # built from a step-bucketed int8 model (AI Hub links every bucket into this one file)
    session_options: dict[str, Any] | None  # ORT: the options a plain session needs for the file (None: not recorded)
    as_recorded: dict[str, Any]  # the entry (the build document shows it)

    @classmethod
    def from_json(cls, key: str, doc: Mapping[str, Any]) -> EngineRecord:
        buckets = doc.get("buckets") if isinstance(doc.get("buckets"), dict) else {}
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
