"""`edgekit doctor`: what this host can run for a target, and what is missing (with the line
that installs it).

For each target: every runtime it lists, in order, through the runtime registry (what each needs
and its install line), with versions (ONNX Runtime and the execution providers this build has;
TensorRT, the GPU and its compute capability; onnxruntime-qnn, its QNN SDK and whether the
Hexagon NPU is emulated here), whether this host is the target's
device (architecture, Jetson/L4T, board, GPU), the power probe (``edgekit.probes.power.detect``)
and, on Jetson targets, ``nvpmodel``; OpenVINO's version, devices and their capabilities, and
this CPU's int8/bf16 ISA features. Reads versions from installed packages; imports TensorRT and
OpenVINO only when they are installed.
"""

from __future__ import annotations

import platform
import shutil
from collections.abc import Callable
from importlib import metadata
from pathlib import Path
from typing import Any

from edgekit.errors import EdgekitError
from edgekit.host import HostFacts
from edgekit.probes.power import Unavailable, detect
from edgekit.runtimes import qnn as qnn_backend  # imports onnxruntime-qnn only when a function runs
from edgekit.runtimes.aihub import client as aihub_client  # imports qai-hub only when a function runs
from edgekit.runtimes.engines import device_problems
from edgekit.runtimes.openvino import (  # lazy: openvino
    available_devices,
    device_capabilities,
    openvino_version,
)
from edgekit.runtimes.registry import backend
from edgekit.runtimes.trt import host_metadata
from edgekit.targets import Target, list_targets, load_target

DOCTOR_SCHEMA = "edgekit.doctor/1"

# How to get an execution provider that this onnxruntime build lacks.
PROVIDER_INSTALL: dict[str, str] = {
    "CUDAExecutionProvider": "pip uninstall -y onnxruntime && pip install onnxruntime-gpu (on Jetson: the onnxruntime-gpu wheel for your JetPack)",
    "TensorrtExecutionProvider": "pip uninstall -y onnxruntime && pip install onnxruntime-gpu",
    "QNNExecutionProvider": "an onnxruntime built with --use_qnn (Android), or pip install onnxruntime-qnn (Windows on Snapdragon)",
    "NnapiExecutionProvider": "an onnxruntime built for Android with --use_nnapi (./build.sh --android --use_nnapi --build_wheel)",
    "XnnpackExecutionProvider": "an onnxruntime built with --use_xnnpack (./build.sh --use_xnnpack --build_wheel)",
    "CoreMLExecutionProvider": "onnxruntime on macOS/iOS (pip install onnxruntime on a Mac)",
}
TRT_INSTALL = backend("trt").requires.install
OPENVINO_INSTALL = backend("openvino").requires.install
# What an OpenVINO device needs besides the openvino package (its plugin ships in the wheel).
OPENVINO_DEVICE_INSTALL: dict[str, str] = {
    "GPU": "the Intel GPU compute driver: sudo apt install intel-opencl-icd (or Intel's compute-runtime release), on a machine with an Intel Arc/integrated GPU",
    "NPU": "the Intel NPU driver (github.com/intel/linux-npu-driver releases), on a Core Ultra machine",
}
TRT_INSTALL_JETSON = (
    "TensorRT comes with JetPack: sudo apt install nvidia-jetpack (make the venv with --system-site-packages)"
)
# JetPack 5's TensorRT bindings are for its Python 3.8; edgekit needs >= 3.10.
TRT_INSTALL_JETPACK5 = (
    "JetPack 5's TensorRT bindings are for Python 3.8: build TensorRT 8.5's bindings for this Python "
    "from the TensorRT OSS release/8.5 python/ folder (docs/targets.md: 'Jetson with JetPack 5')"
)
# cuda-python for a JetPack's CUDA (its bindings must not be newer than the driver's CUDA).
CUDA_PYTHON_FOR_CUDA: dict[str, str] = {
    "11.4": "pip install 'cuda-python>=11.8,<12'",
    "12.2": "pip install 'cuda-python>=12.2,<12.3'",
    "12.6": "pip install 'cuda-python>=12.6,<12.7'",
}
# The oldest TensorRT with the name-based IO API (execute_async_v3, set_tensor_address).
TRT_MIN = (8, 5)
POWER_INSTALL: dict[str, str] = {"nvml": "pip install 'edgekit[nvml]'"}
DEPLOY_TOOLS = ("ssh", "scp", "rsync")


