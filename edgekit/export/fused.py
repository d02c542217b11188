"""Fused graphs in a bundle (`edgekit export --graph step|unrolled`): the decode update inside the
exported graph, so only the loop state crosses. ``fused_graphs`` builds each graph as a torch
module (what it takes and returns, per kind); this module exports it with static shapes and
records it.

All randomness stays a graph input (DESIGN.md). ``fused_bundle`` records every baked value
(``BAKED``) in ``manifest["fused"][graph]``; ``edgekit.decode.fused`` refuses a run that asks
for other values.
"""

from __future__ import annotations

import dataclasses
import shutil
import warnings
from collections.abc import Mapping
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from edgekit._deps import require
from edgekit._lock import writes_bundle
from edgekit._sidefiles import external_data_threshold
from edgekit.bundle import Bundle
from edgekit.decode.dispatch import decode_config
from edgekit.decode.flow import NFE_PER_STEP
from edgekit.decode.schedules import time_grid
from edgekit.errors import ExportError, UsageError
from edgekit.export.config import ExportConfig
from edgekit.export.fused_graphs import fused_module, masked_mask_counts
from edgekit.export.onnx_export import check_graph, quiet_exporter, save_exported
from edgekit.models import load_bundle_spec
from edgekit.spec import FUSED_GRAPHS, GRAPHS, ModelSpec, TensorSpec, check_graph_kind  # noqa: F401  (re-exported)

# Baked decode options per (kind, graph), in the order error messages list them. Options not named
# here are free at run time (flow step: steps, grid, sway, temperature; flow unrolled: temperature).
BAKED: dict[tuple[str, str], tuple[str, ...]] = {
    ("flow", "step"): ("solver", "guidance"),
    ("flow", "unrolled"): ("solver", "steps", "grid", "sway", "guidance"),
    ("masked", "step"): ("steps", "schedule", "choice_temperature", "temperature", "guidance", "spacing"),
    ("masked", "unrolled"): ("steps", "schedule", "choice_temperature", "temperature", "guidance", "spacing"),
}


def export_fused_onnx(
    module,
    inputs: Mapping[str, TensorSpec],
    outputs: Mapping[str, TensorSpec],
    path: Path,
    name: str,
    cfg: ExportConfig,
) -> dict[str, Any]:
    """torch.onnx.export(dynamo=True) with static shapes; checks IO and random ops like export_onnx."""
    torch = require("torch")
    require("onnxscript")

    example = tuple(torch.zeros(s.shape, dtype=getattr(torch, s.dtype)) for s in inputs.values())
    with torch.inference_mode(False), torch.no_grad(), warnings.catch_warnings(), quiet_exporter():
        warnings.simplefilter("ignore")
        try:
            program = torch.onnx.export(
                module,
                example,
                input_names=list(inputs),
                output_names=list(outputs),
                opset_version=cfg.opset,
                dynamo=True,
                optimize=True,
                verbose=False,
            )
        except Exception as exc:  # the exporter raises many types; the user needs the message
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            raise ExportError(f"torch.onnx.export failed for fused graph {name!r}: {first}") from exc
    facts = save_exported(
        program,
        path,
        cfg,
        lambda model: check_graph(model, SimpleNamespace(name=name, inputs=inputs, outputs=outputs)),
        edit=_drop_debug_metadata,
    )
    return facts | {"opset": cfg.opset}


# Node metadata the exporter writes for debugging (stack traces with local paths, fx nodes, class
# paths): about 1.3 kB per node, which the unrolled graph's K copies of the network would multiply
# into a file larger than its weights. Name scopes stay: quantize/names.module_labels reads them.
_KEPT_NODE_METADATA = ("pkg.torch.onnx.name_scopes",)


def _drop_debug_metadata(model) -> None:
    """Remove per-node debug metadata (in place) except ``_KEPT_NODE_METADATA``."""
    for graph_nodes in (model.graph.node, *(f.node for f in model.functions)):
        for node in graph_nodes:
            kept = [(p.key, p.value) for p in node.metadata_props if p.key in _KEPT_NODE_METADATA]
            del node.metadata_props[:]
            for key, value in kept:
                node.metadata_props.add(key=key, value=value)
            node.doc_string = ""


def baked_options(kind: str, graph: str, defaults: Mapping[str, Any], overrides: Mapping[str, Any]) -> dict[str, Any]:
    """The baked subset of the kind's decode config built from bundle defaults + ``overrides``."""

    cfg = decode_config(kind, defaults, overrides)
    return {k: v for k, v in dataclasses.asdict(cfg).items() if k in BAKED[(kind, graph)]}


@writes_bundle("export --graph")
def fused_bundle(
    path: Path | str,
    graph: str,
    decode_options: Mapping[str, Any] | None = None,
    *,
    spec: ModelSpec | None = None,
    cfg: ExportConfig = ExportConfig(),
) -> dict[str, Any]:
    """Add the fused ``graph`` ("step" | "unrolled") to the bundle at ``path``; returns its manifest
    entry ``manifest["fused"][graph]``.

    decode_options: decode options to bake (the rest come from the bundle's decode_defaults).
    spec: the bundle's ModelSpec; default: rebuilt from the manifest's model source at the graph's batch.
    The artifact is named ``fused-<graph>``; a second call replaces it."""
    bundle = Bundle.load(path)
    external_data_threshold(cfg.external_data_mb)  # a bad EDGEKIT_EXTERNAL_DATA_MB: one line before the export
    if graph == "host":
        raise UsageError(
            "--graph host is the per-step network `edgekit export` already wrote; valid fused graphs: step, unrolled"
        )
    if spec is None:
        spec = load_bundle_spec(bundle, batch=bundle.batch)
    opts = baked_options(bundle.kind, graph, bundle.decode_defaults, dict(decode_options or {}))
    module, inputs, outputs = fused_module(spec, graph, opts)
    name = f"fused-{graph}"
    bundle.discard_staging()
    workdir = bundle.staging_path(name)
    workdir.mkdir()
    staged = workdir / f"{name}.onnx"  # with its external-data file beside it, if the weights need one
    try:
        facts = export_fused_onnx(module, inputs, outputs, staged, f"{spec.name}:{name}", cfg)
        baked = dict(opts)
        if bundle.kind == "flow" and graph == "unrolled":
            baked["time_grid"] = [float(v) for v in time_grid(opts["grid"], int(opts["steps"]), float(opts["sway"]))]
            baked["nfe"] = int(opts["steps"]) * NFE_PER_STEP[opts["solver"]]
        if bundle.kind == "masked":
            seq_len = int(bundle.meta["seq_len"])
            baked["mask_counts"] = masked_mask_counts(int(opts["steps"]), opts["schedule"], seq_len).tolist()
            baked["start"] = "all-masked"
        art = bundle.add_artifact(
            name,
            staged,
            made_by="export --graph",
            config={"graph": graph, "opset": cfg.opset},
            suffix=".onnx",
            side_files=facts["side_files"],
        )
        entry = {
            "graph": graph,
            "artifact": name,
            "baked": baked,
            "inputs": {n: s.to_json() for n, s in inputs.items()},
            "outputs": {n: s.to_json() for n, s in outputs.items()},
            "ops": facts["ops"],
            "path": art.path,
        }
        if bundle.kind == "masked":
            entry["mask_id"] = int(bundle.meta["mask_id"])
        bundle.record_entry("fused", graph, entry)
        bundle.save()
        return entry
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


__all__ = ["BAKED", "baked_options", "export_fused_onnx", "fused_bundle", "fused_module", "masked_mask_counts"]
