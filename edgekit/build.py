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

import contextlib
import dataclasses
import importlib.util
import io
import logging
import os
import platform
import shutil
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Mapping

from edgekit._deps import require
from edgekit.bundle import STAGING_PREFIX, Bundle, now_iso, sha256_file
from edgekit.errors import BundleError, EdgekitError, TargetUnavailable, UsageError
from edgekit.lint import Finding, has_errors, lint_onnx, quantization_profile_of
from edgekit.probes._sysfs import under
from edgekit.targets import Target, load_target

BUILD_SCHEMA = "edgekit.build/1"
ENGINES_DIR = "engines"
# Architecture names as platform.machine() spells them on other systems -> edgekit's.
_ARCH_ALIASES = {"amd64": "x86_64", "x64": "x86_64", "arm64": "aarch64", "armv8l": "aarch64"}


def engine_key(target: str, precision: str) -> str:
    return f"{target}/{precision}"


# ---------------------------------------------------------------------------------------------
# This host


@dataclass(frozen=True)
class HostFacts:
    """What engines are tied to, read from this host (files only: no GPU library needed)."""

    arch: str  # x86_64 | aarch64 | ...
    cpu: str | None  # CPU model name
    board: str | None  # /proc/device-tree/model (Jetson, Raspberry Pi), None elsewhere
    l4t: str | None  # Jetson L4T release ("36.3.0"), None elsewhere
    nvidia_gpu: bool  # an NVIDIA driver (or Jetson's integrated GPU) is visible

    @property
    def cpu_key(self) -> str:
        """The device key of an ORT model optimized for this very CPU."""
        return f"{self.arch}: {self.cpu or 'unknown CPU'}"

    @classmethod
    def detect(cls, root: str | Path = "/") -> "HostFacts":
        from edgekit.probes.system import system_state
        from edgekit.runtimes.trt import read_l4t

        machine = platform.machine().lower()
        cpu = system_state(root)["cpu"]
        l4t = read_l4t(under(root, "/etc/nv_tegra_release"))
        gpus = under(root, "/proc/driver/nvidia/gpus")
        nvidia = l4t is not None or under(root, "/dev/nvidia0").exists() or (gpus.is_dir() and any(gpus.iterdir()))
        return cls(_ARCH_ALIASES.get(machine, machine), cpu.get("model"), cpu.get("board"), l4t, nvidia)


def module_available(name: str) -> bool:
    """Whether ``import name`` would find a module, without importing it (a module set to None
    in ``sys.modules`` counts as missing, as ``import`` treats it)."""
    if name in sys.modules:
        return sys.modules[name] is not None
    return importlib.util.find_spec(name) is not None


def builds_on_device(target: Target) -> bool:
    """Whether the target's engines must be built on the device itself: TensorRT engines, and
    ONNX Runtime models optimized for the very CPU that runs them (arch "host")."""
    return target.uses_trt or target.arch == "host"


def device_problems(target: Target, host: HostFacts) -> list[str]:
    """Why this host is not the device a TensorRT target's engines are for (empty: it is)."""
    if target.trt.jetson and host.l4t is None:
        return ["this host is not a Jetson (no /etc/nv_tegra_release)"]
    problems = []
    if target.trt.board and not any(b.lower() in (host.board or "").lower() for b in target.trt.board):
        problems.append(f"this board is {host.board or 'unknown'!r}, target {target.name} is a {' or '.join(target.trt.board)}")
    if not host.nvidia_gpu:
        problems.append("no NVIDIA GPU is visible (no /dev/nvidia0, no /proc/driver/nvidia/gpus)")
    return problems


def _gpu_problems(target: Target, trt_host: Any) -> list[str]:
    wanted = target.trt.compute_capability
    if wanted and trt_host.compute_capability not in wanted:
        return [
            f"this GPU is {trt_host.gpu_name} (compute capability {trt_host.compute_capability}), "
            f"target {target.name} has compute capability {' or '.join(wanted)}"
        ]
    return []


