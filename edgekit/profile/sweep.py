"""The length sweep: architecture-only masked and AR models rebuilt at other lengths (random
weights: latency does not depend on them), exported and timed to locate the crossover."""

from __future__ import annotations

import dataclasses
import hashlib
import shutil
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from edgekit._deps import require
from edgekit._sidefiles import external_data_locations
from edgekit.bundle import Bundle
from edgekit.decode.dispatch import decode, decode_config
from edgekit.errors import EdgekitError, UsageError
from edgekit.export import ExportConfig, export_onnx
from edgekit.models import load_spec
from edgekit.profile.config import (
    SWEEPABLE,
    DecodeModel,
    ProfileConfig,
    ProgressFn,
    bundle_conditions,
    spec_conditions,
)
from edgekit.profile.measure import time_decodes
from edgekit.quantize import quantize_unbudgeted
from edgekit.runtimes.base import Runtime
from edgekit.runtimes.ort import OrtOptions, OrtRuntime
from edgekit.runtimes.recording import RecordingRuntime
from edgekit.runtimes.registry import FileOptions, backend, names
from edgekit.spec import TensorSpec, ar_cache_form

# ---- the length sweep ---------------------------------------------------------------------------
# Network calls of one fp32 decode recorded to calibrate an int8 sweep model (evenly spaced).
SWEEP_CALIBRATION_CALLS = 32


def length_variant_spec(source: str, length: int, batch: int) -> Any:
    """An architecture-only (random-init) ``ModelSpec`` of built-in ``source`` at sequence length
    ``length`` (masked: seq_len; ar: max_len) with graph batch ``batch``. Latency does not depend
    on the weights, so these time the architecture at lengths the trained model was not made for."""

    if source not in SWEEPABLE:
        raise UsageError(f"cannot rebuild model {source!r} at other lengths; valid: {', '.join(SWEEPABLE)}")
    spec = load_spec(source, batch=batch)
    if SWEEPABLE[source] == "masked":
        from edgekit.models.masked import MaskedTransformer  # lazy: torch

        mcfg = dataclasses.replace(spec.module.cfg, seq_len=length)
        v = mcfg.vocab_size
        return dataclasses.replace(
            spec,
            name=f"{spec.name}@L{length}",
            module=MaskedTransformer(mcfg).eval(),
            inputs={**spec.inputs, "tokens": TensorSpec((batch, length), "int64", 0, v + 1)},
            outputs={"logits": TensorSpec((batch, length, v), "float32")},
            meta=dict(spec.meta, seq_len=length),
            ground_truth=None,
        )
    from edgekit.models.ar import CausalTransformer, ar_io, ar_step  # lazy: torch

    acfg = dataclasses.replace(spec.module.model.cfg, max_len=length)
    form = ar_cache_form(spec.inputs, spec.outputs)  # the same cache form as the bundle's graph
    inputs, outputs = ar_io(acfg, batch, form)
    return dataclasses.replace(
        spec,
        name=f"{spec.name}@L{length}",
        module=ar_step(CausalTransformer(acfg), form),
        inputs={**spec.inputs, **inputs},
        outputs={**spec.outputs, **outputs},
        meta=dict(spec.meta, max_len=length),
        ground_truth=None,
    )


def _open_spec(
    spec: Any, runtime: str, cache: Path, threads: int, precision: str = "fp32", calibrate: Any = None
) -> Runtime:
    """A runtime for an architecture-only spec: the module itself on a runtime that runs modules
    (registry ``open_module``: torch), else its ONNX export (cached by name and batch) on one that
    runs exported graphs (``open_file`` with ``graph_precisions``: ort, openvino). ``precision``
    int8: the export quantized by ``quantize_unbudgeted``, calibrated on the feeds
    ``calibrate(fp32 runtime)`` records."""
    entry = backend(runtime)
    if entry.open_module is not None:
        return entry.open_module(spec.module, spec.inputs, spec.outputs)
    if entry.open_file is None or not entry.graph_precisions:
        raise UsageError(f"the length sweep runs on {', '.join(_sweep_runtimes())}, not {runtime!r}")

    # Keyed by the architecture (module repr lists every layer and size) and the IO: a cache kept
    # between runs never serves a graph of an older model definition.
    key = hashlib.sha256((repr(spec.module) + repr(sorted(spec.inputs.items()))).encode()).hexdigest()[:10]
    path = cache / f"{spec.name}-b{spec.batch}-{key}.onnx"
    if not path.is_file():
        staging = Path(tempfile.mkdtemp(prefix=".staging-", dir=cache))  # the graph and its weights file, if any
        try:
            for side in export_onnx(spec, staging / path.name, ExportConfig())["side_files"]:
                side.replace(cache / side.name)  # content-addressed: the graph names it
            (staging / path.name).replace(path)
        finally:
            shutil.rmtree(staging, ignore_errors=True)
    if precision == "int8":
        int8 = path.with_name(path.stem + "-int8.onnx")
        if not int8.is_file():
            with OrtRuntime(path, OrtOptions(intra_op_threads=threads)) as fp32:
                feeds = calibrate(fp32)
            staging = Path(tempfile.mkdtemp(prefix=".staging-", dir=cache))  # the graph and its weights file, if any
            try:
                quantize_unbudgeted(path, staging / int8.name, feeds)
                for side in external_data_locations(staging / int8.name):  # <name>.data: the graph names it
                    (staging / side).replace(cache / side)
                (staging / int8.name).replace(int8)
            finally:
                shutil.rmtree(staging, ignore_errors=True)
        path = int8
    return entry.open_file(path, FileOptions(precision, threads))


