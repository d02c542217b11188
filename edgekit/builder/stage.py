"""`edgekit build`: a bundle's model made ready for one target, recorded as an engine.

ONNX Runtime targets get their graph optimizations applied once and saved (an optimized .onnx
via ``SessionOptions.optimized_model_filepath``, or ORT's mobile ``.ort`` format with the
required-operators config of a minimal build). TensorRT targets get an engine built by
``runtimes/trt.build_engine`` on the device itself. A graph with dynamic dims is first fixed to
the static shapes the manifest records (``onnxruntime.tools.make_dynamic_shape_fixed``'s
functions), and linted for the target: a build that cannot deploy stops before it starts.

Every build lands in ``engines/<target>/`` under a content-addressed name and in
``manifest["engines"]["<target>/<precision>"]`` with its compatibility keys (runtime and
version, device, compute capability, L4T, source ONNX sha256, precision, path, sha256).
``select_engine`` picks the engine ``run``/``profile``/``check`` load for a target and refuses
a stale one (source ONNX changed, other runtime version, other device) unless asked to rebuild.
"""

from __future__ import annotations

import dataclasses
import shutil
import tempfile
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from edgekit._deps import require
from edgekit._lock import writes_bundle
from edgekit.builder.aihub import build_aihub, prepare_aihub
from edgekit.builder.install import check_engine_folder, install, remove_superseded
from edgekit.builder.openvino import build_openvino
from edgekit.builder.ort import build_ort, fix_dynamic_shapes
from edgekit.builder.precision import choose_precision, precision_evidence
from edgekit.builder.qnn import build_qnn
from edgekit.builder.trt import build_trt, prepare_trt
from edgekit.bundle import STAGING_PREFIX, Bundle, bucket_binding, now_iso
from edgekit.errors import BundleError, EdgekitError, UsageError
from edgekit.host import HostFacts
from edgekit.int8_match import int8_warnings
from edgekit.lint import Finding, has_errors, lint_onnx, quantization_profile_of
from edgekit.runtimes.engines import (
    EngineChoice,
    EngineNeedsBuild,
    engine_key,
    engine_problems,
    find_engine,
)
from edgekit.runtimes.onnx_file import load_onnx
from edgekit.runtimes.registry import backend, runs
from edgekit.targets import Target, load_target

BUILD_SCHEMA = "edgekit.build/1"


@dataclass(frozen=True)
class BuildJob:
    """One engine to build: the (shape-fixed) model, what it stands for, and where to write."""

    model_path: Path
    source_sha256: str
    target: Target
    precision: str
    host: HostFacts
    workdir: Path
    bundle: Bundle | None = None  # the bundle (a builder that keeps records in it: AI Hub's job book)
    resume: bool = False  # collect an earlier run's jobs instead of submitting (AI Hub)
    say: Callable[[str], None] | None = None  # progress lines of a build that waits on a service


@dataclass(frozen=True)
class RuntimeBuilder:
    """How `edgekit build` makes a target's engine for one runtime."""

    # (target, bundle, host) -> facts about the device the engine checks need (TensorRT's GPU),
    # after refusing a host that cannot build it (missing package, not the device).
    prepare: Callable[[Target, Bundle, HostFacts], Any]
    # BuildJob -> ({role: file in workdir}, the engine entry's facts)
    build: Callable[[BuildJob], tuple[dict[str, Path], dict[str, Any]]]
    # Its engines are built on the device itself (a GPU's TensorRT, an Intel device's blob).
    on_device: bool
    # [BuildJob per step bucket] -> ONE engine of every bucket's graph (AI Hub's link job: one
    # context binary over shared weights); None = one engine per bucket (``build``).
    build_linked: Callable[[list[BuildJob]], tuple[dict[str, Path], dict[str, Any]]] | None = None
    # False: op support is the service's to judge (AI Hub's compile job, on its own QAIRT); the
    # target's other lint rules (static shapes, opset, IO) still run before anything is sent.
    lints_ops: bool = True


@dataclass(frozen=True)
class NoBuilder:
    why: str  # why the runtime has nothing `edgekit build` could make