def doctor(target: str | Path | Target | None = None, *, host: HostFacts | None = None) -> dict[str, Any]:
    """The ``edgekit doctor --json`` document (``edgekit.doctor/1``): this host, its runtimes,
    and per target (one, or every built-in one) what runs, what does not and why."""
    host = host or HostFacts.detect()
    targets = [load_target(target)] if target is not None else list_targets()
    env = environment(host)
    power_cache: dict[str, dict[str, Any]] = {}
    return {
        "schema": DOCTOR_SCHEMA,
        "host": {
            "arch": host.arch,
            "cpu": host.cpu,
            "cpu_isa": list(host.isa),
            "board": host.board,
            "l4t": host.l4t,
            "nvidia_gpu": host.nvidia_gpu,
            "python": platform.python_version(),
        },
        "environment": env,
        "targets": [target_report(t, host, env, power_cache) for t in targets],
    }


def environment(host: HostFacts) -> dict[str, Any]:
    """Versions of what runs models here: onnxruntime (+ providers), TensorRT and the GPU."""
    env: dict[str, Any] = {
        "onnxruntime": None,
        "providers": [],
        "tensorrt": None,
        "gpu": None,
        "cuda_python": None,
        "tools": {t: shutil.which(t) for t in DEPLOY_TOOLS},
        "nvpmodel": shutil.which("nvpmodel"),
    }
    try:
        import onnxruntime as ort

        env["onnxruntime"] = ort.__version__
        env["providers"] = list(ort.get_available_providers())
    except ImportError as exc:
        env["onnxruntime_error"] = str(exc)
    env["cuda_python"] = _dist_version("cuda-python")
    env["openvino"] = None
    if backend("openvino").requires.available():
        try:
            env["openvino"] = openvino_version()
            env["openvino_devices"] = {d: device_capabilities(d) for d in available_devices()}
        except Exception as exc:  # noqa: BLE001 - a broken install is what doctor reports
            env["openvino_error"] = f"{type(exc).__name__}: {exc}"
    env["onnxruntime_qnn"] = None
    if backend("qnn").requires.available():
        try:
            env.update({k: v for k, v in qnn_backend.versions().items() if k != "onnxruntime"})
            import onnxruntime as ort

            qnn_backend.register(ort)  # the HTP backend library loads and offers a device here
        except (EdgekitError, ImportError, OSError) as exc:  # a broken install is what doctor reports
            env["qnn_error"] = f"{type(exc).__name__}: {exc}"
    if backend("trt").requires.available():
        try:
            meta = host_metadata()
            env["tensorrt"] = meta.tensorrt_version
            env["gpu"] = {"name": meta.gpu_name, "compute_capability": meta.compute_capability}
        except Exception as exc:  # noqa: BLE001 - a broken install or no GPU is what doctor reports
            env["tensorrt_error"] = f"{type(exc).__name__}: {exc}"
            env["tensorrt"] = _dist_version("tensorrt") or _dist_version("tensorrt-cu12")
    return env


def target_report(
    target: Target, host: HostFacts, env: dict[str, Any], power_cache: dict[str, dict[str, Any]] | None = None
) -> dict[str, Any]:
    """One target: ``runtimes`` (what each needs, has, lacks), ``device``, ``power``,
    ``missing`` (each with its install line or why), ``runs_with`` and ``ready``."""
    missing: list[dict[str, Any]] = []
    runtimes = [
        RUNTIME_REPORTS.get(name, _registry_report)(name, target, host, env, missing) for name in target.runtimes
    ]
    device = _device_report(target, host, env)
    if not device["matches"]:
        missing.append(
            {
                "what": f"the {target.name} device",
                "why": "; ".join(device["reasons"]),
                "install": f"deploy to it: edgekit deploy BUNDLE --host USER@DEVICE --target {target.name}",
            }
        )
    power = _power_report(target.power_probe, power_cache if power_cache is not None else {})
    if not power["available"]:
        missing.append(
            {
                "what": f"power probe {target.power_probe}",
                "why": power["reason"],
                "install": POWER_INSTALL.get(target.power_probe),
            }
        )
    extras = {}
    if target.nvpmodel:
        extras["nvpmodel"] = env.get("nvpmodel")
        if not env.get("nvpmodel"):
            missing.append(
                {
                    "what": "nvpmodel (Jetson power modes)",
                    "why": "not on PATH",
                    "install": "comes with JetPack's L4T tools (sudo apt install nvidia-l4t-tools)",
                }
            )
    runs_with = next((r["runtime"] for r in runtimes if r["available"]), None)
    return {
        "target": target.name,
        "description": target.description,
        "runtimes": runtimes,
        "runs_with": runs_with,
        "device": device,
        "power": power,
        **extras,
        "missing": missing,
        "ready": runs_with is not None and device["matches"],
    }