def _refuse_device(target: Target, bundle: Bundle, problems: list[str]) -> TargetUnavailable:
    return TargetUnavailable(
        f"cannot build target {target.name}'s TensorRT engine on this host: {'; '.join(problems)} "
        "(an engine only runs on the GPU, TensorRT version and L4T release that built it)",
        hint=f"build it on the device: `edgekit deploy {bundle.root} --host USER@DEVICE --target {target.name}` "
        f"builds it there, or run `edgekit build {bundle.root} --target {target.name}` on the device",
    )


# ---------------------------------------------------------------------------------------------
# Building


def build_bundle(
    path: str | Path | Bundle,
    target: str | Path | Target = "cpu",
    precision: str = "fp32",
    rebuild: bool = False,
    *,
    host: HostFacts | None = None,
) -> dict[str, Any]:
    """Build ``precision``'s engine of the bundle at ``path`` for ``target``; the
    ``edgekit build --json`` document (``edgekit.build/1``) with the manifest entry.

    An up-to-date engine is kept (status ``up-to-date``); a stale one is an error unless
    ``rebuild``, which always builds anew. ``host`` replaces this host's facts (tests)."""
    bundle = path if isinstance(path, Bundle) else Bundle.load(path)
    target = load_target(target)
    if precision not in target.precisions:
        raise UsageError(
            f"--precision {precision!r} is not one target {target.name} runs; valid: {', '.join(target.precisions)}"
        )
    host = host or HostFacts.detect()
    trt_host = None
    if target.uses_trt:
        problems = device_problems(target, host)
        if problems:
            raise _refuse_device(target, bundle, problems)
        require("tensorrt")
        from edgekit.runtimes import trt as trt_backend

        trt_host = trt_backend.host_metadata()
        problems = _gpu_problems(target, trt_host)
        if problems:
            raise _refuse_device(target, bundle, problems)
    elif precision == "fp16":
        raise UsageError(f"--precision fp16 needs TensorRT; target {target.name} runs ONNX Runtime (fp32, int8)")

    key = engine_key(target.name, precision)
    old = (bundle.manifest.get("engines") or {}).get(key)
    if old is not None and not rebuild:
        problems = engine_problems(bundle, old, host, trt_host)
        if not problems:
            return _document(bundle, target, precision, old, "up-to-date", [])
        raise EdgekitError(
            f"engine {key} of bundle {bundle.root} is stale: {'; '.join(problems)}",
            hint=f"rebuild it with `edgekit build {bundle.root} --target {target.name} --precision {precision} --rebuild`",
        )

    source_name = _source_artifact(bundle, target, precision)
    source = bundle.artifact(source_name)
    workdir = Path(tempfile.mkdtemp(prefix=STAGING_PREFIX, dir=bundle.root))
    try:
        model_path, fixed = fix_dynamic_shapes(bundle.root / source.path, bundle, workdir)
        findings = lint_onnx(model_path, target, artifact=source_name)
        if has_errors(findings):
            first = next(f for f in findings if f.severity == "error")
            raise EdgekitError(
                f"bundle {bundle.root} will not deploy to target {target.name}: {first.message}",
                hint=f"see every finding with `edgekit lint {bundle.root} --target {target.name}`",
            )
        if target.uses_trt:
            files, facts = _build_trt(model_path, source.sha256, target, precision, workdir)
        else:
            files, facts = _build_ort(model_path, target, host, workdir)
        entry = _install(bundle, target, precision, files)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    entry.update(facts)
    entry.update({
        "target": target.name,
        "precision": precision,
        "source": source_name,
        "source_onnx_sha256": source.sha256,
        "fixed_shapes": fixed,
        "made_by": "build",
        "created": now_iso(),
    })
    bundle.manifest.setdefault("engines", {})[key] = entry
    bundle.save()
    _remove_superseded(bundle, old)
    return _document(bundle, target, precision, entry, "rebuilt" if old else "built", findings)


