"""OpenVINO's compiled models as engines: building the exported blob for a device, what a blob
is tied to (OpenVINO release, device, CPU ISA) and why one cannot be imported here, which ops a
model converts to and a device runs; and OpenVINO's entry in the runtime registry (here, beside
its engines, so ``openvino.py`` stays the runtime alone). ``openvino`` is imported only when a
function runs."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from edgekit._deps import require
from edgekit.errors import EdgekitError
from edgekit.manifest_sections import EngineRecord
from edgekit.runtimes.bucketed import open_artifact
from edgekit.runtimes.engines import cross_arch_notes
from edgekit.runtimes.openvino import (
    OpenVinoRuntime,
    OvOptions,
    _first_reason,
    available_devices,
    inference_precision_for,
    openvino_version,
    options_for,
)
from edgekit.runtimes.registry import (
    Backend,
    DebugHooks,
    EngineHooks,
    FileOptions,
    Requirement,
    register_backend,
)


def device_name(device: str = "CPU") -> str:
    """FULL_DEVICE_NAME of an available device (e.g. ``Intel(R) Xeon(R) Processor``)."""
    ov = require("openvino")
    return str(ov.Core().get_property(device, "FULL_DEVICE_NAME"))


def build_blob(model_path: str | Path, out_path: str | Path | None, options: OvOptions) -> dict[str, Any]:
    """Compile ``model_path`` (ONNX or IR) for ``options.device`` and write OpenVINO's exported
    blob to ``out_path`` (None: write nothing, an IR engine is compiled where it runs); the facts
    the compiled model is tied to (OpenVINO version, device and its name, the effective settings
    with the plugin's RUNTIME_REQUIREMENTS, e.g. ``ov=2026.4.1;isa=...``).

    Raises TargetUnavailable when the device is not on this host: a blob is compiled *for* the
    device, so it is built where the device is."""
    with OpenVinoRuntime(model_path, options) as rt:
        if out_path is not None:
            rt.export_blob(out_path)
        settings = dict(rt.settings)
        device = rt.device
    return {
        "openvino_version": openvino_version(),
        "device": options.device,
        "device_name": device_name(options.device),
        "executed_by": device,
        "settings": settings,
    }


class ConversionError(EdgekitError):
    """OpenVINO's frontend cannot convert a model file (an op it lacks, a malformed graph)."""


# OpenVINO graph plumbing that is no op a device runs.
_PLUMBING = ("Parameter", "Result", "Constant")


def _read(core: Any, model_path: str | Path) -> Any:
    try:
        return core.read_model(str(model_path))
    except RuntimeError as exc:
        raise ConversionError(
            f"OpenVINO {openvino_version()} cannot convert the graph {Path(model_path).name}: {_first_reason(exc)}",
            hint="run `edgekit lint BUNDLE --target intel-cpu` for every finding",
        ) from None


def convertible_ops(model_path: str | Path) -> int:
    """How many OpenVINO ops ``model_path`` converts to (its ONNX frontend, no device needed);
    ``ConversionError`` naming what it cannot convert."""
    ov = require("openvino")
    return len(_read(ov.Core(), model_path).get_ordered_ops())


def op_support(model_path: str | Path, device: str) -> tuple[dict[str, str], set[str] | None]:
    """({op name: op type} of the converted model, the names ``device``'s plugin runs, or None
    when the device is not on this host: only the device can tell). ``ConversionError`` when
    the frontend cannot convert the file."""
    ov = require("openvino")
    core = ov.Core()
    model = _read(core, model_path)
    ops = {
        op.get_friendly_name(): op.get_type_name()
        for op in model.get_ordered_ops()
        if op.get_type_name() not in _PLUMBING
    }
    if device.split(".")[0] not in {d.split(".")[0] for d in core.available_devices}:
        return ops, None
    return ops, set(core.query_model(model, device))


def blob_problems(entry: EngineRecord, cpu_isa: list[str] | tuple[str, ...] | None) -> list[str]:
    """Every reason the blob of a bundle's engine ``entry`` cannot be imported here (empty: it
    can): another OpenVINO release, the device missing or another one, or (CPU) another
    instruction set than the CPU that compiled it (the plugin picks kernels and precisions by ISA)."""
    problems = []
    built = str(entry.runtime_version)
    here = openvino_version()
    if built != here:
        problems.append(
            f"OpenVINO version: built with {built}, this host has {here} (a blob imports only into its own release)"
        )
    device = str(entry.config.get("device") or "CPU")
    if device.split(".")[0] not in {d.split(".")[0] for d in available_devices()}:
        return problems + [f"device: built for {device} ({entry.device_name}), which this host does not have"]
    name = device_name(device)
    if entry.device_name and entry.device_name != name:
        problems.append(f"device: built for {entry.device_name}, this host's {device} is {name}")
    if device == "CPU" and cpu_isa is not None and entry.cpu_isa is not None and list(entry.cpu_isa) != list(cpu_isa):
        gone = [f for f in entry.cpu_isa if f not in cpu_isa]
        new = [f for f in cpu_isa if f not in entry.cpu_isa]
        problems.append(
            "CPU instruction set: "
            + "; ".join(
                x for x in (f"lacks {', '.join(gone)}" if gone else "", f"adds {', '.join(new)}" if new else "") if x
            )
            + " compared with the CPU that built it"
        )
    return problems


def ir_problems(entry: EngineRecord) -> list[str]:
    """Every reason the IR of a bundle's engine ``entry`` cannot be compiled here (empty: it can):
    an OpenVINO release older than the one that wrote it (an IR reads into its own release and
    later ones), the device missing. No CPU check: the plugin compiles it for the CPU it runs on."""
    problems = []
    built, here = str(entry.runtime_version), openvino_version()
    if _release(here) < _release(built):
        problems.append(
            f"OpenVINO version: the IR was written by {built}, this host has the older {here} "
            "(an IR reads into its own release and later ones)"
        )
    device = str(entry.config.get("device") or "CPU")
    if device.split(".")[0] not in {d.split(".")[0] for d in available_devices()}:
        problems.append(f"device: built for {device} ({entry.device_name}), which this host does not have")
    return problems


def _release(version: str) -> tuple[int, ...]:
    """``2026.4.1`` -> (2026, 4, 1); a part that is no number counts as 0."""
    return tuple(int(p) if p.isdigit() else 0 for p in version.split("-")[0].split("."))


# ---- the registry entry -----------------------------------------------------------------------
# fp32 and bf16/fp16: the fp32 ONNX at that inference precision (where the device computes it);
# int8: the QDQ ONNX, its float parts in f32.
ARTIFACTS = {"fp32": "fp32", "int8": "int8", "bf16": "fp32", "fp16": "fp32"}


def _open_file(path: Path, o: FileOptions) -> OpenVinoRuntime:
    return OpenVinoRuntime(path, OvOptions(threads=o.threads, inference_precision=inference_precision_for(o.precision)))


def _check_host(target: Any, host: Any, precision: str) -> tuple[str | None, list[str]]:
    if not OPENVINO.requires.available():
        return (
            f"target {target.name}: OpenVINO skipped on this host "
            f"(openvino is not installed: {OPENVINO.requires.install})",
            [],
        )
    return None, cross_arch_notes(target, host)


def _engine_problems(path: Path, entry: EngineRecord, host: Any, target: Any, facts: Any) -> list[str]:
    if not OPENVINO.requires.available():
        return [f"openvino is not installed ({OPENVINO.requires.install})"]
    return ir_problems(entry) if entry.format == "ir" else blob_problems(entry, host.isa)


def _open_engine(choice: Any, threads: int) -> OpenVinoRuntime:
    # A blob imports with the settings it was built with: the same target table.
    options = options_for(choice.target.openvino, choice.precision, threads)
    return OpenVinoRuntime(choice.path, options, source_onnx=choice.source)


OPENVINO = register_backend(
    Backend(
        name="openvino",
        title="OpenVINO",
        help="OpenVINO on an Intel CPU; a target picks its GPU or NPU",
        precisions=("fp32", "int8", "bf16", "fp16"),
        artifacts=ARTIFACTS,
        open=lambda bundle, precision, threads: open_artifact(
            bundle, ARTIFACTS[precision], lambda path, shared: _open_file(path, FileOptions(precision, threads))
        ),
        open_file=_open_file,
        graph_precisions=("fp32", "bf16"),
        requires=Requirement("openvino", "pip install 'edgekit[openvino]'", extra="openvino"),
        reference_rank=1,
        engine=EngineHooks(check_host=_check_host, problems=_engine_problems, open=_open_engine),
        debug=DebugHooks(capture="graph outputs added to a copy of the ONNX, compiled by OpenVINO"),
    )
)

__all__ = [
    "ConversionError",
    "OPENVINO",
    "blob_problems",
    "build_blob",
    "convertible_ops",
    "device_name",
    "ir_problems",
    "op_support",
]
