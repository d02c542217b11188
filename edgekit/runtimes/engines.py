"""Choosing a built engine for a target: the manifest's engine entries, their compatibility
keys, and why an entry cannot be loaded on this host.

``edgekit build`` writes entries into ``manifest["engines"]["<target>/<precision>"]``; this module
only reads them: ``find_engine`` picks the model file ``run``/``profile``/``check`` load for a
target and refuses a stale one (source ONNX changed, other runtime version, other device) with
every reason. Rebuilding a stale engine is the build stage's job (``edgekit.builder.select_engine``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from edgekit._sidefiles import external_data_locations
from edgekit.bundle import Bundle, EngineRecord, bucket_binding, sha256_file
from edgekit.errors import BundleError, TargetUnavailable, UsageError
from edgekit.host import HostFacts
from edgekit.runtimes.base import Runtime
from edgekit.runtimes.bucketed import open_paths
from edgekit.runtimes.registry import backend, names
from edgekit.targets import Target, jetpack_of, load_target, targets_for_l4t

ENGINES_DIR = "engines"


class EngineNeedsBuild(BundleError):
    """No usable engine for a target: none was built (``stale`` False) or the one built cannot be
    loaded here (``stale`` True). The build stage catches it to rebuild when asked."""

    def __init__(self, message: str, *, hint: str | None = None, stale: bool = False):
        super().__init__(message, hint=hint)
        self.stale = stale


def engine_key(target: str, precision: str) -> str:
    return f"{target}/{precision}"


def device_problems(target: Target, host: HostFacts) -> list[str]:
    """Why this host is not the device a TensorRT target's engines are for (empty: it is)."""
    if target.trt.jetson and host.l4t is None:
        return ["this host is not a Jetson (no /etc/nv_tegra_release)"]
    problems = []
    if target.trt.jetson and not target.trt.l4t_matches(host.l4t):
        # Each JetPack ships its own TensorRT: an engine (and the target's opset and IO rules)
        # belongs to one of them.
        jetpack = jetpack_of(host.l4t)
        others = targets_for_l4t(host.l4t, target)
        problems.append(
            f"this Jetson runs L4T {host.l4t}"
            + (f" (JetPack {jetpack})" if jetpack else "")
            + f", target {target.name} is for JetPack {target.trt.jetpack} (L4T {' or '.join(target.trt.l4t)}, "
            f"TensorRT {target.trt.tensorrt})" + (f": use --target {' or '.join(others)}" if others else "")
        )
    if target.trt.board and not any(b.lower() in (host.board or "").lower() for b in target.trt.board):
        problems.append(
            f"this board is {host.board or 'unknown'!r}, target {target.name} is a {' or '.join(target.trt.board)}"
        )
    if not host.nvidia_gpu:
        problems.append("no NVIDIA GPU is visible (no /dev/nvidia0, no /proc/driver/nvidia/gpus)")
    return problems


