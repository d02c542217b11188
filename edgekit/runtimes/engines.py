"""Choosing a built engine for a target: the manifest's engine entries, their compatibility
keys, and why an entry cannot be loaded on this host.

``edgekit build`` writes entries into ``manifest["engines"]["<target>/<precision>"]``; this module
only reads them: ``find_engine`` picks the model file ``run``/``profile``/``check`` load for a
target and refuses a stale one (source ONNX changed, other runtime version, other device) with
every reason. Rebuilding a stale engine is the build stage's job (``edgekit.builder.select_engine``).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

import edgekit.runtimes.openvino as ov_backend  # imports openvino only when a function runs
import edgekit.runtimes.openvino_engine as ov_engine
import edgekit.runtimes.qnn as qnn_backend  # imports onnxruntime-qnn only when a function runs
import edgekit.runtimes.trt as trt_backend  # imports tensorrt/cuda only when a function runs
from edgekit._deps import require
from edgekit.bundle import Bundle, sha256_file
from edgekit.errors import BundleError, TargetUnavailable, UsageError
from edgekit.host import HostFacts, module_available
from edgekit.runtimes.ort import OrtOptions, OrtRuntime  # lazy: onnxruntime
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
            f"this Jetson runs L4T {host.l4t}" + (f" (JetPack {jetpack})" if jetpack else "")
            + f", target {target.name} is for JetPack {target.trt.jetpack} (L4T {' or '.join(target.trt.l4t)}, "
            f"TensorRT {target.trt.tensorrt})" + (f": use --target {' or '.join(others)}" if others else "")
        )
    if target.trt.board and not any(b.lower() in (host.board or "").lower() for b in target.trt.board):
        problems.append(f"this board is {host.board or 'unknown'!r}, target {target.name} is a {' or '.join(target.trt.board)}")
    if not host.nvidia_gpu:
        problems.append("no NVIDIA GPU is visible (no /dev/nvidia0, no /proc/driver/nvidia/gpus)")
    return problems



def engine_problems(bundle: Bundle, entry: Mapping[str, Any], host: HostFacts, trt_host: Any = None,
                    target: Target | None = None) -> list[str]:
    """Every reason ``entry`` (a manifest engine) should not be loaded on this host (empty: load
    it). ``trt_host``: TensorRT host metadata (read when None and the engine is TensorRT's).
    ``target``: the target as it is now (a QNN context binary is tied to its htp_arch/soc_model)."""
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
    elif entry.get("runtime") == "openvino":
        problems += _openvino_problems(entry, host)
    elif entry.get("runtime") == "qnn":
        problems += _qnn_problems(entry, target)
    else:
        problems += _ort_problems(entry, host)
    return problems


def _openvino_problems(entry: Mapping[str, Any], host: HostFacts) -> list[str]:
    if not module_available("openvino"):
        return ["openvino is not installed (pip install 'edgekit[openvino]')"]
    return ov_engine.blob_problems(entry, host.isa)


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


def _qnn_problems(entry: Mapping[str, Any], target: Target | None) -> list[str]:
    """A QNN context binary loads only with the QNN SDK that compiled it (onnxruntime-qnn ships
    one) and only on the SoC it was compiled for."""
    if not module_available("onnxruntime_qnn"):
        return ["onnxruntime-qnn is not installed (pip install 'edgekit[qnn]')"]
    built = entry.get("qnn") or {}
    now = qnn_backend.versions()
    problems = [
        f"{what} version: compiled with {built.get(key)}, this host has {now[key]}"
        for key, what in (("qnn_sdk", "QNN SDK"), ("onnxruntime_qnn", "onnxruntime-qnn"))
        if built.get(key) != now[key]
    ]
    if target is not None:
        for key in ("htp_arch", "soc_model"):
            want = getattr(target.qnn, key)
            if want and built.get(key) != want:
                problems.append(f"{key}: compiled for {built.get(key)}, target {target.name} now says {want}")
    return problems


def _trt_problems(plan: Path, entry: Mapping[str, Any], trt_host: Any) -> list[str]:
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
    runtime: str  # ort | trt | openvino | qnn
    precision: str
    path: Path  # .onnx / .ort / .plan / .blob to load
    source: Path  # the bundle ONNX it comes from (TensorRT checks and rebuilds need it)
    built: bool  # False: the bundle's own ONNX (no `edgekit build` output for this target)
    key: str
    warnings: tuple[str, ...] = ()  # runtimes skipped on this host and why, arch mismatches
    # QNN: seconds compiling the graph took at `edgekit build` (what loading the context saves).
    compile_seconds: float | None = None

    def open(self, threads: int = 0) -> Any:
        """The ready ``Runtime`` (the choice's warnings copied into ``runtime.warnings``)."""
        if self.runtime == "trt":
            runtime = trt_backend.load_engine(self.path, source_onnx=self.source, precision=self.precision)
        elif self.runtime == "openvino":
            # A blob imports with the settings it was built with: the same target table.
            options = ov_backend.options_for(self.target.openvino, self.precision, threads)
            runtime = ov_backend.OpenVinoRuntime(self.path, options, source_onnx=self.source)
        elif self.runtime == "qnn":
            runtime = qnn_backend.QnnRuntime(self.path, qnn_backend.qnn_options_for(self.target, self.precision), threads=threads)
            if self.compile_seconds is not None:
                runtime.session_info["compile_seconds_at_build"] = self.compile_seconds
                runtime.session_info["saved_seconds"] = self.compile_seconds - runtime.session_seconds
            if not self.built:
                runtime.warn(f"target {self.target.name}: no precompiled context; the graph was compiled at load "
                             f"({runtime.session_seconds:.2f} s; `edgekit build BUNDLE --target {self.target.name}` saves that)")
        else:
            ort = self.target.ort
            options = OrtOptions(providers=ort.providers, provider_options=ort.provider_options or None, intra_op_threads=threads)
            runtime = OrtRuntime(self.path, options)
        for warning in self.warnings:
            runtime.warn(warning)
        return runtime

    def to_json(self) -> dict[str, Any]:
        return {"target": self.target.name, "runtime": self.runtime, "precision": self.precision, "path": str(self.path),
                "source": str(self.source), "built": self.built, "key": self.key, "warnings": list(self.warnings)}


def find_engine(
    bundle: str | Path | Bundle,
    target: str | Path | Target = "cpu",
    precision: str = "fp32",
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
        elif runtime == "openvino":
            if not module_available("openvino"):
                warnings.append(f"target {target.name}: OpenVINO skipped on this host (openvino is not installed: pip install 'edgekit[openvino]')")
                continue
        elif runtime == "qnn":
            require("onnxruntime_qnn")  # exit 3 with the install line
            if target.arch != host.arch:
                warnings.append(f"target {target.name}'s NPU is emulated on this {host.arch} host: accuracy is the NPU's, latency is not")
        elif precision in ("fp16", "bf16"):
            warnings.append(f"ONNX Runtime runs fp32 and int8 models only, not {precision}")
            continue
        if runtime != "trt" and target.arch not in ("host", host.arch):
            warnings.append(f"target {target.name} is {target.arch}, this host is {host.arch}: speed and power are this host's")
        entry = (b.manifest.get("engines") or {}).get(key)
        if entry is not None and entry.get("runtime") != runtime:
            entry = None  # e.g. an ORT fallback entry while TensorRT is usable here
        if entry is None and runtime in ("ort", "openvino"):
            source = b.path_of("int8" if precision == "int8" else "fp32")
            return EngineChoice(target, runtime, precision, source, source, False, key, tuple(warnings))
        if entry is None and runtime == "qnn":
            # No context binary yet: the bundle's model is compiled at load (what `build` saves).
            source = b.path_of(qnn_backend.qnn_artifact(b, precision))
            return EngineChoice(target, runtime, precision, source, source, False, key, tuple(warnings))
        if entry is None:
            raise EngineNeedsBuild(
                f"bundle {b.root} has no TensorRT {precision} engine for target {target.name}",
                hint=f"build it here with `edgekit build {b.root} --target {target.name} --precision {precision}` (or pass --rebuild)",
            )
        problems = engine_problems(b, entry, host, target=target)
        if problems:
            raise EngineNeedsBuild(
                f"engine {key} of bundle {b.root} cannot be used here: {'; '.join(problems)}",
                hint=f"pass --rebuild, or run `edgekit build {b.root} --target {target.name} --precision {precision} --rebuild`",
                stale=True,
            )
        source = b.root / b.artifact(entry["source"]).path
        compiled = (entry.get("session_seconds") or {}).get("compile")
        return EngineChoice(target, runtime, precision, b.root / entry["path"], source, True, key, tuple(warnings), compiled)
    raise TargetUnavailable(
        f"this host can run none of target {target.name}'s runtimes ({', '.join(target.runtimes)}) in {precision}"
        + (f": {'; '.join(warnings)}" if warnings else ""),
        hint=f"see what is missing with `edgekit doctor --target {target.name}`",
    )
