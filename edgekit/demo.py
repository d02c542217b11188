"""`edgekit demo`: the whole pipeline on the built-in models and the default CPU target, composed
from the stages (export, decode, quantize, check, build, profile). Nothing below imports it."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from edgekit.build import demo_build_stage
from edgekit.bundle import Bundle
from edgekit.check import demo_check
from edgekit.check.render import print_demo_check
from edgekit.evaluate import evaluate
from edgekit.export import ExportConfig, export_bundle
from edgekit.models import load_spec
from edgekit.models.corpus import default_corpus
from edgekit.output import Output
from edgekit.profile import demo_profile
from edgekit.quantize import demo_quantize
from edgekit.runtimes import open_runtime


@dataclass(frozen=True)
class DemoConfig:
    out: Path = Path("edgekit-demo")  # one bundle per demo model below it
    batch: int = 8  # static graph batch: 8 rows per network call
    n: int = 32  # evaluation sequences per model (held-out conditions)
    seed: int = 0


def run_demo(cfg: DemoConfig, progress: Any = None) -> dict[str, Any]:
    """The whole pipeline on the built-in models and the default CPU target: export + verify
    each, decode with the masked generator, feed its tokens to the flow decoder, decode the AR
    baseline, and score everything against the corpus's ground truth."""
    step = progress or (lambda message: None)
    report: dict[str, Any] = {"schema": "edgekit.demo/1", "out": str(cfg.out), "stages": {}}
    bundles: dict[str, Bundle] = {}
    for name in ("masked-demo", "flow-demo", "ar-demo"):
        step(f"export {name}")
        b = export_bundle(load_spec(name, batch=cfg.batch), cfg.out / name.removesuffix("-demo"), ExportConfig(), source=name)
        bundles[b.kind] = b
        ver = b.manifest["verification"]["fp32"]
        report["stages"].setdefault("export", {})[name] = {
            "bundle": str(b.root),
            "bytes": b.artifact("fp32").bytes,
            "verified": ver["passed"],
            "max_abs_error": max(o["max_abs"] for o in ver["outputs"].values()),
        }
    quality: dict[str, Any] = {}
    step("decode masked-demo (MaskGIT) on ort fp32")
    with open_runtime(bundles["masked"], "ort", "fp32") as rt:
        masked = evaluate(bundles["masked"], rt, cfg.n, cfg.seed)
    quality["masked"] = masked["quality"]
    step("decode flow-demo (flow matching) on the masked tokens")
    with open_runtime(bundles["flow"], "ort", "fp32") as rt:
        flow = evaluate(bundles["flow"], rt, cfg.n, cfg.seed, cond={"tokens": masked["output"]})
    quality["flow"] = flow["quality"]
    step("decode ar-demo (KV-cache baseline) on ort fp32")
    with open_runtime(bundles["ar"], "ort", "fp32") as rt:
        quality["ar"] = evaluate(bundles["ar"], rt, cfg.n, cfg.seed)["quality"]
    quality["corpus"] = default_corpus().reference_token_metrics
    report["stages"]["decode"] = {"runtime": "ort", "precision": "fp32", "n": cfg.n, "seed": cfg.seed, "quality": quality}

    step("quantize each model to INT8 (cpu profile), calibrated on FP32 decode trajectories")
    report["stages"]["quantize"] = demo_quantize(bundles, n=min(cfg.n, 16), seed=cfg.seed)

    step("check: INT8 vs FP32 on ORT per model, the CI accuracy gate")
    report["stages"]["check"] = demo_check(bundles, n=min(cfg.n, 16), seed=cfg.seed)

    step("lint and build each bundle for the cpu target (optimized ONNX)")
    report["stages"]["build"] = {kind: demo_build_stage(b.root, "cpu", "fp32") for kind, b in bundles.items()}

    step("profile masked-demo against the AR baseline on the fastest engine here (with the quality-latency frontier), and write the HTML report")
    report["stages"]["profile"] = demo_profile(bundles, cfg.out, n=cfg.n)
    return report