def _ort_report(
    name: str, target: Target, host: HostFacts, env: dict[str, Any], missing: list[dict[str, Any]]
) -> dict[str, Any]:
    have = env.get("providers") or []
    wanted = list(target.ort.providers)
    lacking = [p for p in wanted if p not in have]
    if env.get("onnxruntime") is None:
        missing.append(
            {
                "what": "onnxruntime",
                "why": env.get("onnxruntime_error", "not installed"),
                "install": backend("ort").requires.install,
            }
        )
    for provider in lacking:
        missing.append(
            {
                "what": f"ONNX Runtime {provider}",
                "why": "not in this onnxruntime build",
                "install": PROVIDER_INSTALL.get(provider, f"an onnxruntime build with {provider}"),
            }
        )
    usable = [p for p in wanted if p in have]
    return {
        "runtime": "ort",
        "available": bool(usable),
        "version": env.get("onnxruntime"),
        "providers": usable,
        "providers_missing": lacking,
    }


def _openvino_report(
    name: str, target: Target, host: HostFacts, env: dict[str, Any], missing: list[dict[str, Any]]
) -> dict[str, Any]:
    device = target.openvino.device
    devices = env.get("openvino_devices") or {}
    problems = []
    if env.get("openvino") is None:
        why = env.get("openvino_error", "the openvino Python package is not importable")
        problems.append(why)
        missing.append({"what": "OpenVINO", "why": why, "install": OPENVINO_INSTALL})
    elif device.split(".")[0] not in {d.split(".")[0] for d in devices}:
        why = f"OpenVINO {env['openvino']} sees {', '.join(devices) or 'no device'}, not {device}"
        problems.append(why)
        missing.append(
            {
                "what": f"an Intel {device} with its driver",
                "why": why,
                "install": OPENVINO_DEVICE_INSTALL.get(device.split(".")[0]),
            }
        )
    capabilities = devices.get(device, [])
    return {
        "runtime": "openvino",
        "available": not problems,
        "version": env.get("openvino"),
        "device": device,
        "capabilities": capabilities,
        "problems": problems,
    }


def _trt_report(
    name: str, target: Target, host: HostFacts, env: dict[str, Any], missing: list[dict[str, Any]]
) -> dict[str, Any]:
    reasons: list[str] = []
    version = env.get("tensorrt")
    if version is None:
        reasons.append("tensorrt is not installed")
        missing.append(
            {
                "what": "TensorRT",
                "why": "the tensorrt Python package is not importable",
                "install": _trt_install(target),
            }
        )
    elif env.get("tensorrt_error"):
        reasons.append(env["tensorrt_error"])
        cuda_line = CUDA_PYTHON_FOR_CUDA.get(target.trt.cuda) if target.trt.jetson else None
        missing.append(
            {
                "what": "a working TensorRT + CUDA",
                "why": env["tensorrt_error"],
                "install": f"check the driver with nvidia-smi; {cuda_line or TRT_INSTALL + ' brings cuda-python'}",
            }
        )
    limits: list[str] = []
    if version is not None:
        reasons += _trt_version_problems(target, str(version), missing)
        limits = trt_limits(str(version), target)
    gpu = env.get("gpu")
    wanted = target.trt.compute_capability
    if gpu and wanted and gpu["compute_capability"] not in wanted:
        reasons.append(
            f"GPU {gpu['name']} has compute capability {gpu['compute_capability']}, target needs {' or '.join(wanted)}"
        )
    return {
        "runtime": "trt",
        "available": not reasons and not device_problems(target, host),
        "version": version,
        "gpu": gpu,
        "problems": reasons,
        "limits": limits,
    }


