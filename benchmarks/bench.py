"""The speed ratios the README quotes, measured in one run on this host:

    python benchmarks/bench.py [--out benchmarks/results/bench.json] [--bundles edgekit-demo]

INT8/FP32 on ONNX Runtime, ONNX Runtime / torch eager, NAR (MaskGIT) / AR at L=256, the host
overhead share of a decode and p99/p50, all from ``edgekit.profile`` (same probes, same decode
loops as ``edgekit profile``). Without --bundles the demo models are exported (batch 8) and
quantized into a temp dir. A figure that cannot be measured here (no int8 artifact because the
quantize stage failed, no torch) is printed and saved as "not measured" with the reason, never as
a number. L=256 uses architecture-only models (random weights: latency does not depend on them).
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from edgekit.bundle import Bundle, now_iso
from edgekit.output import Output
from edgekit.probes.latency import MeasureConfig
from edgekit.probes.system import system_state
from edgekit.profile import ProfileConfig, crossover_lines, profile_bundle, write_json

sys.path.insert(0, str(Path(__file__).resolve().parent))
import fast_paths  # noqa: E402 - the sibling module, run as a script from any directory
import openvino_rows  # noqa: E402 - the sibling module: issue #17's OpenVINO rows


def _say(message: str) -> None:
    print(f"· {message}", file=sys.stderr, flush=True)


def _progress(label: str, done: int, total: int) -> None:
    if total == 0:
        _say(label)


def _bundles(args: argparse.Namespace, tmp: Path) -> tuple[Path, Path, Path | None, dict[str, Any]]:
    """The masked, AR and flow bundles (copies in ``tmp``: the fused graphs are added to them),
    and how the int8 artifact came to be (or why there is none)."""
    if args.bundles is not None:
        for name in ("masked", "ar", "flow"):
            if (args.bundles / name).is_dir():
                shutil.copytree(args.bundles / name, tmp / name)
        masked, ar = tmp / "masked", tmp / "ar"
        flow = tmp / "flow" if (tmp / "flow").is_dir() else None
        has = "int8" in Bundle.load(masked).manifest["artifacts"]
        why = (
            None
            if has
            else f"{args.bundles / 'masked'} has no int8 artifact (run `edgekit quantize {args.bundles / 'masked'}`)"
        )
        return masked, ar, flow, {"int8": has, "source": str(args.bundles / "masked"), "reason": why}
    from edgekit.export.to_bundle import export_bundle
    from edgekit.models import load_spec

    for name, batch in (("masked-demo", args.batch), ("ar-demo", args.batch), ("flow-demo", args.flow_batch)):
        _say(f"export {name} (batch {batch})")
        export_bundle(load_spec(name, batch=batch), tmp / name.removesuffix("-demo"), source=name)
    masked, ar, flow = tmp / "masked", tmp / "ar", tmp / "flow"
    return masked, ar, flow, _quantize(masked)


def _fused(path: Path) -> tuple[str, ...]:
    """Add the fused step and unrolled graphs (bundle decode defaults baked); the ones made."""
    from edgekit.export.fused import fused_bundle

    for graph in ("step", "unrolled"):
        _say(f"export the fused {graph} graph of {path.name}")
        fused_bundle(path, graph)
    return ("step", "unrolled")


def _attempt(what: str, fn: Any) -> tuple[Any, str | None]:
    """(fn(), None), or (None, the reason) when it fails: a row then says "not measured" and why."""
    try:
        return fn(), None
    except Exception as exc:  # noqa: BLE001 - any failure becomes the row's reason, never a number
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
        _say(f"{what}: not measured ({type(exc).__name__}: {first[:200]})")
        return None, f"{what} failed: {type(exc).__name__}: {first}"[:400]


def _quantize(masked: Path) -> dict[str, Any]:
    _say("quantize masked-demo (edgekit.quantize, default profile)")

    def run() -> Any:
        from edgekit.quantize import quantize_bundle

        return quantize_bundle(masked)

    start = time.perf_counter()
    summary, why = _attempt("quantize stage", run)
    if why is not None:
        return {"int8": False, "reason": why}
    return {
        "int8": "int8" in Bundle.load(masked).manifest["artifacts"],
        "passed_budget": summary.get("passed") if isinstance(summary, dict) else None,
        "seconds": time.perf_counter() - start,
        "reason": None,
    }


def _number(name: str, value: float | None, meaning: str, reason: str | None = None, **extra: Any) -> dict[str, Any]:
    doc = {"name": name, "value": value, "meaning": meaning, "measured": value is not None}
    if value is None:
        doc["reason"] = reason or "not measured"
    return doc | extra


def _ratio_of(doc: dict[str, Any], name: str) -> dict[str, Any] | None:
    return next((r for r in doc["ratios"] if r["name"] == name), None)


def collect(
    variants_doc: dict[str, Any], ar_doc: dict[str, Any], quant: dict[str, Any], length: int
) -> list[dict[str, Any]]:
    """The quoted numbers from the two profile documents."""
    out = []
    r = _ratio_of(variants_doc, "int8/fp32 (ort)")
    out.append(
        _number(
            "INT8/FP32 latency (ORT)",
            r and r["median_latency"],
            "median decode ms int8 / fp32 (< 1: int8 faster)",
            quant.get("reason"),
            speedup=r and r["speedup"],
            model_size=r and r["model_bytes"],
        )
    )
    r = _ratio_of(variants_doc, "ort/torch (fp32)")
    out.append(
        _number(
            "ORT/torch eager latency (fp32)",
            r and r["median_latency"],
            "median decode ms ORT / torch eager",
            "torch runtime not measured",
            speedup=r and r["speedup"],
        )
    )
    cross = (ar_doc.get("compare_ar") or {}).get("crossover") or {}
    at = next((p for p in cross.get("points", []) if p["length"] == length), None)
    sweep = cross.get("sweep") or {}
    out.append(
        _number(
            f"NAR/AR latency at L={length} (ORT fp32)",
            at and at["nar_decode_ms"] / at["ar_decode_ms"],
            f"median decode ms MaskGIT K={cross.get('nar_steps')} / AR {length} tokens (architecture-only models)",
            sweep.get("reason") or "the length sweep did not run",
            speedup=at and at["speedup"],
            nar_ms=at and at["nar_decode_ms"],
            ar_ms=at and at["ar_decode_ms"],
        )
    )
    for s in (ar_doc.get("compare_ar") or {}).get("speedups", []):
        own = ar_doc["compare_ar"]["length"]
        out.append(
            _number(
                f"NAR/AR latency at L={own} (trained demo, {s['nar']})",
                s["nar_median_ms"] / s["ar_median_ms"] if s.get("speedup") else None,
                "median decode ms masked-demo / ar-demo",
                s.get("reason"),
                speedup=s.get("speedup"),
            )
        )
    for v in variants_doc["variants"]:
        out.append(
            _number(
                f"host overhead share ({v['id']})",
                v["breakdown"]["host_overhead_share"],
                "host time (sampling, scheduling, copies) / decode time",
            )
        )
    for v in variants_doc["variants"]:
        out.append(
            _number(
                f"p99/p50 ({v['id']})",
                v["latency"]["p99_ms"] / v["latency"]["median_ms"],
                f"tail over median decode latency, n={v['latency']['n']}",
            )
        )
    return out


def _fast_paths(
    args: argparse.Namespace, masked: Path, ar: Path, flow: Path | None, quant: dict[str, Any]
) -> dict[str, Any]:
    """Issue #8's rows: INT8 per forward with its op profile, fused/host, RSS growth, sizes, NFE to 30 dB."""
    threads = args.threads or 1
    out: dict[str, Any] = {"threads": threads}
    if quant["int8"]:
        _say(f"INT8 vs FP32 per forward ({args.forward_iters} interleaved, {threads} thread) + ORT op profile")
        out["int8_forward"], out["int8_forward_reason"] = _attempt(
            "int8 forward", lambda: fast_paths.int8_forward(masked, threads, args.forward_iters)
        )
        arts = Bundle.load(masked).manifest["artifacts"]
        out["sizes"] = {"fp32_bytes": arts["fp32"]["bytes"], "int8_bytes": arts["int8"]["bytes"]}
    else:
        out["int8_forward_reason"] = quant.get("reason")
    graphs, why = _attempt("fused export (masked)", lambda: _fused(masked))
    if graphs:
        _say(f"masked decode: host loop vs fused graphs, {args.fused_iters} interleaved rounds")
        out["fused_masked"], why = _attempt(
            "fused vs host (masked)", lambda: fast_paths.fused_vs_host(masked, graphs, threads, args.fused_iters)
        )
    out["fused_masked_reason"] = why
    if flow is not None:
        graphs, why = _attempt("fused export (flow)", lambda: _fused(flow))
        if graphs:
            _say(f"flow decode: host loop vs fused graphs, {args.fused_iters} interleaved rounds")
            out["fused_flow"], why = _attempt(
                "fused vs host (flow)", lambda: fast_paths.fused_vs_host(flow, graphs, threads, args.fused_iters)
            )
        out["fused_flow_reason"] = why
        _say(f"flow NFE to {args.snr_target:g} dB vs the 128-NFE RK4 reference, every solver and time grid")
        out["nfe_to_snr"], out["nfe_to_snr_reason"] = _attempt(
            "NFE to SNR",
            lambda: fast_paths.nfe_to_snr(
                flow, args.snr_target, (("uniform", None), ("cosine", None), ("sway", -1.0), ("sway", 1.0))
            ),
        )
    else:
        out["fused_flow_reason"] = out["nfe_to_snr_reason"] = (
            "no flow bundle (pass --bundles with a flow/ bundle, or omit --bundles)"
        )
    _say(f"NAR (K=8) vs AR at L={args.length}, architecture-only models quantized INT8 (cpu profile, no budget)")
    out["nar_ar_int8"], out["nar_ar_int8_reason"] = _attempt(
        "NAR/AR int8", lambda: fast_paths.nar_ar_at(masked, ar, args.length, "int8", threads, args.sweep_iters)
    )
    precision = "int8" if quant["int8"] else "fp32"
    _say(f"RSS over {args.rss_decodes} masked {precision} decodes after 100 warm-up decodes")
    out["rss"], out["rss_reason"] = _attempt(
        "RSS growth", lambda: fast_paths.rss_growth(masked, precision, args.rss_decodes, threads)
    )
    return out