def _requires(runtime: str) -> Callable[[Target, Bundle, HostFacts], Any]:
    """A ``prepare`` that only needs the runtime's package (exit 3 with its install line)."""

    def prepare(target: Target, bundle: Bundle, host: HostFacts) -> None:
        require(backend(runtime).requires.module)

    return prepare


# Per runtime name (registry). A target builds for the first of these it lists: the most
# specialised runtime (TensorRT on a Jetson whose target falls back to ort, OpenVINO on intel-cpu).
BUILDERS: dict[str, RuntimeBuilder | NoBuilder] = {
    "trt": RuntimeBuilder(
        prepare_trt,
        lambda j: build_trt(j.model_path, j.source_sha256, j.target, j.precision, j.workdir),
        on_device=True,
    ),
    "openvino": RuntimeBuilder(
        _requires("openvino"),
        lambda j: build_openvino(j.model_path, j.target, j.precision, j.host, j.workdir, j.bundle),
        on_device=True,
    ),
    "qnn": RuntimeBuilder(
        _requires("qnn"), lambda j: build_qnn(j.model_path, j.target, j.precision, j.workdir), on_device=False
    ),
    # After qnn: a Snapdragon target builds its local EPContext unless asked for --runtime aihub.
    "aihub": RuntimeBuilder(
        prepare_aihub, lambda j: build_aihub([j]), on_device=False, build_linked=build_aihub, lints_ops=False
    ),
    "ort": RuntimeBuilder(
        lambda target, bundle, host: None,
        lambda j: build_ort(j.model_path, j.target, j.host, j.workdir),
        on_device=False,
    ),
    "torch": NoBuilder(
        "torch runs the PyTorch module rebuilt from the model source in edgekit's process: no engine, no target"
    ),
}


def build_runtime(target: Target) -> str:
    """The runtime ``target``'s engines are built for (the first of ``BUILDERS`` it lists)."""
    for name, builder in BUILDERS.items():
        if name in target.runtimes and isinstance(builder, RuntimeBuilder):
            return name
    raise UsageError(
        f"target {target.name} lists no runtime `edgekit build` makes engines for ({', '.join(target.runtimes)})"
    )


def builds_on_device(target: Target) -> bool:
    """Whether the target's engines must be built on the device itself: TensorRT engines,
    OpenVINO compiled blobs, and ONNX Runtime models optimized for the very CPU that runs them
    (arch "host")."""
    builder = BUILDERS[build_runtime(target)]
    return (isinstance(builder, RuntimeBuilder) and builder.on_device) or target.arch == "host"


# ---------------------------------------------------------------------------------------------
# Building