def _document(bundle: Bundle, target: Target, precision: str, entry: Mapping[str, Any], status: str,
              findings: Iterable[Finding]) -> dict[str, Any]:
    return {
        "schema": BUILD_SCHEMA,
        "bundle": str(bundle.root),
        "target": target.name,
        "precision": precision,
        "key": engine_key(target.name, precision),
        "status": status,
        "engine": dict(entry),
        "lint": [f.to_json() for f in findings],
    }


def _source_artifact(bundle: Bundle, target: Target, precision: str) -> str:
    """The bundle artifact an engine of ``precision`` is built from (fp16 engines: from fp32)."""
    if precision != "int8":
        return "fp32"
    if "int8" not in bundle.manifest["artifacts"]:
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


def fix_dynamic_shapes(onnx_path: Path, bundle: Bundle, workdir: Path) -> tuple[Path, dict[str, list[int]]]:
    """``onnx_path`` itself when its graph inputs are static; else a copy in ``workdir`` whose
    dynamic inputs are fixed to the manifest's shapes (and outputs re-inferred), and the shapes
    that were fixed."""
    onnx = require("onnx")
    from onnxruntime.tools.onnx_model_utils import fix_output_shapes, make_input_shape_fixed

    model = onnx.load(str(onnx_path))
    initializers = {i.name for i in model.graph.initializer}
    manifest_shapes = {n: list(s.shape) for n, s in bundle.inputs.items()}
    fixed: dict[str, list[int]] = {}
    for value in model.graph.input:
        if value.name in initializers:
            continue
        tensor = value.type.tensor_type
        dims = tensor.shape.dim if tensor.HasField("shape") else None
        if dims is not None and all(d.HasField("dim_value") and d.dim_value > 0 for d in dims):
            continue
        shape = manifest_shapes.get(value.name)
        if shape is None or (dims is not None and len(dims) != len(shape)):
            raise EdgekitError(
                f"{onnx_path.name}: input {value.name!r} has dynamic dims and the manifest gives no shape of its rank "
                f"for it (manifest inputs: {manifest_shapes})",
                hint="re-export with static shapes (edgekit export)",
            )
        make_input_shape_fixed(model.graph, value.name, shape)
        fixed[value.name] = shape
    if not fixed:
        return onnx_path, {}
    fix_output_shapes(model)
    out = workdir / f"static-{onnx_path.name}"
    onnx.save(model, str(out))
    return out, fixed


def _build_ort(model_path: Path, target: Target, host: HostFacts, workdir: Path) -> tuple[dict[str, Path], dict[str, Any]]:
    ort = require("onnxruntime")
    settings = target.ort
    arch = host.arch if target.arch == "host" else target.arch
    # "all" adds NCHWc layouts sized to this CPU's vectors: such a model belongs to this CPU only.
    host_specific = settings.format == "onnx" and settings.graph_optimization == "all"
    if settings.format == "ort":
        files = _convert_to_ort(model_path, settings.optimization_style, arch, workdir)
        level = "basic + saved runtime optimizations" if settings.optimization_style == "runtime" else "all (no NCHWc)"
    else:
        from edgekit.runtimes.ort import GRAPH_OPTIMIZATION_LEVELS

        out = workdir / "optimized.onnx"
        so = ort.SessionOptions()
        so.graph_optimization_level = getattr(ort.GraphOptimizationLevel, GRAPH_OPTIMIZATION_LEVELS[settings.graph_optimization])
        so.optimized_model_filepath = str(out)
        so.log_severity_level = 3  # ORT warns that "all" is hardware-specific: the entry records it
        if arch == "aarch64":
            # Keep int8 QDQ activations signed (ARM's fast path) instead of x86's uint8 rewrite.
            so.add_session_config_entry("session.qdqisint8allowed", "1")
        try:
            ort.InferenceSession(str(model_path), so, providers=["CPUExecutionProvider"])
        except Exception as exc:  # noqa: BLE001 - onnxruntime raises its own Fail/InvalidGraph types
            raise EdgekitError(
                f"ONNX Runtime {ort.__version__} cannot optimize {model_path.name} for target {target.name}: "
                f"{str(exc).splitlines()[0][:300]}",
                hint="run `edgekit lint BUNDLE --target T` and `edgekit run BUNDLE` to see why",
            ) from None
        files = {"model": out}
        level = settings.graph_optimization
    facts = {
        "runtime": "ort",
        "runtime_version": ort.__version__,
        "format": settings.format,
        "device": host.cpu_key if host_specific else arch,
        "portable": not host_specific,
        "compute_capability": None,
        "l4t": None,
        "config": {
            "graph_optimization": level,
            "optimization_style": settings.optimization_style if settings.format == "ort" else None,
            "providers": list(settings.providers),
        },
    }
    return files, facts


