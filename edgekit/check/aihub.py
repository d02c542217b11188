"""`edgekit check --runtime aihub --device D`: the candidate network run on an AI Hub device, judged
against the reference on this host by check's own metrics and gate.

Per step on recorded feeds: the reference (FP32 on this host) decodes the held-out rows exactly
as `edgekit check` does (batch i with seed + i), every call's inputs are recorded, and one AI Hub
inference job per graph (per step bucket graph of a linked binary) runs the device's network on
all of them. Each device output is compared with the reference's output for the same inputs:
the teacher-forced metrics (logits KL and top-1 agreement for masked/ar, velocity SNR for flow)
and their per-step curves, gated by the same thresholds. The metrics of the candidate's own free
decode (token agreement, final-frame SNR, quality drops) need one job per decode step and are
reported as not measured, never as a number.
"""

from __future__ import annotations

import dataclasses
import hashlib
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import numpy as np

from edgekit.bundle import Bundle, now_iso
from edgekit.check.strict import settle
from edgekit.decode.dispatch import decode, decode_config
from edgekit.errors import EdgekitError, UsageError
from edgekit.evaluate import check_rows, conditions
from edgekit.evaluate.metrics import accumulator_for, near_tie_note
from edgekit.evaluate.thresholds import DEFAULTS, check_comparable, load_baseline, load_thresholds
from edgekit.evaluate.verdict import compare
from edgekit.runtimes import open_runtime
from edgekit.runtimes.aihub import client as hub_client
from edgekit.runtimes.aihub.jobs import JobBook
from edgekit.runtimes.aihub.models import built_devices, device_models
from edgekit.runtimes.base import RuntimeProxy
from edgekit.spec import step_position
from edgekit.targets import builtin_names, load_target

MODE = (
    "per step on recorded feeds: the reference's decodes on this host, every call's inputs run by the device's network "
    "(teacher-forced); the candidate's own free decode is not run on the device"
)
# The metrics a teacher-forced comparison gives per kind (evaluate.metrics: from the shadow pairs).
TEACHER_FORCED = {
    "masked": ("logits_kl", "top1_agreement", "reference_near_ties", "flips_at_near_ties"),
    "ar": ("logits_kl", "top1_agreement", "reference_near_ties", "flips_at_near_ties"),
    "flow": ("velocity_snr_db",),
}