def _qnn_report(
    name: str, target: Target, host: HostFacts, env: dict[str, Any], missing: list[dict[str, Any]]
) -> dict[str, Any]:
    """onnxruntime-qnn and the HTP backend it ships: on a Snapdragon the NPU itself, on x86 its
    emulation (accuracy is the NPU's, latency is not)."""
    entry = backend(name)
    problems = []
    if env.get("onnxruntime_qnn") is None:
        problems.append("onnxruntime-qnn is not installed")
        missing.append(
            {
                "what": "onnxruntime-qnn (the QNN HTP backend)",
                "why": f"the {entry.requires.module} Python package is not importable",
                "install": entry.requires.install,
            }
        )
    elif env.get("qnn_error"):
        problems.append(env["qnn_error"])
        missing.append(
            {
                "what": "a working onnxruntime-qnn",
                "why": env["qnn_error"],
                "install": f"{entry.requires.install} (reinstall: pip install -U)",
            }
        )
    emulated = host.arch != "aarch64"
    notes = (
        [f"HTP v{target.qnn.htp_arch} emulated on this {host.arch} host: accuracy is the NPU's, latency is not"]
        if emulated
        else []
    )
    return {
        "runtime": name,
        "available": not problems,
        "version": env.get("onnxruntime_qnn"),
        "qnn_sdk": env.get("qnn_sdk"),
        "htp_arch": target.qnn.htp_arch,
        "soc_model": target.qnn.soc_model,
        "emulated": emulated,
        "problems": problems,
        "notes": notes,
    }


def _aihub_report(
    name: str, target: Target, host: HostFacts, env: dict[str, Any], missing: list[dict[str, Any]]
) -> dict[str, Any]:
    """Qualcomm AI Hub: the qai-hub client installed, configured (its config file or the token in
    the environment; read here, nothing sent) and the target's devices it would use."""
    entry = backend(name)
    conf = aihub_client.configuration()
    problems = []
    if not entry.requires.available():
        problems.append("qai-hub is not installed")
        missing.append(
            {
                "what": "the Qualcomm AI Hub client (qai-hub)",
                "why": f"the {entry.requires.module} Python package is not importable",
                "install": entry.requires.install,
            }
        )
    if not conf.configured:
        problems.append(f"no AI Hub client configured: {conf.problem}")
        missing.append({"what": "an AI Hub API token", "why": conf.problem, "install": aihub_client.SETUP})
    devices = list(target.aihub.devices)
    notes = [f"client configured from {conf.source}"] if conf.configured else []
    notes.append(
        f"devices: {', '.join(devices)}" + (f" (chipset {target.aihub.chipset})" if target.aihub.chipset else "")
    )
    return {
        "runtime": name,
        "available": not problems,
        "version": _dist_version("qai-hub"),
        "configured": conf.configured,
        "configuration": conf.to_json(),
        "devices": devices,
        "chipset": target.aihub.chipset or None,
        "problems": problems,
        "notes": notes,
    }


def _registry_report(
    name: str, target: Target, host: HostFacts, env: dict[str, Any], missing: list[dict[str, Any]]
) -> dict[str, Any]:
    """A runtime with no checks of its own here: whether its package imports (registry entry)."""
    entry = backend(name)
    problems = [] if entry.requires.available() else [f"{entry.requires.module} is not installed"]
    if problems:
        missing.append(
            {
                "what": entry.title,
                "why": f"the {entry.requires.module} Python package is not importable",
                "install": entry.requires.install,
            }
        )
    return {
        "runtime": name,
        "available": not problems,
        "version": _dist_version(entry.requires.module),
        "problems": problems,
    }


# Per runtime name (runtimes.registry): what doctor checks for a target that lists it. Any other
# registered runtime gets `_registry_report` (is its package there); torch is never a target's.
Report = Callable[[str, Target, HostFacts, dict[str, Any], list[dict[str, Any]]], dict[str, Any]]
RUNTIME_REPORTS: dict[str, Report] = {
    "ort": _ort_report,
    "openvino": _openvino_report,
    "trt": _trt_report,
    "qnn": _qnn_report,
    "aihub": _aihub_report,
}
NOT_REPORTED: dict[str, str] = {"torch": "no target lists torch: it runs the PyTorch module in edgekit's own process"}


