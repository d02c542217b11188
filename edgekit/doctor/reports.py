"""What doctor checks for each runtime a target lists (``RUNTIME_REPORTS``, by runtime name):
what it needs, has and lacks, each missing piece with the line that installs it."""

from __future__ import annotations

from collections.abc import Callable
from importlib import metadata
from typing import Any

from edgekit.doctor.tensorrt import trt_report
from edgekit.host import HostFacts
from edgekit.runtimes.aihub import client as aihub_client  # imports qai-hub only when a function runs
from edgekit.runtimes.registry import backend
from edgekit.targets import Target

# How to get an execution provider that this onnxruntime build lacks.
PROVIDER_INSTALL: dict[str, str] = {
    "CUDAExecutionProvider": (
        "pip uninstall -y onnxruntime && pip install onnxruntime-gpu"
        " (on Jetson: the onnxruntime-gpu wheel for your JetPack)"
    ),
    "TensorrtExecutionProvider": "pip uninstall -y onnxruntime && pip install onnxruntime-gpu",
    "QNNExecutionProvider": (
        "an onnxruntime built with --use_qnn (Android), or pip install onnxruntime-qnn (Windows on Snapdragon)"
    ),
    "NnapiExecutionProvider": (
        "an onnxruntime built for Android with --use_nnapi (./build.sh --android --use_nnapi --build_wheel)"
    ),
    "XnnpackExecutionProvider": "an onnxruntime built with --use_xnnpack (./build.sh --use_xnnpack --build_wheel)",
    "CoreMLExecutionProvider": "onnxruntime on macOS/iOS (pip install onnxruntime on a Mac)",
}
OPENVINO_INSTALL = backend("openvino").requires.install
# What an OpenVINO device needs besides the openvino package (its plugin ships in the wheel).
OPENVINO_DEVICE_INSTALL: dict[str, str] = {
    "GPU": (
        "the Intel GPU compute driver: sudo apt install intel-opencl-icd (or Intel's compute-runtime release),"
        " on a machine with an Intel Arc/integrated GPU"
    ),
    "NPU": "the Intel NPU driver (github.com/intel/linux-npu-driver releases), on a Core Ultra machine",
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
        "version": dist_version("qai-hub"),
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
        "version": dist_version(entry.requires.module),
        "problems": problems,
    }


# Per runtime name (runtimes.registry): what doctor checks for a target that lists it. Any other
# registered runtime gets `_registry_report` (is its package there); torch is never a target's.
Report = Callable[[str, Target, HostFacts, dict[str, Any], list[dict[str, Any]]], dict[str, Any]]
RUNTIME_REPORTS: dict[str, Report] = {
    "ort": _ort_report,
    "openvino": _openvino_report,
    "trt": trt_report,
    "qnn": _qnn_report,
    "aihub": _aihub_report,
}
NOT_REPORTED: dict[str, str] = {"torch": "no target lists torch: it runs the PyTorch module in edgekit's own process"}


def runtime_report(
    name: str, target: Target, host: HostFacts, env: dict[str, Any], missing: list[dict[str, Any]]
) -> dict[str, Any]:
    """Runtime ``name`` of ``target`` on this host (its ``RUNTIME_REPORTS`` entry, else whether its
    package imports); appends what it lacks to ``missing``."""
    return RUNTIME_REPORTS.get(name, _registry_report)(name, target, host, env, missing)


def dist_version(dist: str) -> str | None:
    """The installed version of distribution ``dist``, None when it is not installed."""
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return None
