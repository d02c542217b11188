"""Lazy imports of heavy optional dependencies with an exact install line when missing."""

from __future__ import annotations

import importlib
from types import ModuleType

from edgekit.errors import MissingDependency

# import name -> (pip extra that brings it, human name)
_EXTRAS: dict[str, str] = {
    "torch": "export",
    "onnxscript": "export",
    "safetensors": "export",
    "tensorrt": "trt",
    "pynvml": "nvml",
    "matplotlib": "report",
    "openvino": "openvino",
    "onnxruntime_qnn": "qnn",
    "qai_hub": "aihub",
}


# pip's default index serves torch as a multi-GB CUDA build; the repository's constraints file
# pins the CPU one (the install lines of README.md and docs/install.md use it).
TORCH_NOTE = " (on a CPU-only machine add -c constraints.txt from edgekit's repository: it pins torch's CPU build)"


def require(module: str) -> ModuleType:
    """Import ``module`` or raise ``MissingDependency`` naming the extra that installs it."""
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        top = module.split(".")[0]
        extra = _EXTRAS.get(top)
        if top == "tensorrt":
            hint = "pip install 'edgekit[trt]' on x86 (on Jetson, TensorRT comes with JetPack: install JetPack)"
        elif extra:
            hint = f"pip install 'edgekit[{extra}]'" + (TORCH_NOTE if extra == "export" else "")
        else:
            hint = f"pip install {top}"
        raise MissingDependency(f"'{module}' is not installed ({exc.msg})", hint=hint) from exc