def _convert_to_ort(model_path: Path, style: str, arch: str, workdir: Path) -> dict[str, Path]:
    """``.ort`` model and required-operators config via onnxruntime's converter (its progress
    prints go to a buffer: library code prints nothing)."""
    require("onnxruntime")
    root_handlers = list(logging.getLogger().handlers)
    from onnxruntime.tools.convert_onnx_models_to_ort import OptimizationStyle, convert_onnx_models_to_ort

    # Importing it runs logging.basicConfig and sets its own logger to DEBUG: undo both, so a
    # library call neither reconfigures the application's logging nor prints INFO lines.
    logging.getLogger().handlers[:] = root_handlers
    logging.getLogger("ort_format_model.utils").setLevel(logging.WARNING)

    src_dir, out_dir = workdir / "ort-in", workdir / "ort-out"
    src_dir.mkdir()
    # The converter converts every .onnx under a directory: give it a directory of one.
    shutil.copyfile(model_path, src_dir / "model.onnx")
    log = io.StringIO()
    try:
        with contextlib.redirect_stdout(log):
            convert_onnx_models_to_ort(
                src_dir / "model.onnx",
                output_dir=out_dir,
                optimization_styles=[OptimizationStyle.Runtime if style == "runtime" else OptimizationStyle.Fixed],
                target_platform="arm" if arch == "aarch64" else "amd64",
            )
    except Exception as exc:  # noqa: BLE001 - the converter re-raises whatever ORT raised
        tail = " | ".join(log.getvalue().strip().splitlines()[-3:])
        raise EdgekitError(
            f"onnxruntime could not convert {model_path.name} to .ort: {str(exc).splitlines()[0][:300]} ({tail})",
            hint="run `edgekit lint BUNDLE --target T` to see what the target cannot run",
        ) from None
    models, configs = sorted(out_dir.glob("*.ort")), sorted(out_dir.glob("*.config"))
    if len(models) != 1 or len(configs) != 1:
        raise EdgekitError(f"onnxruntime's converter wrote {[p.name for p in out_dir.iterdir()]}; expected one .ort and one .config")
    # Its header names the temp paths it converted: keep the operator lines, say what they are.
    ops = [line for line in configs[0].read_text().splitlines() if line and not line.startswith("#")]
    configs[0].write_text(
        "# Operators the .ort model next to this file needs: build a minimal onnxruntime with\n"
        "# ./build.sh --minimal_build --include_ops_by_config <this file>\n" + "\n".join(ops) + "\n"
    )
    return {"model": models[0], "required_operators": configs[0]}


