"""The speed ratios the README quotes, measured in one run on this host:

    python benchmarks/bench.py [--out benchmarks/results/bench.json] [--bundles edgekit-demo]

INT8/FP32 on ONNX Runtime, ONNX Runtime / torch eager, NAR (MaskGIT) / AR at L=256, the host
overhead share of a decode and p99/p50, all from ``edgekit.profiler`` (same probes, same decode
loops as ``edgekit profile``). Without --bundles the demo models are exported (batch 8) and
quantized into a temp dir. A figure that cannot be measured here (no int8 artifact because the
quantize stage failed, no torch) is printed and saved as "not measured" with the reason, never as
a number. L=256 uses architecture-only models (random weights: latency does not depend on them).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from edgekit.bundle import Bundle, now_iso
from edgekit.output import Output
from edgekit.probes.latency import MeasureConfig
from edgekit.probes.system import system_state
from edgekit.profiler import ProfileConfig, profile_bundle
from edgekit.report import crossover_lines, write_json


def _say(message: str) -> None:
    print(f"· {message}", file=sys.stderr, flush=True)


def _progress(label: str, done: int, total: int) -> None:
    if total == 0:
        _say(label)


def _bundles(args: argparse.Namespace, tmp: Path) -> tuple[Path, Path, dict[str, Any]]:
    """The masked and AR bundles, and how the int8 artifact came to be (or why there is none)."""
    if args.bundles is not None:
        masked, ar = args.bundles / "masked", args.bundles / "ar"
        has = "int8" in Bundle.load(masked).manifest["artifacts"]
        why = None if has else f"{masked} has no int8 artifact (run `edgekit quantize {masked}`)"
        return masked, ar, {"int8": has, "source": str(masked), "reason": why}
    from edgekit.export.to_bundle import export_bundle
    from edgekit.models import load_spec

    for name in ("masked-demo", "ar-demo"):
        _say(f"export {name} (batch {args.batch})")
        export_bundle(load_spec(name, batch=args.batch), tmp / name.removesuffix("-demo"), source=name)
    masked, ar = tmp / "masked", tmp / "ar"
    return masked, ar, _quantize(masked)


def _quantize(masked: Path) -> dict[str, Any]:
    _say("quantize masked-demo (edgekit.quantize, default profile)")
    try:
        from edgekit.quantize import quantize_bundle

        start = time.perf_counter()
        summary = quantize_bundle(masked)
    except Exception as exc:  # noqa: BLE001 - any failure is reported as the reason, not a number
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
        return {"int8": False, "reason": f"quantize stage failed: {type(exc).__name__}: {first}"[:400]}
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


def collect(variants_doc: dict[str, Any], ar_doc: dict[str, Any], quant: dict[str, Any], length: int) -> list[dict[str, Any]]:
    """The quoted numbers from the two profile documents."""
    out = []
    r = _ratio_of(variants_doc, "int8/fp32 (ort)")
    out.append(_number(
        "INT8/FP32 latency (ORT)", r and r["median_latency"], "median decode ms int8 / fp32 (< 1: int8 faster)",
        quant.get("reason"), speedup=r and r["speedup"], model_size=r and r["model_bytes"],
    ))
    r = _ratio_of(variants_doc, "ort/torch (fp32)")
    out.append(_number(
        "ORT/torch eager latency (fp32)", r and r["median_latency"], "median decode ms ORT / torch eager",
        "torch runtime not measured", speedup=r and r["speedup"],
    ))
    cross = (ar_doc.get("compare_ar") or {}).get("crossover") or {}
    at = next((p for p in cross.get("points", []) if p["length"] == length), None)
    sweep = cross.get("sweep") or {}
    out.append(_number(
        f"NAR/AR latency at L={length} (ORT fp32)", at and at["nar_decode_ms"] / at["ar_decode_ms"],
        f"median decode ms MaskGIT K={cross.get('nar_steps')} / AR {length} tokens (architecture-only models)",
        sweep.get("reason") or "the length sweep did not run", speedup=at and at["speedup"],
        nar_ms=at and at["nar_decode_ms"], ar_ms=at and at["ar_decode_ms"],
    ))
    for s in (ar_doc.get("compare_ar") or {}).get("speedups", []):
        own = ar_doc["compare_ar"]["length"]
        out.append(_number(
            f"NAR/AR latency at L={own} (trained demo, {s['nar']})",
            s["nar_median_ms"] / s["ar_median_ms"] if s.get("speedup") else None,
            "median decode ms masked-demo / ar-demo", s.get("reason"), speedup=s.get("speedup"),
        ))
    for v in variants_doc["variants"]:
        out.append(_number(f"host overhead share ({v['id']})", v["breakdown"]["host_overhead_share"],
                           "host time (sampling, scheduling, copies) / decode time"))
    for v in variants_doc["variants"]:
        out.append(_number(f"p99/p50 ({v['id']})", v["latency"]["p99_ms"] / v["latency"]["median_ms"],
                           f"tail over median decode latency, n={v['latency']['n']}"))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=Path("benchmarks/results/bench.json"))
    ap.add_argument("--bundles", type=Path, help="a demo directory with masked/ and ar/ bundles (default: export into a temp dir)")
    ap.add_argument("--batch", type=int, default=8, help="graph batch of the exported demo bundles")
    ap.add_argument("--length", type=int, default=256, help="sequence length of the NAR/AR comparison")
    ap.add_argument("--iters", type=int, default=20, help="measured decodes per variant, at least")
    ap.add_argument("--min-seconds", type=float, default=1.0, help="measure each variant at least this long")
    ap.add_argument("--sweep-iters", type=int, default=10, help="measured decodes per model at --length")
    ap.add_argument("--power", default="auto", help="off | auto | a probe name")
    ap.add_argument("--threads", type=int, default=0, help="ORT intra-op threads (0 = default)")
    args = ap.parse_args()
    o = Output()
    measure = MeasureConfig(iters=args.iters, min_seconds=args.min_seconds, max_iters=max(10_000, args.iters))
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="edgekit-bench-") as tmp:
        masked, ar, quant = _bundles(args, Path(tmp))
        precisions = ("fp32", "int8") if quant["int8"] else ("fp32",)
        _say(f"profile masked-demo: ort {'+'.join(precisions)}, torch fp32")
        variants_doc = profile_bundle(masked, ProfileConfig(
            runtimes=("ort", "torch"), precisions=precisions, measure=measure, power=args.power,
            threads=args.threads, keep_samples=False,
        ), _progress)
        _say(f"profile masked-demo vs ar-demo on ort fp32, and both at L={args.length}")
        ar_doc = profile_bundle(masked, ProfileConfig(
            runtimes=("ort",), precisions=("fp32",), measure=measure, power="off", compare_ar=True, ar_bundle=ar,
            sweep_lengths=(args.length,), threads=args.threads, keep_samples=False,
            sweep_measure=MeasureConfig(warmup_iters=1, warmup_seconds=0.2, iters=args.sweep_iters, min_seconds=args.min_seconds),
        ), _progress)
    numbers = collect(variants_doc, ar_doc, quant, args.length)
    doc = {
        "schema": "edgekit.bench/1",
        "created": now_iso(),
        "seconds": time.perf_counter() - started,
        "host": system_state()["cpu"],
        "args": {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()},
        "quantization": quant,
        "numbers": numbers,
        "crossover": crossover_lines(ar_doc),
        "power": variants_doc["power"],
        "profiles": {"variants": variants_doc, "nar_vs_ar": ar_doc},
    }
    write_json(doc, args.out)
    rows = []
    for n in numbers:
        value = n["value"] if n["measured"] else "not measured"
        note = n["meaning"] if n["measured"] else n["reason"]
        rows.append((n["name"], value, n.get("speedup"), note))
    o.table(f"edgekit bench on {doc['host'].get('model')} ({doc['host'].get('cores')} cores)", ["figure", "value", "speedup", "what / why not"], rows)
    for line in doc["crossover"]:
        o.line(line)
    o.line("power: " + ("measured with " + doc["power"]["probe"] if doc["power"].get("available") else f"unavailable: {doc['power'].get('reason')}"))
    o.line(f"wrote {args.out} ({doc['seconds']:.0f} s)")


if __name__ == "__main__":
    main()