def _trt_install(target: Target) -> str:
    if not target.trt.jetson:
        return TRT_INSTALL
    if target.trt.python and target.trt.python != "{}.{}".format(*platform.python_version_tuple()[:2]):
        return TRT_INSTALL_JETPACK5 if target.trt.python == "3.8" else TRT_INSTALL_JETSON
    return TRT_INSTALL_JETSON


def _version_tuple(version: str) -> tuple[int, ...]:
    return tuple(int(p) for p in version.split(".")[:2] if p.isdigit())


def _trt_version_problems(target: Target, version: str, missing: list[dict[str, Any]]) -> list[str]:
    """Why this TensorRT cannot serve ``target`` (too old for edgekit, or another JetPack's)."""
    have = _version_tuple(version)
    if have < TRT_MIN:
        why = f"TensorRT {version} lacks the name-based IO API (execute_async_v3) edgekit runs engines with"
        missing.append(
            {
                "what": "TensorRT >= 8.5",
                "why": why,
                "install": "upgrade to JetPack 5.1 or newer" if target.trt.jetson else TRT_INSTALL,
            }
        )
        return [why]
    wanted = target.trt.tensorrt
    if wanted and have[:2] != _version_tuple(wanted)[:2]:
        why = f"target {target.name} is for TensorRT {wanted} (JetPack {target.trt.jetpack}), this host has {version}"
        others = [
            t.name
            for t in list_targets()
            if t.trt.jetson
            and t.trt.board == target.trt.board
            and t.trt.compute_capability == target.trt.compute_capability
            and _version_tuple(t.trt.tensorrt or "0")[:2] == have[:2]
        ]
        missing.append(
            {
                "what": f"TensorRT {wanted}",
                "why": why,
                "install": f"use --target {' or '.join(others)}" if others else f"install JetPack {target.trt.jetpack}",
            }
        )
        return [why]
    return []


def trt_limits(version: str, target: Target | None = None) -> list[str]:
    """What TensorRT ``version`` cannot do that edgekit works around or a user must know (empty
    for TensorRT >= 10)."""
    have = _version_tuple(version)
    if have >= (10,) or have < TRT_MIN:
        return []
    limits = [
        f"TensorRT {version} runs INT64 graph inputs/outputs as INT32: edgekit casts int64 feeds at the boundary "
        "(values must fit in int32)",
        f"TensorRT {version} parses ONNX opsets up to 17: export with --opset 17 (edgekit export defaults to 18)",
        f"TensorRT {version} has no strongly typed networks: INT8 engines build weakly typed from the trt-profile "
        "Q/DQ model with BuilderFlag.INT8",
    ]
    if have < (8, 6):
        limits.append(f"TensorRT {version} has no builder_optimization_level: the target's setting is ignored")
    if target is not None and target.lint.opset_max > 17:
        limits.append(
            f"target {target.name}'s lint allows opset {target.lint.opset_max} (TensorRT 10): on this host "
            "lint with a target whose opset_max is 17, or pip install 'edgekit[trt]' for TensorRT 10"
        )
    return limits


def _device_report(target: Target, host: HostFacts, env: dict[str, Any] | None = None) -> dict[str, Any]:
    reasons = []
    if target.arch not in ("host", host.arch):
        reasons.append(f"this host is {host.arch}, target {target.name} is {target.arch}")
    if target.uses_trt:
        reasons += device_problems(target, host)
    ov_device = target.openvino.device.split(".")[0]
    if target.uses_openvino and ov_device != "CPU" and env is not None and env.get("openvino") is not None:
        if ov_device not in {d.split(".")[0] for d in env.get("openvino_devices") or {}}:
            reasons.append(f"no Intel {ov_device} is visible to OpenVINO here")
    return {"arch": host.arch if target.arch == "host" else target.arch, "matches": not reasons, "reasons": reasons}


def _power_report(probe: str, cache: dict[str, dict[str, Any]]) -> dict[str, Any]:
    if probe not in cache:
        found = detect(probe)
        if isinstance(found, Unavailable):
            cache[probe] = {"probe": probe, "available": False, "reason": found.reason}
        else:
            cache[probe] = {"probe": found.probe, "available": True, "reason": None}
    return cache[probe]


def _dist_version(dist: str) -> str | None:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return None


__all__ = ["DOCTOR_SCHEMA", "PROVIDER_INSTALL", "doctor", "environment", "target_report", "trt_limits"]