def _build_trt(model_path: Path, source_sha256: str, target: Target, precision: str, workdir: Path) -> tuple[dict[str, Path], dict[str, Any]]:
    from edgekit.runtimes import trt as trt_backend

    plan = workdir / f"{precision}.plan"
    level = target.trt.builder_optimization_level
    cfg = trt_backend.TrtBuildConfig(
        precision=precision, workspace_mib=target.trt.workspace_mib,
        builder_optimization_level=None if level < 0 else level,
    )
    meta = trt_backend.build_engine(model_path, plan, cfg)
    if meta.source_onnx_sha256 != source_sha256:
        # Built from the shape-fixed copy: key the engine to the bundle artifact it stands for.
        meta = dataclasses.replace(meta, source_onnx_sha256=source_sha256)
        trt_backend.write_metadata(plan, meta)
    facts = {
        "runtime": "trt",
        "runtime_version": meta.tensorrt_version,
        "format": "plan",
        "device": meta.gpu_name,
        "portable": False,
        "compute_capability": meta.compute_capability,
        "l4t": meta.l4t,
        "config": {"workspace_mib": cfg.workspace_mib, "builder_optimization_level": cfg.builder_optimization_level},
    }
    return {"model": plan, "metadata": trt_backend.sidecar_path(plan)}, facts


_SUFFIXES = {"metadata": ".plan.json", "required_operators": ".required_operators.config"}


def _install(bundle: Bundle, target: Target, precision: str, files: Mapping[str, Path]) -> dict[str, Any]:
    """Move the built files to ``engines/<target>/<precision>-<sha8><suffix>``; the entry's file fields."""
    model = files["model"]
    digest = sha256_file(model)
    stem = f"{precision}-{digest[:8]}"
    folder = bundle.root / ENGINES_DIR / target.name
    folder.mkdir(parents=True, exist_ok=True)
    rel = lambda p: p.relative_to(bundle.root).as_posix()  # noqa: E731
    final = folder / f"{stem}{model.suffix}"
    entry: dict[str, Any] = {"path": rel(final), "sha256": digest, "bytes": model.stat().st_size}
    for role, path in files.items():
        if role == "model":
            continue
        dest = folder / f"{stem}{_SUFFIXES[role]}"
        os.replace(path, dest)
        entry[role] = {"path": rel(dest), "sha256": sha256_file(dest)}
    os.replace(model, final)
    return entry


def _entry_files(entry: Mapping[str, Any] | None) -> set[str]:
    if not entry:
        return set()
    files = {entry.get("path")}
    files |= {entry[role]["path"] for role in _SUFFIXES if isinstance(entry.get(role), dict)}
    return {f for f in files if f}


def _remove_superseded(bundle: Bundle, old: Mapping[str, Any] | None) -> None:
    """Delete an old engine's files once the manifest no longer names them (only ever inside
    ``engines/`` of this bundle, whatever the manifest said)."""
    live = set().union(*(_entry_files(e) for e in (bundle.manifest.get("engines") or {}).values()))
    engines = (bundle.root / ENGINES_DIR).resolve()
    for rel in _entry_files(old) - live:
        path = (bundle.root / rel).resolve()
        if engines in path.parents:
            path.unlink(missing_ok=True)


# ---------------------------------------------------------------------------------------------
# Staleness and selection


def engine_problems(bundle: Bundle, entry: Mapping[str, Any], host: HostFacts, trt_host: Any = None) -> list[str]:
    """Every reason ``entry`` (a manifest engine) should not be loaded on this host (empty: load
    it). ``trt_host``: TensorRT host metadata (read when None and the engine is TensorRT's)."""
    problems = []
    path = bundle.root / str(entry.get("path", ""))
    root = bundle.root.resolve()
    if root not in path.resolve().parents:
        return [f"its path {entry.get('path')!r} points outside the bundle"]
    if not path.is_file():
        problems.append(f"engine file {entry.get('path')} is missing")
    elif sha256_file(path) != entry.get("sha256"):
        problems.append(f"engine file {entry.get('path')} changed since it was built (sha256 mismatch)")
    source = bundle.manifest["artifacts"].get(entry.get("source", "fp32"))
    if source is None:
        problems.append(f"its source model {entry.get('source')!r} is no longer in the bundle")
    elif source["sha256"] != entry.get("source_onnx_sha256"):
        problems.append(
            f"source ONNX changed (engine from sha256 {str(entry.get('source_onnx_sha256'))[:12]}…, "
            f"{entry.get('source')} now {source['sha256'][:12]}…)"
        )
    if entry.get("runtime") == "trt":
        problems += _trt_problems(path, entry, trt_host)
    else:
        problems += _ort_problems(entry, host)
    return problems


