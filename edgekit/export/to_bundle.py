"""The export stage: ModelSpec -> verified fp32 ONNX in a bundle."""

from __future__ import annotations

import dataclasses
import json
import shutil
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from edgekit._deps import require
from edgekit._lock import writes_bundle
from edgekit._sidefiles import external_data_threshold
from edgekit._userhooks import remember_export
from edgekit.bundle import Bundle
from edgekit.decode.dispatch import decode_config
from edgekit.errors import ExportError
from edgekit.export.config import ExportConfig
from edgekit.export.onnx_export import export_onnx
from edgekit.export.verify import compare, verification_feeds
from edgekit.models import resolve_source
from edgekit.resources import BASE_MEMORY, EXPORT_DISK, EXPORT_MEMORY, Need, gib, preflight
from edgekit.runtimes.ort import OrtRuntime
from edgekit.runtimes.torch_ref import TorchRuntime
from edgekit.spec import ModelSpec


def check_spec(spec: ModelSpec) -> None:
    """What a factory returned must make a bundle every command can read: checked before any
    file is written (a bad one was exported, then failed at every later command)."""
    torch = require("torch")
    if not isinstance(spec.module, torch.nn.Module):
        raise ExportError(
            f"model {spec.name!r}: module is a {type(spec.module).__name__}, not a torch.nn.Module",
            hint="return ModelSpec(module=<your nn.Module>, ...) from the factory",
        )
    if not isinstance(spec.name, str) or not spec.name or not spec.name.isprintable() or len(spec.name) > 200:
        raise ExportError(f"model name {spec.name!r} must be 1-200 printable characters (no control or escape codes)")
    for what, value in (("meta", spec.meta), ("decode_defaults", spec.decode_defaults)):
        if not isinstance(value, Mapping):
            raise ExportError(f"model {spec.name!r}: {what} must be a dict, not {type(value).__name__}")
        try:
            json.dumps(dict(value), allow_nan=False)
        except (TypeError, ValueError) as exc:
            raise ExportError(
                f"model {spec.name!r}: {what} is not plain JSON data ({exc})",
                hint="use str/int/float/bool/None, lists and dicts only",
            ) from None
    if spec.ground_truth is not None and not isinstance(spec.ground_truth, str):
        raise ExportError(f"model {spec.name!r}: ground_truth must be None or 'module:function'")
    decode_config(spec.kind, spec.decode_defaults, {})  # a bad default fails here, not at every run


def export_bundle(spec: ModelSpec, out: Path, cfg: ExportConfig = ExportConfig(), source: str | None = None) -> Bundle:
    """Export ``spec`` to ``out`` (a new bundle, or an existing one of the same model whose fp32
    graph is replaced), verify it against torch, and save the manifest.

    A verification failure is an ExportError carrying the numbers; the bundle on disk is left
    as it was (the new graph is never recorded)."""

    check_spec(spec)  # before the bundle directory is even created
    external_data_threshold(cfg.external_data_mb)  # a bad EDGEKIT_EXTERNAL_DATA_MB too
    preflight("export", export_needs(spec, Path(out)))
    return _export_locked(spec, Path(out), cfg, source)


def export_needs(spec: ModelSpec, out: Path) -> list[Need]:
    """What export will hold of this host for ``spec``'s weights (parameters and buffers, as the
    FP32 graph stores them; factors measured at real size, ``resources.py``)."""
    weights = sum(t.numel() * 4 for t in (*spec.module.parameters(), *spec.module.buffers()) if t.is_floating_point())
    weights += sum(t.numel() * t.element_size() for t in spec.module.buffers() if not t.is_floating_point())
    return [
        Need(
            "memory", int(EXPORT_MEMORY * weights) + BASE_MEMORY, f"{EXPORT_MEMORY}x its {gib(weights)} of FP32 weights"
        ),
        Need("disk", int(EXPORT_DISK * weights), "the FP32 graph", out),
    ]


@writes_bundle("export", "out", create=True)
def _export_locked(spec: ModelSpec, out: Path, cfg: ExportConfig, source: str | None) -> Bundle:
    bundle = Bundle.new(
        out,
        model={
            "name": spec.name,
            "kind": spec.kind,
            **resolve_source(source or spec.name),  # a file.py path absolute, with its sha256
            "meta": dict(spec.meta),
            "ground_truth": spec.ground_truth,
            # recorded like the source: a file path absolute, so any directory can call it
            "condition_sampler": resolve_source(spec.condition_sampler)["source"] if spec.condition_sampler else None,
        },
        inputs=spec.inputs,
        outputs=spec.outputs,
        decode_defaults=spec.decode_defaults,
    )
    bundle.discard_staging()  # leftovers of an interrupted earlier stage (one stage at a time per bundle)
    workdir = bundle.staging_path("export")
    workdir.mkdir()
    staged = workdir / "fp32.onnx"  # with its external-data file beside it, if the weights need one
    try:
        facts = export_onnx(spec, staged, cfg)
        with TorchRuntime(spec.module, spec.inputs, spec.outputs) as ref, OrtRuntime(staged) as cand:
            report = compare(ref, cand, verification_feeds(spec, ref, cfg.verify), cfg.verify)
        if not report["passed"]:
            bad = {n: o for n, o in report["outputs"].items() if not o["passed"]}
            worst = ", ".join(
                f"{n}: {o['nonfinite']} NaN/Inf values"
                if o.get("nonfinite")
                else f"{n}: max abs {o['max_abs']:.3g} > tol {o['tolerance']:.3g}"
                for n, o in bad.items()
            )
            if any(o.get("nonfinite") for o in bad.values()):
                raise ExportError(
                    f"verification failed: the model produces non-finite outputs ({worst})",
                    hint="fix the model (log of 0, division by 0, overflow) before exporting",
                )
            raise ExportError(
                f"ONNX output differs from torch beyond tolerance ({worst})",
                hint="look for ops that behave differently in eval/export (dropout, in-place updates) or loosen --atol",
            )
        config: dict[str, Any] = dataclasses.asdict(cfg) | {
            "exporter": facts["exporter"],
            "external_data": facts["external_data"],
            "external_data_mb": external_data_threshold(cfg.external_data_mb) / (1 << 20),
        }
        bundle.add_artifact(
            "fp32", staged, made_by="export", config=config, suffix=".onnx", side_files=facts["side_files"]
        )
        bundle.record("graph", {"fp32": {"ops": facts["ops"], "opset": facts["opset"]}})
        bundle.record_entry("verification", "fp32", {"reference": "torch", "candidate": "ort"} | report)
        bundle.save()
        # This user exported it here: the code its manifest names may run later without --trust-code.
        remember_export(bundle.root, [bundle.source, bundle.condition_sampler])
        return bundle
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