def engine_problems(
    bundle: Bundle, entry: EngineRecord, host: HostFacts, device_facts: Any = None, target: Target | None = None
) -> list[str]:
    """Every reason ``entry`` (a bundle's engine) should not be loaded on this host (empty: load
    it): the file and its source model, then the entry's runtime's own checks (registry
    ``EngineHooks.problems``). ``device_facts``: what the caller already read about the device
    (TensorRT's host metadata; read when None). ``target``: the target as it is now (a QNN context
    binary is tied to its htp_arch/soc_model)."""
    problems = []
    path = bundle.root / entry.path
    root = bundle.root.resolve()
    if root not in path.resolve().parents:
        return [f"its path {entry.path!r} points outside the bundle"]
    if not path.is_file():
        problems.append(f"engine file {entry.path} is missing")
    elif sha256_file(path) != entry.sha256:
        problems.append(f"engine file {entry.path} changed since it was built (sha256 mismatch)")
    # The files the engine's model reads beside itself: ONNX external weights, a QNN context
    # binary, an OpenVINO IR's .bin.
    for role in ("external_data", "weights"):
        weights = entry.side_files.get(role)
        if weights is None:
            continue
        spath = bundle.root / weights.path
        if (
            root not in spath.resolve().parents
            or not spath.is_file()
            or (weights.bytes is not None and spath.stat().st_size != weights.bytes)
            or sha256_file(spath) != weights.sha256
        ):
            problems.append(f"engine weights file {weights.path} is missing or changed since it was built")
    side = entry.side_files.get("external_data")
    if path.suffix == ".onnx" and path.is_file():
        unrecorded = external_data_locations(path) - ({Path(side.path).name} if side is not None else set())
        if unrecorded:
            problems.append(
                f"it reads weights from {sorted(unrecorded)[0]!r}, a file its entry does not record "
                "(built by an older edgekit)"
            )
    if not bundle.has(entry.source):
        problems.append(f"its source model {entry.source!r} is no longer in the bundle")
    elif bundle.artifact(entry.source).sha256 != entry.source_onnx_sha256:
        problems.append(
            f"source ONNX changed (engine from sha256 {str(entry.source_onnx_sha256)[:12]}…, "
            f"{entry.source} now {bundle.artifact(entry.source).sha256[:12]}…)"
        )
    for sub in entry.bucket_engines:  # a step-bucketed engine's other files
        sub_path = bundle.root / sub.path
        if root not in sub_path.resolve().parents or not sub_path.is_file() or sha256_file(sub_path) != sub.sha256:
            problems.append(f"step bucket engine file {sub.path} is missing or changed since it was built")
    if entry.bucketed:  # each bucket's engine bound to its place, as quantize binds the graphs
        graphs = [(entry.source, entry.sha256), *((sub.source, sub.sha256) for sub in entry.bucket_engines)]
        if entry.bucket_binding != bucket_binding(entry.bucket_by, entry.bucket_boundaries, graphs):
            problems.append(
                "its step bucket engines do not match the boundaries they were built for "
                "(swapped or edited in the manifest)"
            )
    runtime = entry.runtime
    hooks = backend(runtime if runtime in names() else "ort").engine
    return problems + (hooks.problems(path, entry, host, target, device_facts) if hooks is not None else [])


def cross_arch_notes(target: Target, host: HostFacts) -> list[str]:
    """The note for a target whose device is another architecture than this host (its engine
    runs here, but speed and power are this host's)."""
    if target.arch in ("host", host.arch):
        return []
    return [f"target {target.name} is {target.arch}, this host is {host.arch}: speed and power are this host's"]


@dataclass(frozen=True)
class EngineChoice:
    """The model file ``run``/``profile``/``check`` load for a target, and how."""

    target: Target
    runtime: str  # ort | trt | openvino | qnn
    precision: str
    path: Path  # .onnx / .ort / .plan / .blob / .xml to load
    source: Path  # the bundle ONNX it comes from (TensorRT checks and rebuilds need it)
    built: bool  # False: the bundle's own ONNX (no `edgekit build` output for this target)
    key: str
    warnings: tuple[str, ...] = ()  # runtimes skipped on this host and why, arch mismatches
    # QNN: seconds compiling the graph took at `edgekit build` (what loading the context saves).
    compile_seconds: float | None = None
    # An int8 model quantized with step buckets: every bucket's file (``path`` is bucket 0's) and
    # the position edges between them (runtimes.bucketed); () for one-scale models.
    bucket_paths: tuple[Path, ...] = ()
    boundaries: tuple[float, ...] = ()
    # What the build recorded for loading the file (the entry's ``session_options``: ORT's
    # optimization level and session config entries); None for the bundle's own ONNX and for
    # engines built before edgekit recorded it.
    session_options: Mapping[str, Any] | None = field(default=None, compare=False, hash=False)

    def open(self, threads: int = 0, bundle: Bundle | None = None) -> Runtime:
        """The ready ``Runtime`` (the choice's warnings added to its ``warnings``, once: a
        step-bucketed engine opens every bucket's file behind one runtime, which lists every
        graph's warnings, and the first graph holds them)."""
        hooks = backend(self.runtime).engine
        if hooks is None:
            raise UsageError(f"runtime {self.runtime} has no engines a target can load")

        def opened(path: Path) -> Runtime:
            runtime = hooks.open(dataclasses.replace(self, path=path), threads)
            if path == self.path:
                runtime.warnings.extend(self.warnings)
            return runtime

        if self.bucket_paths:
            b = bundle if bundle is not None else Bundle.load(self.source.parent)
            return open_paths(self.bucket_paths, self.boundaries, b, lambda path, shared: opened(path))
        return opened(self.path)

    def to_json(self) -> dict[str, Any]:
        return {
            "target": self.target.name,
            "runtime": self.runtime,
            "precision": self.precision,
            "path": str(self.path),
            "source": str(self.source),
            "built": self.built,
            "key": self.key,
            "warnings": list(self.warnings),
        }


