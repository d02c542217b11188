"""What an AI Hub device runs for a bundle: the compile options edgekit asks for, the model file
as AI Hub's upload takes it, and per device the compiled model a profile or a check runs: the
bundle's AI Hub engine for that device's chipset when there is one (``edgekit build --runtime
aihub``), else the model a compile job makes for it (recorded in the job book like every job)."""

from __future__ import annotations

import functools
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from edgekit._deps import require
from edgekit._sidefiles import external_data_locations
from edgekit.bundle import Bundle, EngineRecord
from edgekit.errors import EdgekitError, UsageError
from edgekit.host import HostFacts
from edgekit.runtimes.aihub import client as hub_client
from edgekit.runtimes.aihub.jobs import JobBook
from edgekit.runtimes.engines import engine_problems
from edgekit.runtimes.onnx_file import load_onnx
from edgekit.runtimes.registry import backend

# The one file format every AI Hub device of a chipset loads (DLCs when buckets are linked into one).
CONTEXT_BINARY, DLC = "qnn_context_binary", "qnn_dlc"
# Inline weights up to this size; beyond it the upload carries one external .data file (ONNX's 2 GB protobuf limit).
INLINE_LIMIT = 1_800_000_000


def compile_options(bundle: Bundle, target_runtime: str, extra: str = "") -> str:
    """``--target_runtime`` plus what the bundle's graph needs: its int64 IO (tokens, positions)
    as int32, which the NPU has (the inference feeds follow: ``client.device_feeds``)."""
    options = [f"--target_runtime {target_runtime}"]
    if any(s.dtype == "int64" for s in (*bundle.inputs.values(), *bundle.outputs.values())):
        options.append("--truncate_64bit_io")
    return " ".join(options + ([extra.strip()] if extra.strip() else []))


def upload_form(model_path: Path, workdir: Path) -> str:
    """What AI Hub's upload takes: the ONNX file itself, or (a model reading external weights,
    e.g. step buckets over one shared file) a self-contained copy: inline, or beside one .data file."""
    if not external_data_locations(model_path):
        return str(model_path)
    onnx = require("onnx")
    model = load_onnx(
        model_path, "the model to upload", external_data=True
    )  # reads the external weights from beside the model
    folder = workdir / f"upload-{model_path.stem}"
    folder.mkdir(parents=True, exist_ok=True)
    big = model.ByteSize() > INLINE_LIMIT
    onnx.save(
        model,
        str(folder / "model.onnx"),
        save_as_external_data=big,
        all_tensors_to_one_file=True,
        location="model.data",
    )
    return str(folder if big else folder / "model.onnx")


def input_specs(bundle: Bundle) -> dict[str, tuple[tuple[int, ...], str]]:
    """The graph's static input shapes and dtypes as the compile job takes them (they fix any
    dynamic dim the exported ONNX kept)."""
    return {n: (tuple(int(d) for d in s.shape), s.dtype) for n, s in bundle.inputs.items()}


def job_name(bundle: Bundle, precision: str, part: str = "") -> str:
    return f"edgekit {bundle.name} {precision}" + (f" {part}" if part else "")


# ---- what a profile or a check runs per device ----------------------------------------------------
@dataclass(frozen=True)
class DeviceModel:
    """The compiled model one AI Hub device runs for a bundle's precision."""

    device: str  # the AI Hub device name
    chipset: str | None
    model: Any  # qai_hub.Model (None: its compile job failed, ``error`` says why)
    graphs: tuple[str, ...] = ()  # a linked binary's graph per step bucket; () = its one graph
    boundaries: tuple[float, ...] = ()  # the step positions between those buckets (runtimes.bucketed)
    source: str = ""  # "engine <key>" or "compile job <id>"
    error: str | None = None


def built_devices(bundle: Bundle) -> list[str]:
    """The AI Hub devices the bundle's aihub engines were compiled for, in manifest order."""
    built = [e.aihub.get("device") for e in bundle.engines.values() if e.runtime == "aihub"]
    return list(dict.fromkeys(str(d) for d in built if d))