def print_demo(o: Output, report: dict[str, Any]) -> None:
    """The demo's tables, stage by stage."""
    exp = report["stages"]["export"]
    o.table("export: torch → static ONNX, verified against torch", ["model", "bundle", "MB", "max abs err", "verified"],
            [(m, e["bundle"], e["bytes"] / 1e6, e["max_abs_error"], e["verified"]) for m, e in exp.items()])
    q = report["stages"]["decode"]["quality"]
    rows = [
        ("masked-demo (MaskGIT, 8 steps)", q["masked"]["validity"], q["masked"]["event_accuracy"], q["masked"]["nll_per_token"], "—"),
        ("ar-demo (KV cache, 64 steps)", q["ar"]["validity"], q["ar"]["event_accuracy"], q["ar"]["nll_per_token"], "—"),
        ("corpus (true samples)", q["corpus"]["validity"], q["corpus"]["event_accuracy"], q["corpus"]["nll_per_token"], "—"),
        ("flow-demo on masked tokens", "—", "—", "—", f"{q['flow']['snr_db']:.1f} dB"),
    ]
    o.table(f"decode quality vs the corpus ground truth (ort fp32, n={report['stages']['decode']['n']}, seed={report['stages']['decode']['seed']})",
            ["model", "validity", "event acc.", "NLL/token", "SNR vs clean"], rows)
    qz = report["stages"]["quantize"]
    rows = []
    for kind, r in qz.items():
        qf, qi = r["quality_fp32"] or {}, r["quality_int8"] or {}
        for k in qf:
            rows.append((kind, k, qf[k], qi.get(k), ""))
        for c in r["budget"]:
            rows.append((kind, c["key"], "—", c["value"], f"{c['op']} {c['limit']:g}: " + ("pass" if c["passed"] else "FAIL")))
        rows.append((kind, "size MB", r["sizes"]["fp32_bytes"] / 1e6, r["sizes"]["int8_bytes"] / 1e6, f"{r['sizes']['ratio']:.2f}x"))
    o.table("quantize: FP32 vs INT8 side by side (held-out set, identical noise)", ["model", "metric", "FP32", "INT8", "budget"], rows)
    print_demo_check(o, report["stages"]["check"])
    b = report["stages"]["build"]
    o.table("build: lint + engine for the cpu target", ["model", "lint", "engine", "MB", "runtime"],
            [(k, "pass" if s["lint_passed"] else f"{s['lint']['error']} error(s)", s["engine"], s["bytes"] / 1e6, s["runtime"]) for k, s in b.items()])
    prof = report["stages"]["profile"]
    t = prof["table"]
    eng = prof["engine"]
    o.line(f"profile engine: {eng['runtime']}, the fastest here (" + ", ".join(
        f"{e} {ms:.1f} ms" for e, ms in sorted(eng["median_ms"].items(), key=lambda kv: kv[1]))
        + f" per {eng['precision']} decode, median of {eng['rounds']} interleaved rounds)")
    o.table(f"profile: masked-demo on {eng['runtime']}, side by side", t["variants"]["columns"], t["variants"]["rows"])
    if t["ratios"]["rows"]:
        o.table("ratios measured in the same run", t["ratios"]["columns"], t["ratios"]["rows"])
    if "ar" in t:
        o.table("NAR vs AR (speedup = AR ms / NAR ms)", t["ar"]["columns"], t["ar"]["rows"])
    for line in t["crossover"]:
        o.line(line)
    if t.get("frontier", {}).get("rows"):
        o.table(f"quality-latency frontier, ranked by {prof['frontier']['metric']} (* = Pareto-optimal)", t["frontier"]["columns"], t["frontier"]["rows"])
    for line in t.get("frontier_lines", []) + t["power"]:
        o.line(line)
    o.line(f"profile report: {prof['html']} (JSON: {prof['json']})")
