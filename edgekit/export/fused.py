"""Fused graphs: the decode update inside the exported graph, so only the loop state crosses.

Two graph kinds beside the per-step network ("host", what ``export_bundle`` writes):

- ``step``     — flow: one solver step. x float32[B,T,C], t float32[B], t_next float32[B] + conditioning
                 -> x_next float32[B,T,C]; solver and guidance are baked, the time grid is not (the
                 host feeds each (t, t_next) pair), so steps and grid stay free.
                 masked: one whole MaskGIT update. tokens int64[B,L], step int64[1]
                 (+ gumbel float32[B,L,W], choice_noise float32[B,L] when temperature > 0) + conditioning
                 -> tokens_out int64[B,L]. Steps, schedule, temperatures and guidance are baked; the
                 mask count of every step is a constant table indexed by ``step``, and the re-mask
                 threshold comes from one TopK with the constant K = L.
- ``unrolled`` — the whole K-step decode in one call.
                 flow: the solve on a baked time grid. x float32[B,T,C] (the starting noise,
                 temperature already applied) + conditioning -> x_out float32[B,T,C].
                 masked: K MaskGIT updates from all-masked tokens (built in the graph). Conditioning
                 (+ gumbel float32[K,B,L,W], choice_noise float32[K,B,L] when temperature > 0: every
                 step's noise, step-major) -> tokens_out int64[B,L]. Baked as the masked step graph; the
                 per-step update is the same function, called K times on shared weights (the file stays
                 about the size of the per-step network), and the last step skips the re-mask.

All randomness stays a graph input (DESIGN.md): the host draws it from the same Generator, in the
same order, as ``edgekit.decode.masked`` / ``flow``. Guidance is baked as a doubled batch inside
the graph (conditional rows, then unconditional rows filled with the declared uncond values).

Masked fused graphs assume every row starts all-masked (no inpainting): that is what makes the
per-step mask counts constants. ``fused_bundle`` records every baked value in
``manifest["fused"][graph]``; ``edgekit.decode.fused`` refuses a run that asks for other values.
"""

from __future__ import annotations

import dataclasses
import math
import shutil
import warnings
from collections.abc import Mapping
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np

from edgekit._deps import require
from edgekit._lock import writes_bundle
from edgekit._sidefiles import external_data_threshold
from edgekit.bundle import Bundle
from edgekit.decode.dispatch import decode_config
from edgekit.decode.flow import NFE_PER_STEP
from edgekit.decode.masked import SPACED_BONUS
from edgekit.decode.schedules import masked_floor, time_grid
from edgekit.errors import ExportError, UsageError
from edgekit.export.config import ExportConfig
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


def masked_mask_counts(steps: int, schedule: str, seq_len: int) -> np.ndarray:
    """int64 [steps]: tokens left masked after each step when all ``seq_len`` start masked.

    The host loop's rule (decode/masked.py) with N0 = L for every row: max(1, min(unknown − 1,
    floor(N0·γ((t+1)/K)))), and 0 after the last step (it returns its prediction unmasked)."""

    counts = np.zeros(steps, dtype=np.int64)
    unknown = seq_len
    for t in range(steps - 1):
        floor = int(masked_floor(schedule, t, steps, seq_len))  # float32, as the host loop
        counts[t] = unknown = max(1, min(unknown - 1, floor))
    return counts


def _uncond_tensor(torch: Any, c: Any, fill: Any) -> Any:
    """The unconditional rows as the host loop builds them: "same" keeps the conditional value,
    a number fills every element, an array of one row's shape is broadcast per element."""
    if isinstance(fill, str) and fill == "same":
        return c
    return torch.as_tensor(fill, dtype=c.dtype).expand_as(c).clone()


def _guided(module, cond_names: tuple[str, ...], uncond: Mapping[str, Any], guidance: float):
    """A function (state tensors, cond tensors) -> guided output of ``module``."""
    torch = require("torch")

    def call(state: tuple, cond: tuple):
        if guidance == 1.0:
            return module(*state, *cond)
        doubled_state = tuple(torch.cat([s, s]) for s in state)
        doubled_cond = tuple(torch.cat([c, _uncond_tensor(torch, c, uncond[n])]) for n, c in zip(cond_names, cond))
        out = module(*doubled_state, *doubled_cond)
        b = state[0].shape[0]
        c_out, u_out = out[:b], out[b:]
        return u_out + guidance * (c_out - u_out)

    return call


