"""`edgekit profile --runtime aihub`: one AI Hub profile job per device (and per step bucket graph
of a linked binary), all submitted before any is waited on, a progress line per job whenever its
state changes, and the results side by side per device.

What is measured where: AI Hub's device measures each network call (its inference time over
every profiled iteration, the peak memory while inferring, which compute unit ran each op). A
whole decode is not run there: its time is the decode loop's call count times the device's
per-call time, plus the host loop (sampling, schedule, feeds) measured here on this host's CPU
with ONNX Runtime, and the document says so beside the figure.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from edgekit.bundle import Bundle
from edgekit.decode.dispatch import decode_config
from edgekit.errors import UsageError
from edgekit.host import HostFacts
from edgekit.profile.config import DecodeModel, ProfileConfig, ProgressFn
from edgekit.profile.measure import time_decodes
from edgekit.runtimes import open_runtime
from edgekit.runtimes.aihub import client as hub_client
from edgekit.runtimes.aihub.jobs import Handle, JobBook
from edgekit.runtimes.aihub.models import DeviceModel, built_devices, device_models
from edgekit.runtimes.bucketed import BucketedRuntime
from edgekit.runtimes.registry import backend
from edgekit.targets import builtin_names, load_target

AIHUB = "aihub"
# Where the host loop of a decode is timed, per AI Hub precision: ONNX Runtime on this CPU with
# the same artifact (fp16 on the NPU is the fp32 model computed in float16).
HOST_PRECISION = {"int8": "int8", "fp16": "fp32"}


def aihub_precisions(bundle: Bundle, cfg: ProfileConfig) -> tuple[str, ...]:
    """The precisions profiled on AI Hub: those of ``--precision`` the NPU runs, else the bundle's
    int8 model when it comes from the qnn profile (what the NPU takes), else fp16."""
    runs = backend(AIHUB).precisions
    if cfg.precisions:
        chosen = tuple(p for p in cfg.precisions if p in runs)
        if not chosen:
            raise UsageError(
                f"--runtime aihub runs {', '.join(runs)}, none of --precision {','.join(cfg.precisions)}",
                hint="add --precision int8 (a model from `edgekit quantize --profile qnn`) or fp16",
            )
        return chosen
    q = bundle.quantization
    qnn_int8 = bundle.has("int8") and q is not None and q.profile == backend(AIHUB).quantize_profile
    return ("int8",) if qnn_int8 else ("fp16",)


def device_names(items: Sequence[str], bundle: Bundle) -> list[str]:
    """``--devices`` items as AI Hub device names: a target name (or .toml) stands for its first
    AI Hub device; none given: the devices the bundle's AI Hub engines were compiled for."""
    names = []
    for item in items:
        if item in builtin_names() or item.endswith(".toml"):
            target = load_target(item)
            if not target.aihub.devices:
                raise UsageError(
                    f"--devices {item}: target {target.name} names no AI Hub device",
                    hint=(
                        "use a Snapdragon target (`edgekit targets`) or an AI Hub device name (`qai-hub list-devices`)"
                    ),
                )
            names.append(target.aihub.devices[0])
        else:
            names.append(item)
    if not names:
        names = built_devices(bundle)
    if not names:
        raise UsageError(
            "--runtime aihub: name the AI Hub devices to profile on",
            hint='e.g. --devices "Samsung Galaxy S24 (Family),snapdragon-x-elite" (device names or Snapdragon targets)',
        )
    return list(dict.fromkeys(names))


def profile_on_aihub(
    bundle: Bundle, cfg: ProfileConfig, cond: Mapping[str, np.ndarray], progress: ProgressFn | None
) -> dict[str, Any]:
    """The ``aihub`` section of the profile document: per device and precision, the figures AI
    Hub measured and the decode estimate; the jobs; the warnings (ops off the NPU)."""
    say = (lambda line: progress(line, 0, 0)) if progress else (lambda line: None)
    precisions = aihub_precisions(bundle, cfg)
    names = device_names(cfg.devices, bundle)
    client, hub = hub_client.connect(), hub_client.qai_hub()
    book = JobBook(bundle.root, "profile", client, resume=cfg.resume, say=say)
    planned: list[tuple[str, DeviceModel, list[Handle]]] = []
    rows: list[dict[str, Any]] = []
    for precision in precisions:
        for name, dm in device_models(bundle, precision, names, client, book).items():
            if dm.model is None:
                rows.append(
                    {
                        "id": _id(precision, name),
                        "available": False,
                        "device": name,
                        "precision": precision,
                        "reason": dm.error,
                    }
                )
                continue
            handles = []
            for i, graph in enumerate(dm.graphs or ("",)):
                options = f"--qnn_options context_enable_graphs={graph}" if graph else ""
                label = f"{name}, {precision}" + (f", bucket {i} ({graph})" if graph else "")
                handles.append(
                    book.submit(
                        "profile",
                        label,
                        {"kind": "profile", "device": name, "model": dm.model.model_id, "options": options},
                        lambda name=name, dm=dm, options=options, precision=precision: client.submit_inference_job(
                            dm.model,
                            device=hub.Device(name),
                            name=f"edgekit {bundle.name} {precision}",
                            options=options,
                            profile=True,
                        ),
                    )
                )
            planned.append((precision, dm, handles))
    # The jobs run on AI Hub while the host loop is timed here.
    loops = {p: host_loop(bundle, p, cond, cfg, progress) for p in precisions}
    book.wait([h for _, _, hs in planned for h in hs])
    rows += [_device_row(p, dm, hs, loops[p]) for p, dm, hs in planned]
    warnings = [w for r in rows for w in r.get("warnings", [])]
    measured = [r for r in rows if r["available"]]
    return {
        "devices": rows,
        "host_loop": loops,
        "jobs": book.summary(),
        "job_book": str(book.path),
        "npu_only": all(r["ops"]["NPU"] == r["ops"]["total"] for r in measured),
        "warnings": warnings + [f"{r['id']}: not measured: {r['reason']}" for r in rows if not r["available"]],
        "measured_where": (
            "per network call: AI Hub's device (its inference time, peak memory, compute unit per op); "
            "per decode: the decode loop's calls x the device's per-call time + the host loop timed on this host"
        ),
    }


