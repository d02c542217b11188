"""`edgekit build --runtime aihub`: a Snapdragon target's QNN context binary compiled by Qualcomm
AI Hub for the target's first AI Hub device (one compile job), or, for a step-bucketed int8
model, one compile job per bucket graph to a DLC and one **link job** that makes a single
context binary holding every bucket's graph over one copy of the shared weights. The binary is
downloaded into the bundle as the engine, with the job ids, the QAIRT version, the device and its
chipset (what profile and check then run on the devices: ``runtimes.aihub.models``).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from edgekit.bundle import Bundle
from edgekit.errors import TargetUnavailable, UsageError
from edgekit.host import HostFacts
from edgekit.runtimes.aihub import client as hub_client
from edgekit.runtimes.aihub.jobs import JobBook
from edgekit.runtimes.aihub.models import CONTEXT_BINARY, DLC, compile_options, job_name, upload_form
from edgekit.targets import Target


def prepare_aihub(target: Target, bundle: Bundle, host: HostFacts) -> dict[str, Any]:
    """Refuse before any work: no client installed (exit 3), none configured (exit 3), a target
    that names no AI Hub device (exit 2). The device facts: the device compiled for."""
    hub_client.qai_hub()
    conf = hub_client.configuration()
    if not conf.configured:
        raise TargetUnavailable(
            f"no Qualcomm AI Hub client is configured on this host ({conf.problem})", hint=hub_client.SETUP
        )
    if not target.aihub.devices:
        raise UsageError(
            f"target {target.name} names no AI Hub device",
            hint='add [aihub] devices = ["..."] to its .toml (`qai-hub list-devices`)',
        )
    return {"device": target.aihub.devices[0]}


def build_aihub(jobs: Sequence[Any]) -> tuple[dict[str, Path], dict[str, Any]]:
    """Compile ``jobs`` (one ``BuildJob`` per step bucket graph; one for a one-scale model) on AI Hub
    for the target's first device and download the context binary: ({"model": file}, facts)."""
    first = jobs[0]
    bundle, target, precision = first.bundle, first.target, first.precision
    client, hub = hub_client.connect(), hub_client.qai_hub()
    name = target.aihub.devices[0]
    device = hub_client.find_device(client, name)
    book = JobBook(bundle.root, "build", client, resume=first.resume, say=first.say or (lambda line: None))
    linked = len(jobs) > 1
    options = compile_options(bundle, DLC if linked else CONTEXT_BINARY, target.aihub.compile_options)
    compiles = []
    for i, job in enumerate(jobs):
        part = f"bucket {i}" if linked else ""
        request = {
            "kind": "compile",
            "device": name,
            "options": options,
            "model": job.source_sha256,
            "shapes": _shapes(bundle),
            "bucket": i if linked else None,
        }
        compiles.append(
            book.submit(
                "compile",
                f"{name}{', ' + part if part else ''}",
                request,
                lambda job=job, part=part: client.submit_compile_job(
                    model=upload_form(job.model_path, job.workdir),
                    device=hub.Device(name),
                    name=job_name(bundle, precision, part),
                    options=options,
                ),
            )
        )
    book.wait(compiles)
    book.require_success(compiles)
    final, link_id = compiles[0], None
    if linked:
        models = [hub_client.call(f"reading job {h.id}'s compiled model", h.job.get_target_model) for h in compiles]
        final = book.submit(
            "link",
            name,
            {"kind": "link", "device": name, "models": [h.id for h in compiles]},
            lambda: client.submit_link_job(models, device=hub.Device(name), name=job_name(bundle, precision, "linked")),
        )
        book.wait([final])
        book.require_success([final])
        link_id = final.id
    model = hub_client.call(f"reading job {final.id}'s compiled model", final.job.get_target_model)
    path = Path(
        hub_client.call(
            "downloading the context binary", final.job.download_target_model, str(first.workdir / "model.bin")
        )
    )
    meta = hub_client.model_metadata(model)
    chipset = hub_client.chipset_of(device)
    # QNN_CONTEXT_BIN_GRAPH_NAMES is an alias of QNN_MODEL_GRAPH_NAMES in the client's enum: one key.
    graphs = [g for g in meta.get("QNN_MODEL_GRAPH_NAMES", "").replace(";", ",").split(",") if g.strip()]
    facts = {
        "runtime": "aihub",
        "runtime_version": meta.get("QAIRT_SDK_VERSION") or meta.get("QNN_SDK_VERSION"),
        "format": CONTEXT_BINARY,
        "device": f"{name} ({chipset or 'chipset unknown'})",
        "device_name": name,
        "portable": False,  # a context binary runs on the chipset it was compiled for
        "compute_capability": None,
        "l4t": None,
        "aihub": {
            "device": name,
            "os": device.os,
            "chipset": chipset,
            "model_id": model.model_id,
            "compile_jobs": [h.id for h in compiles],
            "link_job": link_id,
            "graphs": [g.strip() for g in graphs],
            "qairt": meta.get("QAIRT_SDK_VERSION"),
            "hexagon": meta.get("QNN_CONTEXT_BIN_HEXAGON_VERSION"),
            "soc_model": meta.get("QNN_CONTEXT_BIN_SOC_MODEL"),
            "client": str(getattr(hub, "__version__", "")) or None,
        },
        "config": {"device": name, "compiled": {"options": options, "linked": linked}},
    }
    return {"model": path}, facts


def _shapes(bundle: Bundle) -> dict[str, list[int]]:
    return {n: list(s.shape) for n, s in bundle.inputs.items()}


__all__ = ["build_aihub", "prepare_aihub"]