def _flow_update(velocity, x, t, t_next, solver: str):
    """One solver step on tensors: x [B,T,C], t and t_next [B]. Same formulas as decode/flow.integrate."""
    dt = (t_next - t)[:, None, None]  # (B, 1, 1)
    half = (t_next - t) / 2
    if solver == "euler":
        return x + dt * velocity(x, t)
    if solver == "midpoint":
        k1 = velocity(x, t)
        return x + dt * velocity(x + (dt / 2) * k1, t + half)
    if solver == "heun":
        k1 = velocity(x, t)
        k2 = velocity(x + dt * k1, t_next)
        return x + (dt / 2) * (k1 + k2)
    k1 = velocity(x, t)
    k2 = velocity(x + (dt / 2) * k1, t + half)
    k3 = velocity(x + (dt / 2) * k2, t + half)
    k4 = velocity(x + dt * k3, t_next)
    return x + (dt / 6) * (k1 + 2 * k2 + 2 * k3 + k4)


def _flow_module(spec: ModelSpec, graph: str, opts: Mapping[str, Any]):
    torch = require("torch")

    cond_names = tuple(spec.meta.get("conditioning", {}))
    uncond = {n: (v or {}).get("uncond") for n, v in spec.meta.get("conditioning", {}).items()}
    guided = _guided(spec.module, cond_names, uncond, float(opts["guidance"]))
    solver = opts["solver"]
    grid = (
        [float(v) for v in time_grid(opts["grid"], int(opts["steps"]), float(opts["sway"]))]
        if graph == "unrolled"
        else []
    )

    class FlowFused(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.inner = spec.module

        def forward(self, *args):
            def velocity(x, t):
                return guided((x, t), tuple(args[n_state:]))

            if graph == "step":
                x, t, t_next = args[0], args[1], args[2]
                return _flow_update(velocity, x, t, t_next, solver)
            x = args[0]
            for t0, t1 in zip(grid[:-1], grid[1:]):
                t = torch.full((x.shape[0],), t0, dtype=x.dtype)
                tn = torch.full((x.shape[0],), t1, dtype=x.dtype)
                x = _flow_update(velocity, x, t, tn, solver)
            return x

    n_state = 3 if graph == "step" else 1
    x_spec, t_spec = spec.inputs["x"], spec.inputs["t"]
    cond = {n: spec.inputs[n] for n in cond_names}
    if graph == "step":
        inputs = {"x": x_spec, "t": t_spec, "t_next": t_spec, **cond}
        outputs = {"x_next": TensorSpec(x_spec.shape, "float32")}
    else:
        inputs = {"x": x_spec, **cond}
        outputs = {"x_out": TensorSpec(x_spec.shape, "float32")}
    return FlowFused().eval(), inputs, outputs


def _masked_update(
    logits_of, tokens, gumbel, choice_noise, scale, mask_len, *, mask_id: int, temperature: float, spacing: int = 0
):
    """One MaskGIT update on tensors, the formulas of decode/masked._step (shared by step and unrolled).

    logits_of(tokens) -> guided logits float32[B,L,W] with banned ids at -inf. tokens int64[B,L].
    gumbel float32[B,L,W] and choice_noise float32[B,L], or None for greedy. scale float32[1]: the
    confidence noise scale choice_temperature·(1 − (t+1)/K). mask_len int64[1]: tokens left masked
    after this step (0 masks nothing), or None on a known last step (the prediction, unmasked).
    Returns tokens_out int64[B,L]."""
    torch = require("torch")

    logits = logits_of(tokens)  # (B, L, W)
    if gumbel is not None:
        sampled = torch.argmax(logits / temperature + gumbel, dim=-1)
    else:
        sampled = torch.argmax(logits, dim=-1)
    unknown = tokens == mask_id
    sampled = torch.where(unknown, sampled, tokens)
    if mask_len is None:
        return sampled
    log_p = torch.log_softmax(logits, dim=-1)
    confidence = torch.gather(log_p, 2, sampled[..., None])[..., 0]  # (B, L)
    if choice_noise is not None:
        confidence = confidence + scale * choice_noise
    confidence = torch.where(unknown, confidence, torch.full_like(confidence, math.inf))
    if spacing > 0:  # decode/masked.prefer_spaced: the highest new token within ±spacing goes first
        scores = torch.where(unknown, confidence, torch.full_like(confidence, -math.inf))
        window = torch.nn.functional.max_pool1d(scores[:, None, :], 2 * spacing + 1, stride=1, padding=spacing)[:, 0]
        bonus = torch.where(
            unknown & (scores >= window), torch.full_like(confidence, float(SPACED_BONUS)), torch.zeros_like(confidence)
        )
        confidence = torch.where(unknown, confidence + bonus, confidence)
    ascending, _ = torch.topk(confidence, tokens.shape[1], dim=1, largest=False, sorted=True)  # constant K = L
    index = mask_len.expand(tokens.shape[0])[:, None]  # (B, 1)
    cut = torch.gather(ascending, 1, index)  # (B, 1)
    remask = (confidence < cut) & (mask_len > 0)
    return torch.where(remask, torch.full_like(sampled, mask_id), sampled)


def _masked_module(spec: ModelSpec, graph: str, opts: Mapping[str, Any]):
    torch = require("torch")

    meta = spec.meta
    vocab, mask_id, seq_len = int(meta["vocab_size"]), int(meta["mask_id"]), int(meta["seq_len"])
    cond_names = tuple(meta.get("conditioning", {}))
    uncond = {n: (v or {}).get("uncond") for n, v in meta.get("conditioning", {}).items()}
    guided = _guided(spec.module, cond_names, uncond, float(opts["guidance"]))
    steps, temperature = int(opts["steps"]), float(opts["temperature"])
    sampled_mode = temperature > 0
    width = spec.outputs["logits"].shape[-1]
    b = spec.batch
    banned = np.zeros(width, dtype=np.float32)
    banned[vocab:] = -np.inf
    if mask_id < width:
        banned[mask_id] = -np.inf
    counts = masked_mask_counts(steps, opts["schedule"], seq_len)
    # Confidence noise scale per step: choice_temperature · (1 − r), r = (t + 1) / K.
    scales = np.array([float(opts["choice_temperature"]) * (1.0 - (t + 1) / steps) for t in range(steps)], np.float32)

    class MaskedFused(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.inner = spec.module
            self.register_buffer("banned", torch.from_numpy(banned))
            self.register_buffer("counts", torch.from_numpy(counts))
            self.register_buffer("scales", torch.from_numpy(scales))

        def forward(self, *args):
            n_noise = 2 if sampled_mode else 0
            n_state = 2 if graph == "step" else 0
            noise, cond = args[n_state : n_state + n_noise], tuple(args[n_state + n_noise :])
            gumbel, choice_noise = noise if sampled_mode else (None, None)

            def logits_of(tokens):
                return guided((tokens,), cond) + self.banned

            def update(tokens, g, c, scale, mask_len):
                return _masked_update(
                    logits_of,
                    tokens,
                    g,
                    c,
                    scale,
                    mask_len,
                    mask_id=mask_id,
                    temperature=temperature,
                    spacing=int(opts.get("spacing", 0)),
                )

            if graph == "step":
                step = args[1]
                return update(
                    args[0],
                    gumbel,
                    choice_noise,
                    torch.index_select(self.scales, 0, step),
                    torch.index_select(self.counts, 0, step),
                )
            tokens = torch.full((b, seq_len), mask_id, dtype=torch.int64)
            for t in range(steps):  # unrolled by torch.export; every step calls the same weights
                g, c = (gumbel[t], choice_noise[t]) if sampled_mode else (None, None)
                mask_len = self.counts[t : t + 1] if t < steps - 1 else None
                tokens = update(tokens, g, c, self.scales[t : t + 1], mask_len)
            return tokens

    inputs = {"tokens": spec.inputs["tokens"], "step": TensorSpec((1,), "int64", 0, steps)} if graph == "step" else {}
    if sampled_mode:
        lead = () if graph == "step" else (steps,)
        inputs["gumbel"] = TensorSpec((*lead, b, seq_len, width), "float32", -2.0, 8.0)
        inputs["choice_noise"] = TensorSpec((*lead, b, seq_len), "float32", -2.0, 8.0)
    inputs |= {n: spec.inputs[n] for n in cond_names}
    outputs = {"tokens_out": TensorSpec((b, seq_len), "int64")}
    return MaskedFused().eval(), inputs, outputs


def fused_module(spec: ModelSpec, graph: str, opts: Mapping[str, Any]):
    """(torch module, inputs, outputs) of the fused ``graph`` for ``spec`` with decode ``opts`` baked.

    ``opts`` holds at least the baked options of ``BAKED[(spec.kind, graph)]``."""
    check_graph_kind(spec.kind, graph)
    if spec.kind == "flow":
        return _flow_module(spec, graph, opts)
    return _masked_module(spec, graph, opts)


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