def _ort_problems(entry: Mapping[str, Any], host: HostFacts) -> list[str]:
    ort = require("onnxruntime")
    problems = []
    built = str(entry.get("runtime_version") or "0")
    if _version_tuple(ort.__version__) < _version_tuple(built):
        # Newer ORT reads older optimized graphs and .ort files, not the other way round.
        problems.append(f"ONNX Runtime version: built with {built}, this host has older {ort.__version__}")
    if not entry.get("portable", True) and entry.get("device") != host.cpu_key:
        problems.append(f"device: optimized for {entry.get('device')}, this host is {host.cpu_key}")
    return problems


def _trt_problems(plan: Path, entry: Mapping[str, Any], trt_host: Any) -> list[str]:
    from edgekit.runtimes import trt as trt_backend

    if not plan.is_file():
        return []
    try:
        meta = trt_backend.read_metadata(plan)
    except BundleError as exc:
        return [f"no usable metadata sidecar ({exc.message})"]
    trt_host = trt_host if trt_host is not None else trt_backend.host_metadata()
    # The source check is done above against the manifest; the precision must match the key.
    return trt_backend.check_compatible(meta, trt_host, None, entry.get("precision"))


def _version_tuple(version: str) -> tuple[int, ...]:
    parts = []
    for piece in version.split("+")[0].split("."):
        digits = "".join(c for c in piece if c.isdigit())
        parts.append(int(digits) if digits else 0)
    return tuple(parts)


@dataclass(frozen=True)
class EngineChoice:
    """The model file ``run``/``profile``/``check`` load for a target, and how."""

    target: Target
    runtime: str  # ort | trt
    precision: str
    path: Path  # .onnx / .ort / .plan to load
    source: Path  # the bundle ONNX it comes from (TensorRT checks and rebuilds need it)
    built: bool  # False: the bundle's own ONNX (no `edgekit build` output for this target)
    key: str
    warnings: tuple[str, ...] = ()  # runtimes skipped on this host and why, arch mismatches

    def open(self, threads: int = 0) -> Any:
        """The ready ``Runtime`` (the choice's warnings copied into ``runtime.warnings``)."""
        if self.runtime == "trt":
            from edgekit.runtimes.trt import load_engine

            runtime = load_engine(self.path, source_onnx=self.source, precision=self.precision)
        else:
            from edgekit.runtimes.ort import OrtOptions, OrtRuntime

            ort = self.target.ort
            options = OrtOptions(providers=ort.providers, provider_options=ort.provider_options or None, intra_op_threads=threads)
            runtime = OrtRuntime(self.path, options)
        for warning in self.warnings:
            runtime.warn(warning)
        return runtime

    def to_json(self) -> dict[str, Any]:
        return {"target": self.target.name, "runtime": self.runtime, "precision": self.precision, "path": str(self.path),
                "source": str(self.source), "built": self.built, "key": self.key, "warnings": list(self.warnings)}


