"""`edgekit doctor`: what this host can run for a target, and what is missing (with the line
that installs it).

For each target: every runtime it lists, in order, through the runtime registry (what each needs
and its install line), with versions (ONNX Runtime and the execution providers this build has;
TensorRT, the GPU and its compute capability; onnxruntime-qnn, its QNN SDK and whether the
Hexagon NPU is emulated here), whether this host is the target's
device (architecture, Jetson/L4T, board, GPU), the power probe (``edgekit.probes.power.detect``)
and, on Jetson targets, ``nvpmodel``; OpenVINO's version, devices and their capabilities, and
this CPU's int8/bf16 ISA features. Reads versions from installed packages; imports TensorRT and
OpenVINO only when they are installed. What each runtime is checked for is in ``reports``
(TensorRT's version rules in ``tensorrt``).
"""

from __future__ import annotations

import platform
import shutil
from pathlib import Path
from typing import Any

from edgekit.doctor.checkup import Checkup
from edgekit.doctor.reports import NOT_REPORTED, PROVIDER_INSTALL, RUNTIME_REPORTS, dist_version, runtime_report
from edgekit.doctor.tensorrt import trt_limits
from edgekit.errors import EdgekitError
from edgekit.host import HostFacts
from edgekit.probes.power import Unavailable, detect
from edgekit.runtimes import qnn as qnn_backend  # imports onnxruntime-qnn only when a function runs
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
    env["cuda_python"] = dist_version("cuda-python")
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
            env["tensorrt"] = dist_version("tensorrt") or dist_version("tensorrt-cu12")
    return env


def target_report(
    target: Target, host: HostFacts, env: dict[str, Any], power_cache: dict[str, dict[str, Any]] | None = None
) -> dict[str, Any]:
    """One target: ``runtimes`` (what each needs, has, lacks), ``device``, ``power``,
    ``missing`` (each with its install line or why), ``runs_with`` and ``ready``."""
    c = Checkup(target, host, env)
    runtimes = [runtime_report(name, c) for name in target.runtimes]
    device = _device_report(target, host, env)
    if not device["matches"]:
        c.lacks(
            f"the {target.name} device",
            "; ".join(device["reasons"]),
            f"deploy to it: edgekit deploy BUNDLE --host USER@DEVICE --target {target.name}",
        )
    power = _power_report(target.power_probe, power_cache if power_cache is not None else {})
    if not power["available"]:
        c.lacks(f"power probe {target.power_probe}", power["reason"], POWER_INSTALL.get(target.power_probe))
    extras = {}
    if target.nvpmodel:
        extras["nvpmodel"] = env.get("nvpmodel")
        if not env.get("nvpmodel"):
            c.lacks(
                "nvpmodel (Jetson power modes)",
                "not on PATH",
                "comes with JetPack's L4T tools (sudo apt install nvidia-l4t-tools)",
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
        "missing": c.missing,
        "ready": runs_with is not None and device["matches"],
    }


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


# PROVIDER_INSTALL, RUNTIME_REPORTS, NOT_REPORTED and trt_limits live in ``reports`` and ``tensorrt``;
# named here too, where they were first.
__all__ = [
    "DOCTOR_SCHEMA",
    "NOT_REPORTED",
    "PROVIDER_INSTALL",
    "RUNTIME_REPORTS",
    "doctor",
    "environment",
    "target_report",
    "trt_limits",
]
