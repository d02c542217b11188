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

from edgekit.manifest_engines import ENGINE_SIDE_FILES, EngineFile, EngineRecord
from edgekit.manifest_values import (
    _dict,
    _int,
    _list,
    _number,
    _numbers,
    _object,
    _or,
    _text,
    _texts,
)

__all__ = [
    "ARTIFACT_FIELDS",
    "ENGINE_SIDE_FILES",
    "Artifact",
    "ArithmeticRecord",
    "BucketGraphs",
    "BudgetEval",
    "EngineFile",
    "EngineRecord",
    "FloatNode",
    "OutputError",
    "QuantizationSummary",
    "SpeedRecord",
    "Verification",
    "bucket_binding",
    "step_bucket_problem",
]


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
            max_abs, max_rel, tolerance = (_or(_number(o.get(k)), nan) for k in ("max_abs", "max_rel", "tolerance"))
            return OutputError(max_abs, max_rel, tolerance, o.get("passed") is True, _or(_int(o.get("nonfinite")), 0))

        outputs = _dict(doc.get("outputs"))
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
    # vocabulary.SPEED_VERDICTS of INT8 against FP32, and why "within noise" (None: an older edgekit)
    verdict: str | None = None
    unsure: tuple[str, ...] = ()
    timing: dict[str, Any] | None = None  # how it was measured (probes.speed.Decision.to_json)


@dataclass(frozen=True)
class BudgetEval:
    """The held-out evaluation quantize judged its budget on (``check`` judges the same by default)."""

    samples: int | None = None
    seed: int | None = None
    decode: dict[str, Any] = field(default_factory=dict)  # decode options it overrode


@dataclass(frozen=True)
class FloatNode:
    """A layer quantize kept float (or weight-only: float compute), by every name it has: ``node``
    in the prepared graph quantize worked on, ``fp32_nodes`` in the bundle's FP32 graph (None:
    recorded by an edgekit before #44), ``module`` the torch module where the export knew it."""

    node: str
    precision: str  # float | weight-only
    source: str  # user | override | rule | budget
    fp32_nodes: tuple[str, ...] | None
    module: str | None

    @classmethod
    def from_json(cls, doc: Any) -> FloatNode | None:
        if not isinstance(doc, dict) or not isinstance(doc.get("node"), str):
            return None
        precision, source = _text(doc.get("precision")) or "float", _text(doc.get("source")) or "rule"
        return cls(doc["node"], precision, source, _texts(doc.get("fp32_nodes")), _text(doc.get("module")))


@dataclass(frozen=True)
class QuantizationSummary:
    """``manifest["quantization"]``: what ``edgekit quantize`` recorded for the int8 model."""

    profile: str | None
    passed: bool
    config: dict[str, Any]  # the QuantizeConfig it ran with (``QuantizeConfig.to_json``)
    arithmetic: ArithmeticRecord | None  # None: not recorded (a profile without CPU arithmetic, an older edgekit)
    speed: SpeedRecord | None
    fallback: tuple[str, ...]  # the layers the budget left in float, by label, in order
    float_nodes: tuple[FloatNode, ...]  # every layer kept float: rule, --exclude, override, budget
    budget_eval: BudgetEval
    step_buckets: BucketGraphs | None  # as recorded; ``Bundle.step_buckets`` checks it against the artifacts
    as_recorded: dict[str, Any]  # the whole summary (the ``edgekit.quantize/1`` document)
    # {artifact ("int8", "int8-bucket-1"): its files as quantize wrote them, the graph first, then
    # its side files}: what ``int8_match`` compares the bundle's int8 model with. None: an older edgekit.
    int8_files: dict[str, tuple[EngineFile, ...]] | None = None
    # The 8-bit share of the int8 model's weight values (``weights.int8_share``; None: not recorded).
    int8_weight_share: float | None = None
    # The torch modules (else Gather nodes) whose embedding table is stored int8 (``gather_tables``).
    int8_tables: tuple[str, ...] = ()

    @classmethod
    def from_json(cls, doc: Mapping[str, Any]) -> QuantizationSummary:
        arith = doc.get("arithmetic")
        scheme = arith.get("scheme") if isinstance(arith, dict) else None
        speed = doc.get("speed")
        ev = (doc.get("budget") or {}).get("eval") if isinstance(doc.get("budget"), dict) else None
        ev = ev if isinstance(ev, dict) else {}
        sel = _dict(doc.get("selection"))
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
                _text(speed.get("verdict")),
                tuple(str(u) for u in _list(speed.get("unsure"))),
                _object(speed.get("timing")) or None,
            )
            if isinstance(speed, dict)
            else None,
            fallback=tuple(str(f.get("label")) for f in _list(doc.get("fallback")) if isinstance(f, dict)),
            float_nodes=tuple(f for f in map(FloatNode.from_json, _list(sel.get("float"))) if f is not None),
            budget_eval=BudgetEval(_int(ev.get("samples")), _int(ev.get("seed")), _object(ev.get("decode"))),
            step_buckets=BucketGraphs.from_json(doc.get("step_buckets")),
            as_recorded=copy.deepcopy(dict(doc)),
            int8_files=_int8_files(doc.get("int8_files")),
            int8_weight_share=_number(_dict(doc.get("weights")).get("int8_share")),
            int8_tables=tuple(
                str(t.get("label") or t.get("node"))
                for t in _list(_dict(doc.get("gather_tables")).get("int8"))
                if isinstance(t, dict)
            ),
        )


def _int8_files(doc: Any) -> dict[str, tuple[EngineFile, ...]] | None:
    """``quantization.int8_files``: each int8 artifact's files as quantize wrote them (None: not recorded)."""
    if not isinstance(doc, dict):
        return None
    return {
        str(a): tuple(f for f in map(EngineFile.from_json, files) if f is not None)
        for a, files in doc.items()
        if isinstance(files, list)
    }