def select_engine(
    bundle: str | Path | Bundle,
    target: str | Path | Target = "cpu",
    precision: str = "fp32",
    rebuild: bool = False,
    *,
    host: HostFacts | None = None,
) -> EngineChoice:
    """The engine of ``bundle`` to load for ``target`` in ``precision`` on this host.

    Runtimes are tried in the target's order; one this host cannot run (TensorRT not installed,
    not the target's device) is skipped with a warning. A TensorRT target needs a built engine;
    an ONNX Runtime target loads its built model when there is one, else the bundle's ONNX. A
    stale engine is refused with every reason, or rebuilt when ``rebuild`` (a fresh one is
    never rebuilt)."""
    root = bundle.root if isinstance(bundle, Bundle) else Path(bundle)
    b = Bundle.load(root)
    target = load_target(target)
    if precision not in target.precisions:
        raise UsageError(f"--precision {precision!r} is not one target {target.name} runs; valid: {', '.join(target.precisions)}")
    host = host or HostFacts.detect()
    key = engine_key(target.name, precision)
    warnings: list[str] = []
    for runtime in target.runtimes:
        if runtime == "trt":
            reasons = ([] if module_available("tensorrt") else ["tensorrt is not installed"]) + device_problems(target, host)
            if reasons:
                warnings.append(f"target {target.name}: TensorRT skipped on this host ({'; '.join(reasons)})")
                continue
        elif precision == "fp16":
            warnings.append("ONNX Runtime runs fp32 and int8 models only, not fp16")
            continue
        elif target.arch not in ("host", host.arch):
            warnings.append(f"target {target.name} is {target.arch}, this host is {host.arch}: speed and power are this host's")
        entry = (b.manifest.get("engines") or {}).get(key)
        if entry is not None and entry.get("runtime") != runtime:
            entry = None  # e.g. an ORT fallback entry while TensorRT is usable here
        if entry is None and runtime == "ort":
            source = b.path_of("int8" if precision == "int8" else "fp32")
            return EngineChoice(target, runtime, precision, source, source, False, key, tuple(warnings))
        if entry is None:
            if not rebuild:
                raise BundleError(
                    f"bundle {b.root} has no TensorRT {precision} engine for target {target.name}",
                    hint=f"build it here with `edgekit build {b.root} --target {target.name} --precision {precision}` (or pass --rebuild)",
                )
            build_bundle(b, target, precision, host=host)
            return select_engine(root, target, precision, host=host)
        problems = engine_problems(b, entry, host)
        if problems:
            if not rebuild:
                raise EdgekitError(
                    f"engine {key} of bundle {b.root} cannot be used here: {'; '.join(problems)}",
                    hint=f"pass --rebuild, or run `edgekit build {b.root} --target {target.name} --precision {precision} --rebuild`",
                )
            build_bundle(b, target, precision, rebuild=True, host=host)
            return select_engine(root, target, precision, host=host)
        source = b.root / b.artifact(entry["source"]).path
        return EngineChoice(target, runtime, precision, b.root / entry["path"], source, True, key, tuple(warnings))
    raise TargetUnavailable(
        f"this host can run none of target {target.name}'s runtimes ({', '.join(target.runtimes)}) in {precision}"
        + (f": {'; '.join(warnings)}" if warnings else ""),
        hint=f"see what is missing with `edgekit doctor --target {target.name}`",
    )


# ---------------------------------------------------------------------------------------------
# The demo's build stage


def demo_build_stage(bundle: str | Path | Bundle, target: str = "cpu", precision: str = "fp32") -> dict[str, Any]:
    """`edgekit demo`'s build stage for one bundle: its lint findings and the built engine,
    as a small JSON-ready dict for the demo report and table."""
    from edgekit.lint import lint_report

    root = bundle.root if isinstance(bundle, Bundle) else Path(bundle)
    lint = lint_report(root, target)
    built = build_bundle(root, target, precision)
    engine = built["engine"]
    return {
        "target": built["target"],
        "precision": precision,
        "status": built["status"],
        "engine": engine["path"],
        "format": engine["format"],
        "bytes": engine["bytes"],
        "runtime": f"{engine['runtime']} {engine['runtime_version']}",
        "lint": lint["counts"],
        "lint_passed": lint["passed"],
        "findings": [f"{f['severity']}: {f['message']}" for f in lint["findings"]],
    }


__all__ = [
    "BUILD_SCHEMA",
    "ENGINES_DIR",
    "EngineChoice",
    "HostFacts",
    "build_bundle",
    "builds_on_device",
    "demo_build_stage",
    "device_problems",
    "engine_key",
    "engine_problems",
    "fix_dynamic_shapes",
    "module_available",
    "select_engine",
]