def fast_numbers(
    fast: dict[str, Any], ar_doc: dict[str, Any], masked_sizes: dict[str, Any] | None
) -> list[dict[str, Any]]:
    """The quoted fast-path numbers from ``_fast_paths``'s document."""
    out = []
    f = fast.get("int8_forward")
    out.append(
        _number(
            f"INT8/FP32 forward speedup ({fast['threads']} thread)",
            f and f["speedup"],
            "median FP32 forward ms / INT8 forward ms, masked demo (goal >= 2.5)",
            fast.get("int8_forward_reason"),
            fp32_ms=f and f["fp32_ms"],
            int8_ms=f and f["int8_ms"],
        )
    )
    if f:
        top = ", ".join(f"{o['op']} {100 * o['share']:.0f}%" for o in f["profile"]["int8"]["ops"][:6])
        out.append(
            _number(
                "INT8 weighted-op speedup",
                f["weighted_speedup"],
                "FP32 / INT8 kernel ms of the weighted ops (Gemm/QGemm/MatMulNBits/Conv)",
                None,
            )
        )
        out.append(
            _number(
                "INT8 bound if weighted ops cost 0",
                f["amdahl_bound"],
                f"FP32 kernel ms / INT8 non-weighted kernel ms; INT8 time by op: {top}",
                None,
            )
        )
    if masked_sizes:
        out.append(
            _number(
                "INT8/FP32 size",
                masked_sizes["int8_bytes"] / masked_sizes["fp32_bytes"],
                f"int8 {masked_sizes['int8_bytes']} B / fp32 {masked_sizes['fp32_bytes']} B (goal <= 0.3)",
            )
        )
    for kind in ("masked", "flow"):
        d = fast.get(f"fused_{kind}")
        for graph in ("step", "unrolled"):
            out.append(
                _number(
                    f"fused {graph}/host ({kind})",
                    d and d["speedup_vs_host"].get(graph),
                    (
                        f"median decode ms host loop / fused {graph} graph, "
                        f"ORT fp32, batch {d and d['batch']} (goal >= 1.15)"
                    ),
                    fast.get(f"fused_{kind}_reason"),
                )
            )
    for kind in ("masked", "flow"):
        d = fast.get(f"fused_{kind}")
        for path in ("host", "step", "unrolled"):
            out.append(
                _number(
                    f"host overhead share ({kind}, {path} loop)"
                    if path == "host"
                    else f"host overhead share ({kind}, fused {path})",
                    d and d["host_share"].get(path),
                    "decode time outside Runtime.run / decode time, ORT fp32, 1 thread (goal <= 0.02)",
                    fast.get(f"fused_{kind}_reason"),
                )
            )
    d = fast.get("nar_ar_int8")
    out.append(
        _number(
            f"NAR/AR speedup at L={d['length'] if d else '?'} (ORT int8, {fast['threads']} thread)",
            d and d["speedup"],
            (
                f"AR decode ms / MaskGIT K={d and d['nar_steps']} decode "
                "ms, architecture-only models, both INT8 (goal >= 4)"
            ),
            fast.get("nar_ar_int8_reason"),
            nar_ms=d and d["nar_ms"],
            ar_ms=d and d["ar_ms"],
        )
    )
    r = fast.get("rss")
    out.append(
        _number(
            f"RSS growth over {r['decodes'] if r else '?'} decodes (MiB)",
            None if not r or r["growth_bytes"] is None else r["growth_bytes"] / 2**20,
            (
                f"RSS after the decodes minus RSS after {r['warmup'] if r else '?'} "
                "warm-up decodes, masked host loop (goal < 1 MiB)"
            ),
            (r or {}).get("reason") or fast.get("rss_reason"),
        )
    )
    q = fast.get("nfe_to_snr")
    for row in (q or {}).get("rows", []):
        out.append(
            _number(
                f"NFE to {q['target_db']:g} dB ({row['solver']}, {row['grid']})",
                row["nfe"],
                "fewest NFE reaching the SNR vs the 128-NFE RK4 reference (goal <= 8)",
                f"not reached up to {row['max_nfe']} NFE (best {row['best_snr_db']:.1f} dB at {row['best_nfe']})",
            )
        )
    cross = (ar_doc.get("compare_ar") or {}).get("crossover") or {}
    m = cross.get("measured") or {}
    out.append(
        _number(
            "NAR/AR crossover length",
            m.get("n"),
            "sequence length above which MaskGIT beats AR (interpolated)",
            m.get("bound") and f"measured bracket: N {m['bound']}" or cross.get("reason") or "no crossover measured",
        )
    )
    return out