@writes_bundle("build")
def build_bundle(
    path: str | Path | Bundle,
    target: str | Path | Target = "cpu",
    precision: str = "fp32",
    rebuild: bool = False,
    *,
    host: HostFacts | None = None,
    runtime: str | None = None,
    resume: bool = False,
    progress: Callable[[str], None] | None = None,
) -> dict[str, Any]:
    """Build ``precision``'s engine of the bundle at ``path`` for ``target``; the
    ``edgekit build --json`` document (``edgekit.build/1``) with the manifest entry.

    An up-to-date engine is kept (status ``up-to-date``); a stale one is an error unless
    ``rebuild``, which always builds anew. ``host`` replaces this host's facts (tests).
    ``runtime``: another of the target's runtimes than the one it builds for by default (e.g.
    aihub for a Snapdragon target), its engine kept under ``<target>/<precision>@<runtime>``;
    ``resume``: collect an earlier run's AI Hub jobs; ``progress(line)``: what a build that waits
    on a service is doing."""
    bundle = path if isinstance(path, Bundle) else Bundle.load(path)
    target = load_target(target)
    warnings = int8_warnings(bundle, [precision])[1]  # int8, or auto, which reads quantize's summary
    choice = None
    if precision == "auto":
        precision, choice = choose_precision(bundle, target, host)
    if precision not in target.precisions:
        raise UsageError(
            f"--precision {precision!r} is not one target {target.name} runs; valid: {', '.join(target.precisions)}"
        )
    host = host or HostFacts.detect()
    default = build_runtime(target)
    runtime = backend(_chosen_runtime(target, runtime) if runtime else default)
    builder = BUILDERS[runtime.name]
    if not isinstance(builder, RuntimeBuilder):
        raise UsageError(f"target {target.name}: {builder.why}")
    device_facts = builder.prepare(target, bundle, host)
    if precision not in runtime.precisions:
        raise UsageError(
            f"--precision {precision} needs {' or '.join(backend(r).title for r in runs(precision))}; "
            f"target {target.name} runs {runtime.title} ({', '.join(runtime.precisions)})"
        )

    key = engine_key(target.name, precision) + ("" if runtime.name == default else f"@{runtime.name}")
    again = "" if runtime.name == default else f" --runtime {runtime.name}"
    old = bundle.engines.get(key)
    if old is not None and not rebuild:
        problems = engine_problems(bundle, old, host, device_facts, target=target)
        if not problems:
            return _document(bundle, target, precision, old.as_recorded, "up-to-date", [], choice, key, warnings)
        raise EdgekitError(
            f"engine {key} of bundle {bundle.root} is stale: {'; '.join(problems)}",
            hint=(
                f"rebuild it with `edgekit build {bundle.root} --target "
                f"{target.name} --precision {precision}{again} --rebuild`"
            ),
        )

    source_name = _source_artifact(bundle, target, precision)
    source = bundle.artifact(source_name)
    buckets = bundle.step_buckets(source_name)
    check_engine_folder(bundle, target)  # a file where engines/<target>/ goes: said before the build
    workdir = Path(tempfile.mkdtemp(prefix=STAGING_PREFIX, dir=bundle.root))
    try:
        names = [source_name] + (list(buckets.graphs[1:]) if buckets else [])
        if builder.build_linked is not None:  # every bucket's graph in one engine (AI Hub's link job)
            ready = [_prepared(bundle, name, target, builder, workdir / str(i)) for i, name in enumerate(names)]
            files, facts = builder.build_linked(
                [
                    BuildJob(p[0], p[1], target, precision, host, workdir / str(i), bundle, resume, progress)
                    for i, p in enumerate(ready)
                ]
            )
            built = [(install(bundle, target, precision, files), facts, ready[0][2], [f for p in ready for f in p[3]])]
        else:
            # One engine per step bucket (bucket 0 is the entry itself; the runtime picks per call):
            # a built engine holds its own weights, so N buckets build N engines of the weights' size.
            built = [
                _build_one(bundle, name, target, precision, host, builder, workdir / str(i))
                for i, name in enumerate(names)
            ]
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    entry, facts, fixed, findings = built[0]
    entry.update(facts)
    if buckets:
        subs = [e | {"source": n} for (e, _, _, _), n in zip(built[1:], buckets.graphs[1:])]
        graphs = [(source_name, entry["sha256"]), *((s["source"], s["sha256"]) for s in subs)]
        entry["buckets"] = {
            "by": buckets.by,
            "boundaries": list(buckets.boundaries),
            "engines": subs,
            "binding": bucket_binding(buckets.by or "", buckets.boundaries, graphs),
        }
    entry.update(
        {
            "target": target.name,
            "precision": precision,
            "source": source_name,
            "source_onnx_sha256": source.sha256,
            "fixed_shapes": fixed,
            "made_by": "build",
            "created": now_iso(),
        }
    )
    bundle.record_entry("engines", key, entry)
    bundle.save()
    remove_superseded(bundle, old)
    return _document(bundle, target, precision, entry, "rebuilt" if old else "built", findings, choice, key, warnings)


def _chosen_runtime(target: Target, runtime: str) -> str:
    """``--runtime``: one the target lists that `edgekit build` makes engines for."""
    buildable = [r for r in target.runtimes if isinstance(BUILDERS.get(r), RuntimeBuilder)]
    if runtime not in buildable:
        raise UsageError(
            f"--runtime {runtime} is not one target {target.name} builds for; valid: {', '.join(buildable)}"
        )
    return runtime


def _build_one(
    bundle: Bundle, name: str, target: Target, precision: str, host: HostFacts, builder: Any, workdir: Path
) -> tuple[dict[str, Any], dict[str, Any], Any, list[Finding]]:
    """(installed entry, build facts, fixed shapes, lint findings) of one artifact's engine."""
    model_path, source_sha256, fixed, findings = _prepared(bundle, name, target, builder, workdir)
    files, facts = builder.build(BuildJob(model_path, source_sha256, target, precision, host, workdir, bundle))
    return install(bundle, target, precision, files), facts, fixed, findings


