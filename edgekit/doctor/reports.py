"""What doctor checks for each runtime a target lists (``RUNTIME_REPORTS``, by runtime name):
what it needs, has and lacks, each missing piece with the line that installs it (``Checkup.lacks``)."""

from __future__ import annotations

from collections.abc import Callable
from importlib import metadata
from typing import Any

from edgekit.doctor.checkup import Checkup
from edgekit.doctor.tensorrt import trt_report
from edgekit.runtimes.aihub import client as aihub_client  # imports qai-hub only when a function runs
from edgekit.runtimes.registry import backend

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


def _ort_report(name: str, c: Checkup) -> dict[str, Any]:
    have = c.env.get("providers") or []
    wanted = list(c.target.ort.providers)
    lacking = [p for p in wanted if p not in have]
    if c.env.get("onnxruntime") is None:
        c.lacks("onnxruntime", c.env.get("onnxruntime_error", "not installed"), backend("ort").requires.install)
    for provider in lacking:
        c.lacks(
            f"ONNX Runtime {provider}",
            "not in this onnxruntime build",
            PROVIDER_INSTALL.get(provider, f"an onnxruntime build with {provider}"),
        )
    usable = [p for p in wanted if p in have]
    return {
        "runtime": "ort",
        "available": bool(usable),
        "version": c.env.get("onnxruntime"),
        "providers": usable,
        "providers_missing": lacking,
    }


def _openvino_report(name: str, c: Checkup) -> dict[str, Any]:
    device = c.target.openvino.device
    devices = c.env.get("openvino_devices") or {}
    problems = []
    if c.env.get("openvino") is None:
        why = c.env.get("openvino_error", "the openvino Python package is not importable")
        problems.append(why)
        c.lacks("OpenVINO", why, OPENVINO_INSTALL)
    elif device.split(".")[0] not in {d.split(".")[0] for d in devices}:
        why = f"OpenVINO {c.env['openvino']} sees {', '.join(devices) or 'no device'}, not {device}"
        problems.append(why)
        c.lacks(f"an Intel {device} with its driver", why, OPENVINO_DEVICE_INSTALL.get(device.split(".")[0]))
    capabilities = devices.get(device, [])
    return {
        "runtime": "openvino",
        "available": not problems,
        "version": c.env.get("openvino"),
        "device": device,
        "capabilities": capabilities,
        "problems": problems,
    }


def _qnn_report(name: str, c: Checkup) -> dict[str, Any]:
    """onnxruntime-qnn and the HTP backend it ships: on a Snapdragon the NPU itself, on x86 its
    emulation (accuracy is the NPU's, latency is not)."""
    entry = backend(name)
    problems = []
    if c.env.get("onnxruntime_qnn") is None:
        problems.append("onnxruntime-qnn is not installed")
        c.lacks(
            "onnxruntime-qnn (the QNN HTP backend)",
            f"the {entry.requires.module} Python package is not importable",
            entry.requires.install,
        )
    elif c.env.get("qnn_error"):
        problems.append(c.env["qnn_error"])
        c.lacks(
            "a working onnxruntime-qnn", c.env["qnn_error"], f"{entry.requires.install} (reinstall: pip install -U)"
        )
    emulated = c.host.arch != "aarch64"
    notes = (
        [f"HTP v{c.target.qnn.htp_arch} emulated on this {c.host.arch} host: accuracy is the NPU's, latency is not"]
        if emulated
        else []
    )
    return {
        "runtime": name,
        "available": not problems,
        "version": c.env.get("onnxruntime_qnn"),
        "qnn_sdk": c.env.get("qnn_sdk"),
        "htp_arch": c.target.qnn.htp_arch,
        "soc_model": c.target.qnn.soc_model,
        "emulated": emulated,
        "problems": problems,
        "notes": notes,
    }


def _aihub_report(name: str, c: Checkup) -> dict[str, Any]:
    """Qualcomm AI Hub: the qai-hub client installed, configured (its config file or the token in
    the environment; read here, nothing sent) and the target's devices it would use."""
    entry = backend(name)
    conf = aihub_client.configuration()
    problems = []
    if not entry.requires.available():
        problems.append("qai-hub is not installed")
        c.lacks(
            "the Qualcomm AI Hub client (qai-hub)",
            f"the {entry.requires.module} Python package is not importable",
            entry.requires.install,
        )
    if not conf.configured:
        problems.append(f"no AI Hub client configured: {conf.problem}")
        c.lacks("an AI Hub API token", conf.problem, aihub_client.SETUP)
    devices = list(c.target.aihub.devices)
    notes = [f"client configured from {conf.source}"] if conf.configured else []
    notes.append(
        f"devices: {', '.join(devices)}" + (f" (chipset {c.target.aihub.chipset})" if c.target.aihub.chipset else "")
    )
    return {
        "runtime": name,
        "available": not problems,
        "version": dist_version("qai-hub"),
        "configured": conf.configured,
        "configuration": conf.to_json(),
        "devices": devices,
        "chipset": c.target.aihub.chipset or None,
        "problems": problems,
        "notes": notes,
    }


def _registry_report(name: str, c: Checkup) -> dict[str, Any]:
    """A runtime with no checks of its own here: whether its package imports (registry entry)."""
    entry = backend(name)
    problems = [] if entry.requires.available() else [f"{entry.requires.module} is not installed"]
    if problems:
        c.lacks(entry.title, f"the {entry.requires.module} Python package is not importable", entry.requires.install)
    return {
        "runtime": name,
        "available": not problems,
        "version": dist_version(entry.requires.module),
        "problems": problems,
    }


# Per runtime name (runtimes.registry): what doctor checks for a target that lists it. Any other
# registered runtime gets `_registry_report` (is its package there); torch is never a target's.
Report = Callable[[str, Checkup], dict[str, Any]]
RUNTIME_REPORTS: dict[str, Report] = {
    "ort": _ort_report,
    "openvino": _openvino_report,
    "trt": trt_report,
    "qnn": _qnn_report,
    "aihub": _aihub_report,
}
NOT_REPORTED: dict[str, str] = {"torch": "no target lists torch: it runs the PyTorch module in edgekit's own process"}


def runtime_report(name: str, c: Checkup) -> dict[str, Any]:
    """Runtime ``name`` of ``c.target`` on this host (its ``RUNTIME_REPORTS`` entry, else whether its
    package imports); adds what it lacks to ``c.missing``."""
    return RUNTIME_REPORTS.get(name, _registry_report)(name, c)


def dist_version(dist: str) -> str | None:
    """The installed version of distribution ``dist``, None when it is not installed."""
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return None