def _sweep_runtimes() -> list[str]:
    """Runtimes the sweep's architecture-only models run on: those that run exported graphs, then
    those that run the module."""
    return [n for n in names() if backend(n).graph_precisions] + [
        n for n in names() if backend(n).open_module is not None
    ]


def _exports(runtime: str) -> bool:
    """Whether the sweep exports its models to ONNX for ``runtime`` (it does not run the module)."""
    return backend(runtime).open_module is None


def length_sweep(
    bundle: Bundle,
    ar: Bundle,
    runtime: str,
    nar_steps: int,
    rows: int,
    lengths: Sequence[int],
    cfg: ProfileConfig,
    progress: ProgressFn | None = None,
) -> dict[str, Any]:
    """Median decode times of the NAR model (``nar_steps`` steps over N tokens) and the AR model
    (N tokens) at each length N of ``lengths``, from architecture-only fp32 models of the two
    bundles' built-in architectures on ``runtime`` (ort: exported to ONNX; torch: eager).

    Returns {"available", "points": [{"length", "nar_decode_ms", "ar_decode_ms", ...}], "how",
    "notes"} or {"available": False, "reason"} when the sweep cannot run here."""
    lengths = sorted(set(lengths))
    if not lengths:
        return {"available": False, "reason": "no sweep lengths besides the bundle's own", "points": []}
    sources = (bundle.source, ar.source)
    if sources[0] not in SWEEPABLE or sources[1] not in SWEEPABLE:
        return {
            "available": False,
            "reason": f"the sweep rebuilds the built-in architectures ({', '.join(SWEEPABLE)}) only; "
            f"these bundles come from {list(sources)}",
            "points": [],
        }
    if runtime not in _sweep_runtimes():
        return {
            "available": False,
            "reason": f"the sweep runs on {', '.join(_sweep_runtimes())}, not {runtime}",
            "points": [],
        }
    if cfg.sweep_precision == "int8" and not _exports(runtime):
        return {
            "available": False,
            "reason": f"--sweep-precision int8 quantizes for ort and openvino; the sweep here runs on {runtime}",
            "points": [],
        }
    try:
        require("torch")
        if _exports(runtime):
            require("onnxscript")
    except EdgekitError as exc:
        return {"available": False, "reason": f"the sweep builds models with torch: {exc}", "points": []}
    how = (
        "architecture-only models (random weights: latency does not depend on them) of the bundles' "
        f"architectures at each length, {'exported to ONNX and ' if _exports(runtime) else ''}decoded on "
        f"{runtime} {cfg.sweep_precision} with K={nar_steps} NAR steps and N AR tokens"
        + (
            (
                " (int8: cpu-profile QDQ of every weighted node, no budget, calibrated on one recorded fp32 "
                f"decode, at most {SWEEP_CALIBRATION_CALLS} evenly spaced calls)"
            )
            if cfg.sweep_precision == "int8"
            else ""
        )
    )
    known = {**bundle_conditions(bundle, rows, cfg.seed, cfg.cond), **bundle_conditions(ar, rows, cfg.seed, cfg.cond)}
    points = []
    with _cache_dir(cfg.sweep_cache) as cache:
        for n in lengths:
            point: dict[str, Any] = {"length": n, "source": "architecture-only"}
            for role, b in (("nar", bundle), ("ar", ar)):
                label = f"sweep L={n} {role.upper()}"
                if progress:
                    progress(label, 0, 0)
                spec = length_variant_spec(b.source, n, b.batch)
                model = DecodeModel(b.kind, dict(spec.meta), b.decode_defaults)
                opts = {"steps": nar_steps} if role == "nar" else {"length": n}
                dcfg = decode_config(b.kind, model.decode_defaults, opts, seed=cfg.seed)
                spec_cond = spec_conditions(spec, known, rows)

                # At most ~SWEEP_CALIBRATION_CALLS recorded calls: an AR step's feeds hold its KV
                # cache (a 1024-token decode recorded whole took 24 GiB); these int8 models time
                # kernels, so evenly spaced calls calibrate them well enough.
                calls = nar_steps if role == "nar" else n
                every = -(-calls // SWEEP_CALIBRATION_CALLS)

                def record(
                    fp32: Runtime, model=model, spec_cond=spec_cond, dcfg=dcfg, every=every
                ) -> list[dict[str, np.ndarray]]:
                    recorder = RecordingRuntime(fp32, model.kind, model.meta, every=every)
                    decode(model.kind, recorder, model.meta, spec_cond, dcfg)
                    return recorder.feeds

                with _open_spec(spec, runtime, cache, cfg.threads, cfg.sweep_precision, record) as rt:
                    doc = time_decodes(model, rt, spec_cond, dcfg, cfg.sweep_measure, label, progress)
                point[f"{role}_decode_ms"] = doc["latency"]["median_ms"]
                point[f"{role}_latency"] = doc["latency"]
            points.append(point)
    return {"available": True, "how": how, "lengths": lengths, "notes": [], "points": points}


class _cache_dir:
    """``path`` (created) or a temp dir removed on exit."""

    def __init__(self, path: Path | None):
        self.path, self.tmp = path, None

    def __enter__(self) -> Path:
        if self.path is not None:
            Path(self.path).mkdir(parents=True, exist_ok=True)
            return Path(self.path)
        self.tmp = Path(tempfile.mkdtemp(prefix="edgekit-sweep-"))
        return self.tmp

    def __exit__(self, *exc: object) -> None:
        if self.tmp is not None:
            shutil.rmtree(self.tmp, ignore_errors=True)