def _openvino(args: argparse.Namespace, masked: Path, ar: Path, quant: dict[str, Any], tmp: Path) -> dict[str, Any]:
    """Issue #17's rows: OpenVINO against ORT per forward (1 and 2 threads) and per decode, NAR
    vs AR per engine in INT8, host share on the best engine; the reason where one cannot run."""
    import importlib.util

    if importlib.util.find_spec("openvino") is None:
        return {"reason": "openvino is not installed (pip install 'edgekit[openvino]')"}
    if not quant["int8"]:
        return {"reason": quant.get("reason") or "no int8 artifact"}
    out: dict[str, Any] = {}
    extra = {}
    if args.ov_trt_profile:

        def trt_copy() -> Path:
            from edgekit.quantize import QuantizeConfig, quantize_bundle

            copy = Path(shutil.copytree(masked, tmp / "masked-trt-profile"))
            quantize_bundle(copy, QuantizeConfig(profile="trt", runtime="openvino", threads=1))
            return Bundle.load(copy).path_of("int8")

        _say("quantize a copy of masked-demo with the trt profile (symmetric int8 activations), budget on OpenVINO")
        path, why = _attempt("trt-profile int8", trt_copy)
        if path is not None:
            extra["trt profile"] = path
        out["trt_profile_reason"] = why
    for threads in sorted({1, 2, args.threads or 1}):
        _say(
            f"per forward, ORT vs OpenVINO fp32/bf16/int8, {args.forward_iters} interleaved rounds, {threads} thread(s)"
        )
        out[f"forward_t{threads}"], out[f"forward_t{threads}_reason"] = _attempt(
            f"engines forward ({threads} threads)",
            lambda threads=threads: openvino_rows.engines_forward(masked, threads, args.forward_iters, extra),
        )
    graphs, why = (
        _attempt("fused export (masked)", lambda: _fused(masked))
        if not (Bundle.load(masked).manifest.get("fused"))
        else (("step", "unrolled"), None)
    )
    threads = args.threads or 1
    _say(
        "per masked decode, ORT vs OpenVINO (+ fused graphs on OpenVINO), "
        f"{args.fused_iters} interleaved rounds, {threads} thread(s)"
    )
    out["decode"], out["decode_reason"] = _attempt(
        "engines decode", lambda: openvino_rows.engines_decode(masked, threads, args.fused_iters, graphs or ())
    )
    lengths = tuple(sorted({16, 64, args.length}))
    _say(f"NAR (K=8) vs AR per engine in INT8 at L = {', '.join(map(str, lengths))} (architecture-only models)")
    out["nar_ar"], out["nar_ar_reason"] = _attempt(
        "NAR/AR per engine",
        lambda: openvino_rows.nar_ar_engines(masked, ar, lengths, threads, args.sweep_iters, tmp / "sweep-cache"),
    )
    return out


