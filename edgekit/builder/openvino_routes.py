"""Which form of the model `edgekit build` ships for an OpenVINO target, measured on this host.

Three routes from the same source ONNX (the bundle's QDQ INT8 model, or its FP32 one):

- ``onnx``: the ONNX compiled by the CPU plugin, shipped as OpenVINO's ``export_model`` blob
  (what `build` always shipped; it imports without compiling, into this OpenVINO release only);
- ``ir``: the OpenVINO IR ``ov.save_model`` writes from it (``.xml`` + ``.bin``; read by this
  release and later ones, compiled where it runs);
- ``ir-fp16``: the same with its float weights stored in f16 (``compress_to_fp16``; OpenVINO
  ignores that for a quantized model, so for INT8 it is byte for byte ``ir`` and is not timed
  twice: ``same_as``);
- ``ir-hoisted``: the IR of the source with each activation's Q/DQ moved ahead of the Reshape
  between it and the op that computes the activation (``builder.openvino_qdq``: the same values
  bit for bit, a graph OpenVINO fuses further); ``same_as`` ``ir`` where there is nothing to move
  (an FP32 model, a QDQ model without those Reshapes).

Each route is compiled with the target's settings and fed the same recorded feeds (one decode of
one graph batch through the ``onnx`` route; ``route_feeds``). It is judged per forward against the
source (``onnx``) and the FP32 model (``route_accuracy``): kept when the noise it adds to the
source's outputs is at most a tenth of the noise the source already carries against FP32
(``ROUTE_NOISE_DB`` below it, so the SNR against FP32 drops by at most 0.41 dB), or when it matches
the source to ``FLOAT_MATCH_DB`` (float rounding; an FP32 source has no noise of its own). The
kept routes are timed interleaved (``measure_routes``: per-route samples, ms per forward), and the
fastest by median is shipped (``choose_route``); a route other than ``onnx`` only when it is
``ROUTE_MARGIN`` faster, so noise between two routes that compile to the same kernels does not
flip the engine from build to build.
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from edgekit._sidefiles import model_bytes, side_files_beside
from edgekit.builder.openvino_qdq import write_hoisted
from edgekit.bundle import Bundle, sha256_file
from edgekit.decode.dispatch import decode, decode_config
from edgekit.errors import EdgekitError
from edgekit.evaluate import conditions, snr_db, stored_rows
from edgekit.probes.latency import interleaved
from edgekit.runtimes.base import Runtime
from edgekit.runtimes.openvino import OpenVinoRuntime, OvOptions
from edgekit.runtimes.openvino_ir import IR_ROUTES, exec_precisions, save_ir
from edgekit.runtimes.recording import RecordingRuntime

# The route `build` shipped before routes were compared, and keeps on a tie.
DEFAULT_ROUTE = "onnx"
# The IR of the source with its activation Q/DQ moved next to their producers (builder.openvino_qdq).
HOISTED_ROUTE = "ir-hoisted"
ROUTES: tuple[str, ...] = (DEFAULT_ROUTE, *IR_ROUTES, HOISTED_ROUTE)
# Another route replaces the default only this much faster (the IR and the blob compile to the
# same kernels on the demo models: their medians differed by noise, 0.3-2.3 % in the builds here).
ROUTE_MARGIN = 0.03
# A route may add noise at most this far below the noise the source carries against FP32.
ROUTE_NOISE_DB = 10.0
# ... or match the source to this SNR: a relative RMS error of 0.1 %, float rounding (the IRs of
# the QDQ demo models matched their ONNX to 58-75 dB; FP32 with f16-stored weights matched FP32 to 67-73 dB).
FLOAT_MATCH_DB = 60.0
# SNRs are finite in the manifest (an exact match is ~300 dB, not inf).
_SNR_FLOOR = 1e-30
# Feeds judged per route (evenly spaced over the decode's calls) and the recording's bound.
MAX_FEEDS = 16
FEED_BYTES = 64 << 20
# Timing: a few forwards back to back per timed call (a decode's steady state), rounds sized to
# about ROUTE_SECONDS in all, within [MIN_ROUNDS, MAX_ROUNDS].
CALL_MS = 20.0
MAX_BURST = 5
ROUTE_SECONDS = 6.0
MIN_ROUNDS = 5
MAX_ROUNDS = 15
# Idle seconds before each timed call: OpenVINO's CPU threads spin about 1 ms of CPU after a run,
# then sleep (measured on the masked demo, OpenVINO 2026.4), so 10 ms keeps one route's spinning
# threads off the next route's cores.
OV_SPIN_GAP_S = 0.01
# Comparing routes holds every route compiled at once (2-3 copies of the weights) and writes two
# IRs beside the source: above this, build ships the blob (what it did before routes existed) and
# the record says why (a 600 M-parameter model would need ~7 GB more to compare them).
ROUTES_MAX_BYTES = 1 << 30


@dataclass(frozen=True)
class RouteFiles:
    """One route's model as written in the build's scratch folder."""

    name: str
    model: Path  # what OpenVINO compiles: the source ONNX, or the IR's .xml
    files: dict[str, Path] = field(default_factory=dict)  # engine role -> file shipped as is ({} for the blob)
    same_as: str | None = None  # another route whose files are byte for byte these
    note: str | None = None


def write_routes(
    model_path: Path, workdir: Path, for_cpu: bool = False
) -> tuple[dict[str, RouteFiles], dict[str, str]]:
    """({route: its files}, {route: why it could not be written}) of ``model_path``; ``for_cpu``:
    the IRs are for a CPU (``save_ir``)."""
    routes = {DEFAULT_ROUTE: RouteFiles(DEFAULT_ROUTE, model_path)}
    unavailable: dict[str, str] = {}
    digests: dict[str, str] = {}
    for name, fp16 in IR_ROUTES.items():
        folder = workdir / name
        folder.mkdir(parents=True, exist_ok=True)
        try:
            xml, weights = save_ir(model_path, folder / "model.xml", fp16, for_cpu)
        except EdgekitError as exc:
            unavailable[name] = str(exc)
            continue
        # Only the weights can differ between the two (the .xml's generated node names differ
        # from one conversion to the next even for one model): the same .bin is the same model.
        digest = sha256_file(weights)
        same = digests.get(digest)
        note = f"the same files as {same}: OpenVINO ignores compress_to_fp16 for a quantized model" if same else None
        routes[name] = RouteFiles(name, xml, {"model": xml, "weights": weights}, same_as=same, note=note)
        digests.setdefault(digest, name)
    hoisted = _write_hoisted(model_path, workdir / HOISTED_ROUTE, routes.get("ir"), for_cpu)
    if isinstance(hoisted, str):
        unavailable[HOISTED_ROUTE] = hoisted
    else:
        routes[HOISTED_ROUTE] = hoisted
    return routes, unavailable


def _write_hoisted(model_path: Path, folder: Path, ir: RouteFiles | None, for_cpu: bool) -> RouteFiles | str:
    """The ``ir-hoisted`` route of ``model_path`` (``same_as`` ``ir`` where nothing moves), or
    why it could not be written."""
    folder.mkdir(parents=True, exist_ok=True)
    rewritten = folder / "model.onnx"
    try:
        moved = write_hoisted(model_path, rewritten)
    except EdgekitError as exc:
        return str(exc)
    if not moved:
        if ir is None:
            return "no activation Q/DQ behind a Reshape to move, and the ir route could not be written"
        return RouteFiles(
            HOISTED_ROUTE, ir.model, ir.files, same_as="ir", note="no activation Q/DQ behind a Reshape to move"
        )
    try:
        with side_files_beside(model_path, folder):  # the rewritten graph reads the source's side file
            xml, weights = save_ir(rewritten, folder / "model.xml", False, for_cpu)
    except EdgekitError as exc:
        return str(exc)
    finally:
        rewritten.unlink(missing_ok=True)
    note = f"{len(moved)} activation Q/DQ pair{'s' if len(moved) > 1 else ''} moved ahead of a Reshape"
    return RouteFiles(HOISTED_ROUTE, xml, {"model": xml, "weights": weights}, note=note)


def route_feeds(bundle: Bundle, runtime: Runtime, seed: int = 0) -> tuple[list[dict[str, np.ndarray]], str]:
    """(the feeds of one decode of one graph batch through ``runtime``, at most ``MAX_FEEDS``
    evenly spaced, how they were made). Conditions as `check` draws them (quantize's held-out
    rows where the bundle keeps them); raises what the decode raises."""
    batch = bundle.batch
    rows = stored_rows(bundle)
    part = None if rows is None else {k: v[:batch] for k, v in rows.items()}
    cond = conditions(bundle, {}, batch, seed, rows=part, draw=True)
    recorder = RecordingRuntime(runtime, bundle.kind, bundle.meta, max_bytes=FEED_BYTES)
    decode(bundle.kind, recorder, bundle.meta, cond, decode_config(bundle.kind, bundle.decode_defaults, {}, seed=seed))
    feeds = recorder.feeds
    if len(feeds) > MAX_FEEDS:
        feeds = [feeds[int(i)] for i in np.linspace(0, len(feeds) - 1, MAX_FEEDS).round()]
    return feeds, f"{len(feeds)} calls of one decode ({batch} rows, seed {seed})"


def _snr(reference: Sequence[Mapping[str, np.ndarray]], candidate: Sequence[Mapping[str, np.ndarray]]) -> float:
    """The lowest, over output names, SNR (dB) of every call's output against the reference's."""
    names = list(reference[0])
    return min(
        snr_db(
            np.concatenate([r[n].ravel() for r in reference]),
            np.concatenate([c[n].ravel() for c in candidate]),
            floor=_SNR_FLOOR,
        )
        for n in names
    )


def route_accuracy(
    outputs: Mapping[str, Sequence[Mapping[str, np.ndarray]]],
    fp32: Sequence[Mapping[str, np.ndarray]] | None,
    source: str = DEFAULT_ROUTE,
) -> tuple[dict[str, dict[str, Any]], float]:
    """({route: snr_vs_source_db, snr_vs_fp32_db, kept, why}, the SNR against the source a route
    needs) of each route's outputs on the same feeds. ``fp32``: the FP32 model's outputs on them,
    None when the source is the FP32 model itself (its own reference)."""
    src = outputs[source]
    source_noise = _snr(fp32, src) if fp32 is not None else math.inf
    required = min(source_noise + ROUTE_NOISE_DB, FLOAT_MATCH_DB)
    table: dict[str, dict[str, Any]] = {}
    for name, outs in outputs.items():
        vs_source = _snr(src, outs)
        vs_fp32 = _snr(fp32, outs) if fp32 is not None else vs_source
        kept = name == source or vs_source >= required
        if name == source:
            why = "the source model as the plugin compiles it (the reference of the others)"
        elif kept:
            why = f"matches the source to {vs_source:.1f} dB (needs {required:.1f})"
        else:
            why = (
                f"adds noise at {vs_source:.1f} dB to the source's outputs (needs {required:.1f}: "
                f"a tenth of the source's own against FP32, or {FLOAT_MATCH_DB:.0f} dB)"
            )
        table[name] = {
            "snr_vs_source_db": round(vs_source, 2),
            "snr_vs_fp32_db": round(vs_fp32, 2),
            "kept": kept,
            "why": why,
        }
    return table, round(required, 2)


def measure_routes(
    runtimes: Mapping[str, Runtime],
    feeds: Mapping[str, np.ndarray],
    *,
    rounds: int | None = None,
    burst: int | None = None,
) -> dict[str, list[float]]:
    """{route: ms per forward of each timed call} of every runtime on the same ``feeds``,
    interleaved (``probes.latency.interleaved``: load that comes and goes hits every route
    alike); ``burst`` forwards back to back per call, ``rounds`` calls each. None: sized from one
    round of single forwards, whose times are not kept (``CALL_MS`` per call, about
    ``ROUTE_SECONDS`` in all)."""

    def forwards(runtime: Runtime, n: int):
        def call() -> None:
            for _ in range(n):
                runtime.run(feeds)

        return call

    if rounds is None or burst is None:
        first = interleaved({k: forwards(rt, 1) for k, rt in runtimes.items()}, 1, warmup=1, gap_s=OV_SPIN_GAP_S)
        slowest = max(v[0] for v in first.values())
        burst = burst or max(1, min(MAX_BURST, math.ceil(CALL_MS / max(slowest, 1e-3))))
        per_round_s = sum(v[0] for v in first.values()) * burst / 1e3
        rounds = rounds or max(MIN_ROUNDS, min(MAX_ROUNDS, int(ROUTE_SECONDS / max(per_round_s, 1e-6))))
    samples = interleaved({k: forwards(rt, burst) for k, rt in runtimes.items()}, rounds, warmup=1, gap_s=OV_SPIN_GAP_S)
    return {k: [ms / burst for ms in v] for k, v in samples.items()}


def choose_route(
    samples: Mapping[str, Sequence[float]],
    kept: Mapping[str, bool],
    default: str = DEFAULT_ROUTE,
    margin: float = ROUTE_MARGIN,
) -> tuple[str, str]:
    """(the route to ship, why) from per-route samples (ms per forward, sample i of every route
    from the same interleaved round) and which routes kept the budget: the fastest kept one by
    median; another than ``default`` only when the median of its per-round speedup over
    ``default`` (load that shifts between rounds cancels in a round's ratio) is ``margin``."""
    medians = {k: float(np.median(v)) for k, v in samples.items() if kept.get(k) and len(v)}
    if default not in medians:
        raise ValueError(f"choose_route: the default route {default!r} has no samples or did not keep the budget")
    skipped = sorted(k for k in samples if not kept.get(k))
    tail = f"; {', '.join(skipped)} failed the budget" if skipped else ""
    best = min(medians, key=lambda k: (medians[k], k != default))
    if best == default:
        return default, f"{default} was the fastest ({medians[default]:.3f} ms per forward){tail}"
    ours, theirs = np.asarray(samples[default], float), np.asarray(samples[best], float)
    paired = ours.size == theirs.size and bool(np.all(theirs > 0))
    gain = float(np.median(ours / theirs)) - 1 if paired else medians[default] / medians[best] - 1
    if gain < margin:
        return default, (
            f"{best} was {gain:.1%} faster than {default} ({medians[best]:.3f} vs {medians[default]:.3f} ms), "
            f"under the {margin:.0%} a switch needs: {default} kept{tail}"
        )
    return best, f"{best} was {gain:.1%} faster than {default} ({medians[best]:.3f} vs {medians[default]:.3f} ms){tail}"


def _copies(runtime: Runtime, feeds: Sequence[Mapping[str, np.ndarray]]) -> list[dict[str, np.ndarray]]:
    return [{k: np.array(v, copy=True) for k, v in runtime.run(f).items()} for f in feeds]


def select_route(
    model_path: Path, bundle: Bundle, options: OvOptions, precision: str, workdir: Path
) -> tuple[RouteFiles, dict[str, Any]]:
    """(the route to ship, the engine entry's ``route`` record) for ``model_path`` (the build's
    source, shapes fixed) compiled with ``options``: written, judged and timed as the module says.
    Where the decode that records the feeds cannot run here, the default route is shipped and the
    record says why nothing was compared; so it is above ``ROUTES_MAX_BYTES`` of weights."""
    size = model_bytes(model_path)
    if size > ROUTES_MAX_BYTES:
        why = (
            f"routes not compared: {model_path.name} weighs {size / 2**30:.2f} GiB, over "
            f"{ROUTES_MAX_BYTES / 2**30:g} GiB (comparing holds every route compiled at once)"
        )
        return RouteFiles(DEFAULT_ROUTE, model_path), {
            "shipped": DEFAULT_ROUTE,
            "format": "blob",
            "why": why,
            "routes": {},
        }
    routes, unavailable = write_routes(model_path, workdir, options.device.split(".")[0] == "CPU")
    timed = {name: r for name, r in routes.items() if r.same_as is None}
    opened: dict[str, OpenVinoRuntime] = {}
    record: dict[str, Any] = {"routes": {}}
    try:
        opened[DEFAULT_ROUTE] = OpenVinoRuntime(model_path, options)
        try:
            feeds, how = route_feeds(bundle, opened[DEFAULT_ROUTE])
        except EdgekitError as exc:
            why = f"routes not compared: one decode to record feeds failed ({str(exc)[:200]})"
            return routes[DEFAULT_ROUTE], {"shipped": DEFAULT_ROUTE, "format": "blob", "why": why, "routes": {}}
        fp32 = None
        if precision != "fp32":  # the reference: the FP32 model in f32 on the CPU (every device has one)
            with OpenVinoRuntime(
                bundle.path_of("fp32"), OvOptions(inference_precision="f32", double_buffer=False)
            ) as reference:
                fp32 = _copies(reference, feeds)
        for name, r in timed.items():
            if name not in opened:
                opened[name] = OpenVinoRuntime(r.model, options, source_onnx=model_path)
        outputs = {name: _copies(rt, feeds) for name, rt in opened.items()}
        accuracy, required = route_accuracy(outputs, fp32)
        load_before = os.getloadavg()
        samples = measure_routes(opened, feeds[len(feeds) // 2])
        load_after = os.getloadavg()
        chosen, why = choose_route(samples, {k: bool(a["kept"]) for k, a in accuracy.items()})
        for name, rt in opened.items():
            ms = np.asarray(samples[name])
            record["routes"][name] = {
                "median_ms": round(float(np.median(ms)), 4),
                "p25_ms": round(float(np.percentile(ms, 25)), 4),
                "p75_ms": round(float(np.percentile(ms, 75)), 4),
                "samples": int(ms.size),
                **accuracy[name],
                "exec": exec_precisions(rt.compiled),
                **({"note": routes[name].note} if routes[name].note else {}),
            }
    finally:
        for rt in opened.values():
            rt.close()
    for name, r in routes.items():
        if r.same_as is not None:
            record["routes"][name] = {"same_as": r.same_as, "note": r.note}
    for name, reason in unavailable.items():
        record["routes"][name] = {"unavailable": reason}
    record.update(
        {
            "shipped": chosen,
            "format": "blob" if chosen == DEFAULT_ROUTE else "ir",
            "why": why,
            "feeds": how,
            "required_snr_vs_source_db": required,
            "load_average": {"before": round(load_before[0], 2), "after": round(load_after[0], 2)},
        }
    )
    return routes[chosen], record


__all__ = [
    "DEFAULT_ROUTE",
    "HOISTED_ROUTE",
    "ROUTES",
    "RouteFiles",
    "choose_route",
    "measure_routes",
    "route_accuracy",
    "route_feeds",
    "select_route",
    "write_routes",
]
