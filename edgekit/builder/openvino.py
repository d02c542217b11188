"""OpenVINO engines: the model form ``builder.openvino_routes`` measured fastest on this host
within the budget, for a target's Intel device. The ``onnx`` route ships the compiled model
(``export_model`` blob), keyed to the OpenVINO release, the device and, on a CPU, its int8/bf16
ISA features; an IR route ships the ``.xml`` + ``.bin`` OpenVINO wrote, compiled where it runs
(read by this OpenVINO release and later ones, on any CPU)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from edgekit.builder.openvino_routes import DEFAULT_ROUTE, select_route
from edgekit.bundle import Bundle
from edgekit.errors import TargetUnavailable
from edgekit.host import HostFacts
from edgekit.runtimes import (
    openvino as ov_backend,  # imports openvino only when a function runs
)
from edgekit.runtimes import openvino_engine as ov_engine
from edgekit.targets import Target


def build_openvino(
    model_path: Path, target: Target, precision: str, host: HostFacts, workdir: Path, bundle: Bundle | None = None
) -> tuple[dict[str, Path], dict[str, Any]]:
    """Compile ``model_path`` for the target's device and ship the route ``select_route`` chose
    (``bundle``: where its decode and FP32 model come from; None: the blob, nothing compared).
    Without the device the ONNX is still read by OpenVINO (its frontend converts every op, or
    says which it cannot) before the build is refused: compiling needs the device."""
    options = ov_backend.options_for(target.openvino, precision)
    devices = ov_backend.available_devices()
    if options.device.split(".")[0] not in {d.split(".")[0] for d in devices}:
        ops = ov_engine.convertible_ops(model_path)
        raise TargetUnavailable(
            f"cannot build target {target.name}'s compiled model on this host: OpenVINO "
            f"{ov_backend.openvino_version()} "
            f"sees {', '.join(devices)}, not {options.device}. The graph itself converts ({ops} OpenVINO ops from "
            f"{model_path.name}); compiling it needs the {options.device} and its driver",
            hint=f"build it on the device: `edgekit deploy BUNDLE --host USER@DEVICE --target {target.name}`, "
            f"or run `edgekit build BUNDLE --target {target.name}` there",
        )
    # A step-bucketed model ships the blob for every bucket: routes chosen per bucket graph could
    # mix a blob (tied to this CPU) with IRs (not) in one engine.
    bucketed = bundle is not None and precision == "int8" and bundle.step_buckets("int8") is not None
    route, record = (
        select_route(model_path, bundle, options, precision, workdir / "routes")
        if bundle is not None and not bucketed
        else (None, None)
    )
    if route is None or route.name == DEFAULT_ROUTE:
        files = {"model": workdir / f"{precision}.blob"}
        built = ov_engine.build_blob(model_path, files["model"], options)
    else:
        files = dict(route.files)
        built = ov_engine.build_blob(route.model, None, options)  # compiled once for the facts, not written
    blob = "model" in files and files["model"].suffix == ".blob"
    facts = {
        "runtime": "openvino",
        "runtime_version": built["openvino_version"],
        "format": "blob" if blob else "ir",
        "device": f"{options.device}: {built['device_name']}",
        "device_name": built["device_name"],
        # A blob holds kernels picked for this CPU's instruction set; an IR is compiled where it runs.
        "cpu_isa": list(host.isa) if options.device == "CPU" and blob else None,
        "portable": not blob,
        "compute_capability": None,
        "l4t": None,
        "runtime_requirements": built["settings"].get("runtime_requirements"),
        "config": {
            "device": options.device,
            "performance_hint": options.performance_hint,
            "inference_precision": options.inference_precision,
            "streams": options.streams,
            "threads": options.threads,
            "compiled": built["settings"],
        },
        "route": record,
    }
    return files, facts