def openvino_numbers(ov: dict[str, Any], length: int, host: dict[str, Any]) -> list[dict[str, Any]]:
    """The quoted OpenVINO numbers, each with the CPU's ISA features (these machines differ)."""
    isa = " ".join(host.get("isa") or []) or "unknown"
    cpu = {"cpu": host.get("model"), "isa": isa}
    out = []
    if "reason" in ov:
        return [_number("OpenVINO rows", None, "issue #17", ov["reason"], **cpu)]
    for key in sorted(k for k in ov if k.startswith("forward_t") and not k.endswith("_reason")):
        f = ov[key]
        t = key.removeprefix("forward_t")
        if f is None:
            out.append(
                _number(
                    f"best INT8 engine / ORT FP32 per forward ({t} thread(s))", None, "", ov.get(f"{key}_reason"), **cpu
                )
            )
            continue
        best = f["best_int8"]
        out.append(
            _number(
                f"best INT8 engine / ORT FP32 per forward ({t} thread(s))",
                f["speedup_vs_ort_fp32"][best],
                f"ORT FP32 ms / {best} ms per forward, masked demo (goal >= 3); "
                + ", ".join(f"{k} {v:.2f} ms" for k, v in f["median_ms"].items()),
                None,
                **cpu,
            )
        )
        for k, v in f["speedup_vs_ort_fp32"].items():
            if k != "ort fp32":
                out.append(
                    _number(f"{k} / ORT FP32 per forward ({t} thread(s))", v, "speedup, interleaved", None, **cpu)
                )
        top = ", ".join(f"{o['op']} {100 * o['share']:.0f}%" for o in f["op_profile"]["ops"][:6])
        out.append(
            _number(
                f"OpenVINO INT8 kernel ms per forward ({t} thread(s))",
                f["op_profile"]["kernel_ms"],
                f"by op: {top}",
                None,
                **cpu,
            )
        )
    d = ov.get("decode")
    if d:
        int8 = {k: v for k, v in d["median_ms"].items() if "int8" in k}
        best = min(int8, key=int8.get)
        out.append(
            _number(
                f"best INT8 engine / ORT FP32 per decode ({d['threads']} thread(s))",
                d["speedup_vs_ort_fp32"][best],
                f"ORT FP32 ms / {best} ms per masked decode, K={d['steps']}, batch {d['batch']} (goal >= 2.5); "
                + ", ".join(f"{k} {v:.1f} ms" for k, v in d["median_ms"].items()),
                None,
                **cpu,
            )
        )
        for k, share in d["host_share"].items():
            out.append(
                _number(
                    f"host overhead share ({k}, {d['threads']} thread(s))",
                    share,
                    "decode time outside Runtime.run / decode time (goal on the best engine <= 0.03)",
                    None,
                    **cpu,
                )
            )
    else:
        out.append(_number("best INT8 engine / ORT FP32 per decode", None, "", ov.get("decode_reason"), **cpu))
    n = ov.get("nar_ar")
    for engine, e in ((n or {}).get("engines") or {}).items():
        if not e.get("available"):
            out.append(_number(f"NAR/AR at L={length} ({engine} int8)", None, "", e.get("reason"), **cpu))
            continue
        at = next((p for p in e["points"] if p["length"] == length), None)
        out.append(
            _number(
                f"NAR/AR speedup at L={length} ({engine} int8, {n['threads']} thread(s))",
                at and at["speedup"],
                f"AR ms / MaskGIT K={n['nar_steps']} ms, architecture-only models, both INT8 (goal >= 5); "
                + ", ".join(f"L={p['length']}: {p['speedup']:.2f}x" for p in e["points"]),
                None,
                **cpu,
                nar_ms=at and at["nar_decode_ms"],
                ar_ms=at and at["ar_decode_ms"],
            )
        )
        m = e["crossover"]["measured"]
        out.append(
            _number(
                f"NAR/AR crossover length ({engine} int8)",
                m.get("n"),
                "interpolated between the swept lengths",
                m.get("bound") and f"measured bracket: N {m['bound']}",
                **cpu,
            )
        )
    if n is None:
        out.append(_number(f"NAR/AR at L={length} per engine", None, "", ov.get("nar_ar_reason"), **cpu))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=Path("benchmarks/results/bench.json"))
    ap.add_argument(
        "--bundles", type=Path, help="a demo directory with masked/ and ar/ bundles (default: export into a temp dir)"
    )
    ap.add_argument("--batch", type=int, default=8, help="graph batch of the exported demo bundles")
    ap.add_argument("--length", type=int, default=256, help="sequence length of the NAR/AR comparison")
    ap.add_argument("--iters", type=int, default=20, help="measured decodes per variant, at least")
    ap.add_argument("--min-seconds", type=float, default=1.0, help="measure each variant at least this long")
    ap.add_argument("--sweep-iters", type=int, default=10, help="measured decodes per model at --length")
    ap.add_argument("--power", default="auto", help="off | auto | a probe name")
    ap.add_argument(
        "--threads",
        type=int,
        default=1,
        help=(
            "intra-op threads of every runtime (0 = each runtime's "
            "default); 1 keeps a shared 2-core VM's figures steady"
        ),
    )
    ap.add_argument("--flow-batch", type=int, default=2, help="graph batch of the exported flow bundle")
    ap.add_argument("--forward-iters", type=int, default=100, help="interleaved forwards per precision for INT8/FP32")
    ap.add_argument("--fused-iters", type=int, default=10, help="interleaved decode rounds for fused/host")
    ap.add_argument("--rss-decodes", type=int, default=1000, help="decodes measured for RSS growth")
    ap.add_argument("--snr-target", type=float, default=30.0, help="dB for the NFE-to-SNR rows")
    ap.add_argument(
        "--openvino-only",
        action="store_true",
        help="only issue #17's OpenVINO-vs-ORT rows (export, quantize, then those)",
    )
    ap.add_argument(
        "--ov-trt-profile", action="store_true", help="also time a trt-profile (symmetric int8) QDQ model on OpenVINO"
    )
    args = ap.parse_args()
    o = Output()
    measure = MeasureConfig(iters=args.iters, min_seconds=args.min_seconds, max_iters=max(10_000, args.iters))
    started = time.perf_counter()
    host = system_state()["cpu"]  # model, cores and the int8/bf16 ISA features, kept with every figure
    with tempfile.TemporaryDirectory(prefix="edgekit-bench-") as tmp:
        masked, ar, flow, quant = _bundles(args, Path(tmp))
        if args.openvino_only:
            ov = _openvino(args, masked, ar, quant, Path(tmp))
            numbers = openvino_numbers(ov, args.length, host)
            doc = {
                "schema": "edgekit.bench/1",
                "created": now_iso(),
                "seconds": time.perf_counter() - started,
                "host": host,
                "args": {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()},
                "quantization": quant,
                "numbers": numbers,
                "openvino": ov,
            }
            _print(o, doc, args.out)
            return
        precisions = ("fp32", "int8") if quant["int8"] else ("fp32",)
        _say(f"profile masked-demo: ort {'+'.join(precisions)}, torch fp32")
        variants_doc = profile_bundle(
            masked,
            ProfileConfig(
                runtimes=("ort", "torch"),
                precisions=precisions,
                measure=measure,
                power=args.power,
                threads=args.threads,
                keep_samples=False,
            ),
            _progress,
        )
        _say(f"profile masked-demo vs ar-demo on ort fp32, and both at L={args.length}")
        ar_doc = profile_bundle(
            masked,
            ProfileConfig(
                runtimes=("ort",),
                precisions=("fp32",),
                measure=measure,
                power="off",
                compare_ar=True,
                ar_bundle=ar,
                sweep_lengths=(args.length,),
                threads=args.threads,
                keep_samples=False,
                sweep_measure=MeasureConfig(
                    warmup_iters=1, warmup_seconds=0.2, iters=args.sweep_iters, min_seconds=args.min_seconds
                ),
            ),
            _progress,
        )
        fast = _fast_paths(args, masked, ar, flow, quant)
        ov = _openvino(args, masked, ar, quant, Path(tmp))
    numbers = (
        collect(variants_doc, ar_doc, quant, args.length)
        + fast_numbers(fast, ar_doc, masked_sizes=fast.get("sizes"))
        + openvino_numbers(ov, args.length, host)
    )
    doc = {
        "schema": "edgekit.bench/1",
        "created": now_iso(),
        "seconds": time.perf_counter() - started,
        "host": host,
        "args": {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()},
        "quantization": quant,
        "numbers": numbers,
        "crossover": crossover_lines(ar_doc),
        "power": variants_doc["power"],
        "profiles": {"variants": variants_doc, "nar_vs_ar": ar_doc},
        "fast_paths": fast,
        "openvino": ov,
    }
    _print(o, doc, args.out)


def _print(o: Output, doc: dict[str, Any], out: Path) -> None:
    write_json(doc, out)
    numbers = doc["numbers"]
    rows = []
    for n in numbers:
        value = n["value"] if n["measured"] else "not measured"
        note = n["meaning"] if n["measured"] else n["reason"]
        rows.append((n["name"], value, n.get("speedup"), note))
    isa = " ".join(doc["host"].get("isa") or []) or "ISA unknown"
    o.table(
        f"edgekit bench on {doc['host'].get('model')} ({doc['host'].get('cores')} cores; {isa})",
        ["figure", "value", "speedup", "what / why not"],
        rows,
    )
    for line in doc.get("crossover", []):
        o.line(line)
    if "power" in doc:
        o.line(
            "power: "
            + (
                "measured with " + doc["power"]["probe"]
                if doc["power"].get("available")
                else f"unavailable: {doc['power'].get('reason')}"
            )
        )
    o.line(f"wrote {out} ({doc['seconds']:.0f} s)")


if __name__ == "__main__":
    main()