def _id(precision: str, device: str) -> str:
    return f"aihub {precision} @ {device}"


def host_loop(
    bundle: Bundle, precision: str, cond: Mapping[str, np.ndarray], cfg: ProfileConfig, progress: ProgressFn | None
) -> dict[str, Any]:
    """The decode loop timed here with ONNX Runtime (same artifact, same conditions and seed):
    its calls per decode (per step bucket for a bucketed model) and the host time around them."""
    model = DecodeModel.of(bundle)
    opts = dict(cfg.decode) | ({"steps": cfg.steps[0]} if cfg.steps else {})
    decode_cfg = decode_config(model.kind, model.decode_defaults, opts, seed=cfg.seed)
    label = f"host loop of a decode ({precision}, ONNX Runtime on this host)"
    with open_runtime(bundle, "ort", HOST_PRECISION[precision], threads=cfg.threads) as rt:
        doc = time_decodes(model, rt, cond, decode_cfg, cfg.measure, label, progress)
        bucket_calls = list(rt.calls) if isinstance(rt, BucketedRuntime) else []  # per step bucket: what the loop used
    calls = int(doc["decode"]["runtime_calls"])
    per_bucket = [calls * c / sum(bucket_calls) for c in bucket_calls] if sum(bucket_calls) else None
    return {
        "calls": calls,
        "calls_per_bucket": per_bucket,
        "steps": doc["decode"]["steps"],
        "host_ms": doc["breakdown"]["median_host_ms"],
        "decodes": doc["latency"]["n"],
        "host": HostFacts.detect().cpu,
        "runtime": f"ort {HOST_PRECISION[precision]}",
    }


def _device_row(precision: str, dm: DeviceModel, handles: list[Handle], loop: Mapping[str, Any]) -> dict[str, Any]:
    row: dict[str, Any] = {
        "id": _id(precision, dm.device),
        "device": dm.device,
        "chipset": dm.chipset,
        "precision": precision,
        "model": dm.source,
        "jobs": [h.id for h in handles],
    }
    failed = [h for h in handles if h.failed]
    if failed:
        return row | {"available": False, "reason": f"profile job {failed[0].id} failed: {failed[0].failed}"}
    figures = [
        hub_client.profile_figures(hub_client.call(f"downloading job {h.id}'s profile", h.job.download_profile))
        for h in handles
    ]
    calls = (
        loop["calls_per_bucket"]
        if len(figures) > 1 and loop["calls_per_bucket"] and len(loop["calls_per_bucket"]) == len(figures)
        else [loop["calls"] / len(figures)] * len(figures)
    )
    device_ms = float(sum(c * f["per_call_ms"] for c, f in zip(calls, figures)))
    ops = {k: sum(f["ops"].get(k, 0) for f in figures) for k in dict.fromkeys(k for f in figures for k in f["ops"])}
    peaks = [f["peak_memory_bytes"][1] for f in figures if f["peak_memory_bytes"]]
    off = [op for f in figures for op in f["off_npu"]]
    row |= {
        "available": True,
        "per_call_ms": device_ms / loop["calls"] if loop["calls"] else figures[0]["per_call_ms"],
        "per_call": figures[0]["per_call"] if len(figures) == 1 else None,
        "buckets": [
            {"graph": g, "calls_per_decode": c, "per_call_ms": f["per_call_ms"], "per_call": f["per_call"]}
            for g, c, f in zip(dm.graphs, calls, figures)
        ]
        if dm.graphs
        else None,
        "decode": {
            "calls": loop["calls"],
            "steps": loop["steps"],
            "device_ms": device_ms,
            "host_loop_ms": loop["host_ms"],
            "estimate_ms": device_ms + loop["host_ms"],
            "how": (
                f"{loop['calls']} calls x the device's per-call time + the "
                f"host loop measured on {loop['host']} ({loop['runtime']})"
            ),
        },
        "peak_memory_bytes": max(peaks) if peaks else None,
        "first_load_ms": figures[0]["first_load_ms"],
        "warm_load_ms": figures[0]["warm_load_ms"],
        "ops": ops,
        "npu_share": ops.get("NPU", 0) / ops["total"] if ops.get("total") else None,
        "off_npu": off[:20],
    }
    if ops.get("total") and ops.get("NPU", 0) < ops["total"]:
        where = ", ".join(f"{ops[u]} on the {u}" for u in ops if u not in ("NPU", "total") and ops[u])
        shown = ", ".join(f"{op['name']} ({op['type']})" for op in off[:4])
        row["warnings"] = [
            (
                f"{row['id']}: {ops['total'] - ops.get('NPU', 0)} of "
                f"{ops['total']} ops fell back off the NPU ({where}): {shown}"
            )
        ]
    return row


__all__ = ["aihub_precisions", "device_names", "host_loop", "profile_on_aihub"]