def _prepared(
    bundle: Bundle, name: str, target: Target, builder: Any, workdir: Path
) -> tuple[Path, str, Any, list[Finding]]:
    """(shape-fixed model, its source's sha256, fixed shapes, lint findings) of one artifact, or
    the error of a graph that will not deploy. A builder that does not lint op support (AI Hub
    compiles with its own QAIRT and says what it refuses) keeps the target's other rules."""
    source = bundle.artifact(name)
    load_onnx(bundle.root / source.path, f"artifact {name!r}")  # a corrupt graph is one line, not a DecodeError
    workdir.mkdir(parents=True, exist_ok=True)
    model_path, fixed = fix_dynamic_shapes(bundle.root / source.path, bundle, workdir)
    rules = (
        target
        if builder.lints_ops
        else dataclasses.replace(target, lint=dataclasses.replace(target.lint, supported_ops="ort"))
    )
    findings = lint_onnx(model_path, rules, artifact=name)
    if has_errors(findings):
        first = next(f for f in findings if f.severity == "error")
        raise EdgekitError(
            f"bundle {bundle.root} will not deploy to target {target.name}: {first.message}",
            hint=(f"{first.hint}; " if first.hint else "")
            + f"see every finding with `edgekit lint {bundle.root} --target {target.name}`",
        )
    return model_path, source.sha256, fixed, findings


def _document(
    bundle: Bundle,
    target: Target,
    precision: str,
    entry: Mapping[str, Any],
    status: str,
    findings: Iterable[Finding],
    choice: str | None = None,
    key: str | None = None,
    warnings: Iterable[str] = (),
) -> dict[str, Any]:
    return {
        "schema": BUILD_SCHEMA,
        "bundle": str(bundle.root),
        "target": target.name,
        "precision": precision,
        "key": key or engine_key(target.name, precision),
        "status": status,
        "engine": dict(entry),
        "lint": [f.to_json() for f in findings],
        # --precision auto: why this precision (None when the user named one), and how quantize timed
        # INT8 against FP32 for it (samples, spread, load, CPU class; None where not timed).
        "precision_choice": choice,
        "precision_evidence": precision_evidence(bundle) if choice is not None else None,
        "warnings": list(warnings),  # an int8 model that is not the one quantize made (edgekit.int8_match)
    }


def _source_artifact(bundle: Bundle, target: Target, precision: str) -> str:
    """The bundle artifact an engine of ``precision`` is built from (fp16 engines: from fp32)."""
    if precision != "int8":
        return "fp32"
    if not bundle.has("int8"):
        raise BundleError(
            f"bundle {bundle.root} has no int8 model to build target {target.name}'s int8 engine from",
            hint=f"make one with `edgekit quantize {bundle.root} --profile {target.quantization_profile}`",
        )
    profile = quantization_profile_of(bundle)
    if profile is not None and profile != target.quantization_profile:
        raise EdgekitError(
            f"bundle {bundle.root}'s int8 model was quantized with profile {profile!r}; "
            f"target {target.name} needs {target.quantization_profile!r}",
            hint=f"re-quantize with `edgekit quantize {bundle.root} --profile {target.quantization_profile}`",
        )
    return "int8"


def select_engine(
    bundle: str | Path | Bundle,
    target: str | Path | Target,
    precision: str,
    rebuild: bool = False,
    *,
    host: HostFacts | None = None,
) -> EngineChoice:
    """``runtimes.engines.find_engine``, but a missing or stale engine is built anew when
    ``rebuild`` (a fresh one is never rebuilt): what ``run``/``profile``/``check --target
    --rebuild`` load."""
    host = host or HostFacts.detect()
    try:
        return find_engine(bundle, target, precision, host=host)
    except EngineNeedsBuild as exc:
        if not rebuild:
            raise
        b = bundle if isinstance(bundle, Bundle) else Bundle.load(bundle)
        build_bundle(b, target, precision, rebuild=exc.stale, host=host)
        return find_engine(b.root, target, precision, host=host)
