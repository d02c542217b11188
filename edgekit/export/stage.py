"""The export stage as the command runs it: a model name or factory -> a verified bundle, plus the
fused graph (``--graph step|unrolled``) or the chunk window (``--chunk-frames``) when asked.

Everything about the request is checked before minutes of export: the graph kind, the options to
bake, the window sizes."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from edgekit.bundle import MANIFEST, Bundle
from edgekit.decode.dispatch import parse_decode_options
from edgekit.errors import BundleError, UsageError, one_of
from edgekit.export.chunk import window_spec
from edgekit.export.config import ExportConfig
from edgekit.export.fused import baked_options, fused_bundle
from edgekit.export.to_bundle import export_bundle
from edgekit.models import load_spec
from edgekit.spec import GRAPHS, check_graph_kind


@dataclass(frozen=True)
class ExportRequest:
    model: str  # built-in name or module:factory / file.py:factory
    out: Path  # the bundle directory
    batch: int | None = None  # static batch; None = the factory's default
    graph: str = "host"  # host | step | unrolled (a fused graph added after the per-step one)
    decode: tuple[str, ...] = ()  # --decode KEY=VALUE to bake into a fused graph
    chunk_frames: int | None = None  # flow: export the chunk window graph instead
    context: int = 0
    lookahead: int = 0
    cfg: ExportConfig = field(default_factory=ExportConfig)
    overwrite: bool = False  # replace a bundle already at ``out`` (and everything derived from it)


def export_model(
    req: ExportRequest, progress: Callable[[str], None] | None = None
) -> tuple[Bundle, Mapping[str, Any] | None]:
    """(the exported bundle, the fused graph's manifest entry or None)."""
    say = progress or (lambda message: None)
    if not req.overwrite:
        refuse_replacing(Path(req.out))
    one_of("--graph", req.graph, GRAPHS)
    spec = load_spec(req.model, req.batch)
    if req.chunk_frames is not None:
        if req.graph != "host":
            raise UsageError("--chunk-frames exports the per-step window network; drop --graph")
        spec = window_spec(spec, req.chunk_frames, req.context, req.lookahead)
    elif req.context or req.lookahead:
        raise UsageError("--context and --lookahead need --chunk-frames", hint="e.g. --chunk-frames 16 --context 16")
    baked: dict[str, Any] = {}
    if req.graph != "host":
        check_graph_kind(spec.kind, req.graph)
        baked = parse_decode_options(req.decode)
        baked_options(spec.kind, req.graph, spec.decode_defaults or {}, baked)  # an invalid value fails here
    elif req.decode:
        raise UsageError("--decode bakes options into a fused graph; add --graph step|unrolled, or drop --decode")
    say(f"exporting {spec.name} ({spec.kind}) to {req.out} …")
    bundle = export_bundle(spec, req.out, req.cfg, source=req.model)
    if req.graph == "host":
        return bundle, None
    say(f"adding the fused {req.graph} graph …")
    entry = fused_bundle(req.out, req.graph, baked, spec=spec, cfg=req.cfg)
    return Bundle.load(req.out), entry


def refuse_replacing(out: Path) -> None:
    """Raise a UsageError (before any work) when ``out`` already holds a bundle: exporting replaces
    it, and every artifact and engine made from its graph goes with it. Names what would be lost."""
    if not (out / MANIFEST).is_file():
        return
    try:
        old: Bundle | None = Bundle.load(out, verify=False)
    except BundleError:  # an unreadable manifest is still someone's bundle: refuse without details
        old = None
    lost = replaced_contents(old)
    model = old.name if old is not None else "?"
    raise UsageError(
        f"-o {out} already holds a bundle (model {model}); exporting would replace it and lose: {', '.join(lost)}",
        hint="pass --overwrite to replace it, or export to a new folder (-o another path)",
    )


def replaced_contents(bundle: Bundle | None) -> list[str]:
    """What re-exporting over ``bundle`` would drop, in words (the fp32 model first; None: a
    bundle whose manifest does not load, its fp32 model at least)."""
    artifacts = bundle.artifact_names if bundle is not None else ()
    words = {
        "fp32": "its fp32 model",
        "int8": "the int8 model",
        "conditions": "the held-out condition rows quantize stored",
        "int8-calibration": "the int8 calibration table",
        "quantize-overrides": "the quantize overrides (edgekit debug --fix)",
    }
    lost = [words["fp32"]] if "fp32" in artifacts or not artifacts else []
    buckets = [n for n in artifacts if n.startswith("int8-bucket-")]
    for name in artifacts:
        if name == "fp32" or name in buckets:
            continue
        if name.startswith("fused-"):
            lost.append(f"the fused {name.removeprefix('fused-')} graph")
        else:
            lost.append(words.get(name, f"artifact {name}"))
        if name == "int8" and buckets:
            lost[-1] += f" ({len(buckets) + 1} step buckets)"
    engines = list(bundle.engines) if bundle is not None else []
    if engines:
        lost.append(f"{len(engines)} engine{'s' if len(engines) > 1 else ''} ({', '.join(engines)})")
    if bundle is not None and bundle.flow_quality:
        lost.append("the measured flow quality table (run --latency-budget-ms)")
    return lost
