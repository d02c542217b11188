"""The export stage: ModelSpec -> verified fp32 ONNX in a bundle."""

from __future__ import annotations

import dataclasses
import shutil
from pathlib import Path
from typing import Any

from edgekit._lock import writes_bundle
from edgekit.bundle import Bundle
from edgekit.errors import ExportError
from edgekit.export.config import ExportConfig
from edgekit.export.onnx_export import export_onnx
from edgekit.export.verify import compare, verification_feeds
from edgekit.runtimes.ort import OrtRuntime
from edgekit.runtimes.torch_ref import TorchRuntime
from edgekit.spec import ModelSpec


@writes_bundle("export", "out", create=True)
def export_bundle(spec: ModelSpec, out: Path, cfg: ExportConfig = ExportConfig(), source: str | None = None) -> Bundle:
    """Export ``spec`` to ``out`` (a new bundle, or an existing one of the same model whose fp32
    graph is replaced), verify it against torch, and save the manifest.

    A verification failure is an ExportError carrying the numbers; the bundle on disk is left
    as it was (the new graph is never recorded)."""

    bundle = Bundle.new(
        out,
        model={
            "name": spec.name,
            "kind": spec.kind,
            "source": source or spec.name,
            "meta": dict(spec.meta),
            "ground_truth": spec.ground_truth,
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
            worst = ", ".join(f"{n}: max abs {o['max_abs']:.3g} > tol {o['tolerance']:.3g}" for n, o in bad.items())
            raise ExportError(
                f"ONNX output differs from torch beyond tolerance ({worst})",
                hint="look for ops that behave differently in eval/export (dropout, in-place updates) or loosen --atol",
            )
        config: dict[str, Any] = dataclasses.asdict(cfg) | {"exporter": facts["exporter"], "external_data": facts["external_data"]}
        bundle.add_artifact("fp32", staged, made_by="export", config=config, suffix=".onnx", side_files=facts["side_files"])
        bundle.manifest["graph"] = {"fp32": {"ops": facts["ops"], "opset": facts["opset"]}}
        bundle.manifest["verification"]["fp32"] = {"reference": "torch", "candidate": "ort"} | report
        bundle.save()
        return bundle
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