def device_models(
    bundle: Bundle, precision: str, names: Sequence[str], client: Any, book: JobBook
) -> dict[str, DeviceModel]:
    """Per device name: the bundle's AI Hub engine of ``precision`` compiled for that device (or
    its chipset: a context binary runs on every device of one), else a compile job for it,
    submitted for every such device at once. A step-bucketed model needs its engine built
    (`edgekit build --runtime aihub`: the buckets are linked into one binary)."""
    engines = [e for e in bundle.engines.values() if e.runtime == "aihub" and e.precision == precision]
    artifact = backend("aihub").artifact(bundle, precision)
    out: dict[str, DeviceModel] = {}
    missing: list[tuple[str, str | None]] = []
    host = HostFacts.detect()
    for name in dict.fromkeys(names):
        chipset = hub_client.chipset_of(hub_client.find_device(client, name))
        match = _engine_for(engines, name, chipset)
        if match is None:
            missing.append((name, chipset))
            continue
        problems = engine_problems(bundle, match, host)
        if problems:
            raise EdgekitError(
                f"engine {match.key} of bundle {bundle.root} is stale: {'; '.join(problems)}",
                hint=f"rebuild it with `edgekit build {bundle.root} --target {match.target} --precision {precision} "
                "--runtime aihub --rebuild`",
            )
        a = match.aihub
        model = hub_client.call(f"fetching model {a['model_id']}", client.get_model, a["model_id"])
        out[name] = DeviceModel(
            name,
            chipset,
            model,
            tuple(a.get("graphs") or ()) if match.bucketed else (),
            match.bucket_boundaries,
            f"engine {match.key}",
        )
    if missing and bundle.step_buckets(artifact):
        raise UsageError(
            f"bundle {bundle.root}'s int8 model is step-bucketed: its graphs run on AI Hub as one linked context "
            f"binary, which `edgekit build` makes; none is built for {missing[0][0]}",
            hint=f"build it with `edgekit build {bundle.root} --target TARGET --runtime aihub` "
            "for a target whose [aihub] devices name it",
        )
    if missing:
        out.update(_compile_for(bundle, artifact, precision, missing, client, book))
    return out


def _engine_for(engines: list[EngineRecord], name: str, chipset: str | None) -> EngineRecord | None:
    for entry in engines:
        if entry.aihub.get("device") == name:
            return entry
    for entry in engines:
        if chipset and entry.aihub.get("chipset") == chipset:
            return entry
    return None


def _compile_for(
    bundle: Bundle, artifact: str, precision: str, devices: list[tuple[str, str | None]], client: Any, book: JobBook
) -> dict[str, DeviceModel]:
    """One compile job per device for the bundle's own model (its static shapes given as the
    job's input specs), all submitted before any is waited on."""
    hub = hub_client.qai_hub()
    options = compile_options(bundle, CONTEXT_BINARY)
    request = {
        "kind": "compile",
        "options": options,
        "model": bundle.artifact(artifact).sha256,
        "shapes": input_specs(bundle),
    }
    with tempfile.TemporaryDirectory(prefix="edgekit-aihub-") as tmp:  # the upload is done when submit returns

        def compile_for(device: str) -> Any:
            return client.submit_compile_job(
                model=upload_form(bundle.path_of(artifact), Path(tmp)),
                device=hub.Device(device),
                name=job_name(bundle, precision),
                input_specs=input_specs(bundle),
                options=options,
            )

        handles = {
            name: book.submit("compile", name, request | {"device": name}, functools.partial(compile_for, name))
            for name, _ in devices
        }
    book.wait(list(handles.values()))
    out = {}
    for (name, chipset), h in zip(devices, handles.values()):
        model = None if h.failed else hub_client.call(f"reading job {h.id}'s compiled model", h.job.get_target_model)
        out[name] = DeviceModel(
            name,
            chipset,
            model,
            source=f"compile job {h.id}",
            error=h.failed and f"compile job {h.id} failed: {h.failed}",
        )
    return out


__all__ = [
    "CONTEXT_BINARY",
    "DLC",
    "DeviceModel",
    "compile_options",
    "device_models",
    "input_specs",
    "job_name",
    "upload_form",
]