def find_engine(
    bundle: str | Path | Bundle,
    target: str | Path | Target,
    precision: str,
    *,
    host: HostFacts | None = None,
) -> EngineChoice:
    """The engine of ``bundle`` to load for ``target`` in ``precision`` on this host.

    Runtimes are tried in the target's order; one this host cannot run (TensorRT not installed,
    not the target's device) is skipped with a warning. A TensorRT target needs a built engine;
    an ONNX Runtime target loads its built model when there is one, else the bundle's ONNX. A
    stale or missing engine raises ``EngineNeedsBuild`` with every reason (the build stage's
    ``select_engine`` rebuilds it when asked)."""
    root = bundle.root if isinstance(bundle, Bundle) else Path(bundle)
    b = Bundle.load(root)
    target = load_target(target)
    if precision not in target.precisions:
        raise UsageError(
            f"--precision {precision!r} is not one target {target.name} runs; valid: {', '.join(target.precisions)}"
        )
    host = host or HostFacts.detect()
    key = engine_key(target.name, precision)
    warnings: list[str] = []
    for runtime in target.runtimes:
        be = backend(runtime)
        if be.engine is None:
            raise UsageError(f"target {target.name} lists runtime {runtime}, which has no engines a target can load")
        skip, notes = be.engine.check_host(target, host, precision)
        if skip:
            warnings.append(skip)
            continue
        warnings += notes
        entry = b.engines.get(key)
        if entry is not None and entry.runtime != runtime:
            entry = None  # e.g. an ORT fallback entry while TensorRT is usable here
        if entry is None and be.engine.runs_unbuilt:
            # No engine built: the bundle's own model (QNN: compiled at load, what `build` saves).
            artifact = be.artifact(b, precision)
            source = b.path_of(artifact)
            buckets = b.step_buckets(artifact)
            paths = tuple(b.path_of(a) for a in buckets.graphs) if buckets else ()
            return EngineChoice(
                target,
                runtime,
                precision,
                source,
                source,
                False,
                key,
                tuple(warnings),
                bucket_paths=paths,
                boundaries=buckets.boundaries if buckets else (),
            )
        if entry is None:
            raise EngineNeedsBuild(
                f"bundle {b.root} has no {be.title} {precision} engine for target {target.name}",
                hint=f"build it here with `edgekit build {b.root} --target {target.name} --precision {precision}` "
                "(or pass --rebuild)",
            )
        problems = engine_problems(b, entry, host, target=target)
        if problems:
            raise EngineNeedsBuild(
                f"engine {key} of bundle {b.root} cannot be used here: {'; '.join(problems)}",
                hint="pass --rebuild, or run "
                f"`edgekit build {b.root} --target {target.name} --precision {precision} --rebuild`",
                stale=True,
            )
        source = b.root / b.artifact(entry.source).path
        paths = (b.root / entry.path, *(b.root / e.path for e in entry.bucket_engines)) if entry.bucketed else ()
        return EngineChoice(
            target,
            runtime,
            precision,
            b.root / entry.path,
            source,
            True,
            key,
            tuple(warnings),
            entry.compile_seconds,
            bucket_paths=paths,
            boundaries=entry.bucket_boundaries if entry.bucketed else (),
            session_options=entry.session_options,
        )
    raise TargetUnavailable(
        f"this host can run none of target {target.name}'s runtimes ({', '.join(target.runtimes)}) in {precision}"
        + (f": {'; '.join(warnings)}" if warnings else ""),
        hint=f"see what is missing with `edgekit doctor --target {target.name}`",
    )