class FeedRecorder(RuntimeProxy):
    """Forwards every call and keeps a copy of its feeds (the inputs the device will run)."""

    def __init__(self, inner: Any):
        super().__init__(inner, name=f"recording({inner.name})", owns_inner=False)
        self.feeds: list[dict[str, np.ndarray]] = []

    def run(self, feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        self.feeds.append({k: np.array(v) for k, v in feeds.items()})
        return self.inner.run(feeds)


def device_name(device: str | None, target: str | None, bundle: Bundle) -> str:
    """``--device`` (an AI Hub device name or a Snapdragon target), else ``--target``'s first AI Hub
    device, else the device of the bundle's one AI Hub engine."""
    item = device or target
    if item is not None and (item in builtin_names() or item.endswith(".toml")):
        t = load_target(item)
        if not t.aihub.devices:
            raise UsageError(
                f"target {t.name} names no AI Hub device",
                hint='pass --device "AI Hub device name" (`qai-hub list-devices`)',
            )
        return t.aihub.devices[0]
    if item is not None:
        return item
    built = built_devices(bundle)
    if len(built) != 1:
        raise UsageError(
            "--runtime aihub: name the AI Hub device to check on with --device",
            hint='e.g. --device "Samsung Galaxy S24 (Family)" or --device snapdragon-8-gen-3',
        )
    return built[0]


def check_on_aihub(
    path: Path | str,
    cfg: Any,
    ref_v: Any,
    cand_v: Any,
    say: Callable[[str], None],
    settings_of: Callable,
    eval_rows: Callable,
) -> dict[str, Any]:
    """The ``edgekit.check/1`` document of ``cand_v`` (aihub:int8 or aihub:fp16) on an AI Hub device
    against ``ref_v`` on this host (``cfg``: a ``CheckConfig``; ``settings_of``/``eval_rows``:
    check's own, passed in by check's stage, so both checks decide alike)."""
    bundle = Bundle.load(path)
    cfg = cfg.resolved(bundle)
    check_rows(bundle, cfg.n, "--n")
    rows, cond_source = eval_rows(bundle, cfg)
    if rows is not None:
        cfg = dataclasses.replace(cfg, n=min(cfg.n, len(next(iter(rows.values())))))
    if ref_v.runtime == "aihub":
        raise UsageError("--reference runs on this host (e.g. ort:fp32); AI Hub runs the candidate")
    if cfg.candidate_decode:
        raise UsageError(
            "--runtime aihub runs the device's network on the reference's own step inputs: one decode setting for both"
        )
    thresholds = load_thresholds(bundle.kind, cfg.thresholds)
    settings, overrides, _ = settings_of(bundle, cfg, ref_v, cand_v)
    baseline = load_baseline(cfg.baseline) if cfg.baseline else None
    if baseline is not None:
        check_comparable(baseline, settings)
    name = device_name(cfg.device, cfg.target, bundle)
    client, hub = hub_client.connect(), hub_client.qai_hub()
    book = JobBook(bundle.root, "check", client, resume=cfg.resume, say=say)
    dm = device_models(bundle, cand_v.precision, [name], client, book)[name]
    if dm.model is None:
        raise EdgekitError(f"AI Hub: {dm.error}", hint="see the job on https://workbench.aihub.qualcomm.com/jobs/")
    say(f"decoding {cfg.n} rows with {ref_v} on this host, recording every call's inputs")
    with open_runtime(bundle, ref_v.runtime, ref_v.precision, threads=cfg.threads) as ref_rt:
        batches = _record(bundle, ref_rt, cfg, overrides, rows)
        calls = [f for b in batches for f in b["feeds"]]
        groups = _by_graph(bundle, dm, calls)
        names = list(bundle.inputs)
        handles = []
        for graph, idx in groups.items():
            options = f"--qnn_options context_enable_graphs={graph}" if graph else ""
            data = hub_client.device_feeds([calls[i] for i in idx], names)
            request = {
                "kind": "inference",
                "device": name,
                "model": dm.model.model_id,
                "options": options,
                "inputs": _digest(data),
            }
            handles.append(
                (
                    idx,
                    book.submit(
                        "inference",
                        f"{name}, {len(idx)} calls" + (f", graph {graph}" if graph else ""),
                        request,
                        lambda data=data, options=options: client.submit_inference_job(
                            dm.model,
                            device=hub.Device(name),
                            inputs=data,
                            name=f"edgekit check {bundle.name}",
                            options=options,
                            profile=False,
                        ),
                    ),
                )
            )
        book.wait([h for _, h in handles])
        book.require_success([h for _, h in handles])
        device_out: list[Any] = [None] * len(calls)
        for idx, h in handles:
            data = hub_client.call(f"downloading job {h.id}'s outputs", h.job.download_output_data)
            for i, out in zip(idx, hub_client.device_outputs(data or {}, list(bundle.outputs), len(idx))):
                device_out[i] = out
        scalars, curves = _teacher_forced(bundle, ref_rt, batches, device_out)
        reference_device = ref_rt.device
    measured = TEACHER_FORCED[bundle.kind]
    skipped = [m for m in DEFAULTS[bundle.kind] if m not in measured]
    metrics = {**scalars, **{m: None for m in skipped}}
    verdict = compare(metrics, thresholds, baseline)
    warnings = [f"{m}: not measured on AI Hub ({MODE}): not gated" for m in skipped if m in thresholds.explicit]
    note = near_tie_note(metrics) if "top1_agreement" in verdict.failed else None
    if note is not None:  # as edgekit check says it: a failed top-1 whose flips are the model's own near-ties
        warnings.append(note)
    settings["conditions"] = cond_source
    doc: dict[str, Any] = {
        "schema": "edgekit.check/1",
        "created": now_iso(),
        "bundle": str(bundle.root),
        **settings,
        "devices": {
            "reference": reference_device,
            "candidate": f"Qualcomm AI Hub {name} ({dm.chipset or 'chipset unknown'}), {dm.source}",
        },
        "thresholds": thresholds.source,
        "metrics": metrics,
        "curves": curves,
        "quality": {
            "reference": {},
            "candidate": {},
            "drop": {},
            "ground_truth": bundle.ground_truth,
            "metric_hook": cfg.metric_hook,
        },
        "rows": [row.to_json() for row in verdict.rows],
        "passed": verdict.passed,
        "failed": verdict.failed,
        "baseline": baseline.path if baseline else None,
        "warnings": warnings,
        "aihub": {
            "device": name,
            "chipset": dm.chipset,
            "model": dm.source,
            "mode": MODE,
            "calls": len(calls),
            "not_measured": skipped,
            "jobs": book.summary(),
            "job_book": str(book.path),
        },
    }
    settle(doc, bundle, [ref_v.precision, cand_v.precision], cfg.strict)
    return doc  # check_bundle adds the wall time and writes the baseline / JUnit files


def _record(
    bundle: Bundle, ref_rt: Any, cfg: Any, overrides: Mapping[str, Any], rows: Mapping[str, np.ndarray] | None
) -> list[dict[str, Any]]:
    """The reference's decodes of the evaluation rows as `edgekit check` runs them, per batch:
    every call's feeds, its step count and call count."""
    kind, batch, out = bundle.kind, bundle.batch, []
    for i in range(-(-cfg.n // batch)):
        part = None if rows is None else {k: v[i * batch : (i + 1) * batch] for k, v in rows.items()}
        cond = conditions(bundle, cfg.cond, batch, cfg.seed + i, rows=part, draw=True)
        rec = FeedRecorder(ref_rt)
        dec = decode(
            kind, rec, bundle.meta, cond, decode_config(kind, bundle.decode_defaults, overrides, seed=cfg.seed + i)
        )
        out.append({"feeds": rec.feeds, "steps": dec.steps, "runtime_calls": dec.runtime_calls})
    return out


def _by_graph(bundle: Bundle, dm: Any, calls: list[Mapping[str, np.ndarray]]) -> dict[str, list[int]]:
    """Call indices per graph of the device model: one group, or per step bucket graph (picked
    from the call's own step position, as ``runtimes.bucketed`` does)."""
    if not dm.graphs:
        return {"": list(range(len(calls)))}
    edges = np.asarray(dm.boundaries, dtype=np.float64)
    groups: dict[str, list[int]] = {}
    for i, feeds in enumerate(calls):
        position = step_position(bundle.kind, feeds, bundle.meta)
        b = int(np.searchsorted(edges, position, side="right")) if np.isfinite(position) else 0
        groups.setdefault(dm.graphs[min(b, len(dm.graphs) - 1)], []).append(i)
    return groups


def _digest(data: Mapping[str, list[np.ndarray]]) -> str:
    h = hashlib.sha256()
    for name, arrays in data.items():
        h.update(name.encode())
        for a in arrays:
            h.update(a.tobytes())
    return h.hexdigest()[:16]


def _teacher_forced(
    bundle: Bundle, ref_rt: Any, batches: list[dict[str, Any]], device_out: list[Any]
) -> tuple[dict[str, float], dict[str, list[float]]]:
    """check's teacher-forced metrics with the device as the shadow: each call's reference output
    (recomputed on its recorded feeds) against the device's output for the same feeds, summed and
    reported as ``edgekit check`` does (the accumulator's ``teacher_forced``)."""
    acc = accumulator_for(bundle.kind, bundle.meta)
    calls = iter(device_out)
    for b in batches:
        paired = [np.asarray(acc.on_pair(feeds, ref_rt.run(feeds), next(calls)), np.float64) for feeds in b["feeds"]]
        acc.add_pairs(paired, b["runtime_calls"], b["steps"])
    return acc.teacher_forced()
