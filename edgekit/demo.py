"""`edgekit demo`: the whole pipeline on the built-in models and the default CPU target, composed
from the stages (export, decode, quantize, check, build, profile). Nothing below imports it."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from edgekit.builder import build_bundle, demo_build_stage, module_available
from edgekit.bundle import Bundle
from edgekit.check import CheckConfig, check_bundle, demo_check
from edgekit.check.render import print_demo_check
from edgekit.evaluate import evaluate
from edgekit.export import ExportConfig, export_bundle
from edgekit.models import load_spec
from edgekit.models.corpus import default_corpus
from edgekit.output import Output
from edgekit.profile import demo_profile
from edgekit.quantize import QuantizeConfig, demo_quantize, quantize_bundle
from edgekit.runtimes import open_runtime


@dataclass(frozen=True)
class DemoConfig:
    out: Path = Path("edgekit-demo")  # one bundle per demo model below it
    batch: int = 8  # static graph batch: 8 rows per network call
    n: int = 32  # evaluation sequences per model (held-out conditions)
    seed: int = 0
    # The NPU stage (needs edgekit[qnn]): masked-demo at batch 1 for this Snapdragon target,
    # quantized with the qnn profile, compiled to a context binary, checked on the emulated HTP.
    npu_target: str | None = "snapdragon-8-gen-3"
    npu_n: int = 4  # held-out rows for the NPU budget and check: the HTP emulation is ~10x slower per forward


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
        ver = b.verification["fp32"]
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
    report["stages"]["build"] = {kind: demo_build_stage(b.root, "cpu", "auto") for kind, b in bundles.items()}

    step("profile masked-demo against the AR baseline on the fastest engine here (with the quality-latency frontier), and write the HTML report")
    report["stages"]["profile"] = demo_profile(bundles, cfg.out, n=cfg.n)
    if cfg.npu_target:
        report["stages"]["npu"] = npu_stage(cfg, step)
    return report


def npu_stage(cfg: DemoConfig, step: Any) -> dict[str, Any]:
    """masked-demo on a Snapdragon NPU: full-integer quantization whose budget is measured on the
    HTP backend, an EPContext build for the target, and the check qnn:int8 vs ort:fp32 loading
    that precompiled context. Skipped, with the install line, without onnxruntime-qnn."""
    if not module_available("onnxruntime_qnn"):
        return {"skipped": "onnxruntime-qnn is not installed (pip install 'edgekit[qnn]')"}
    target = cfg.npu_target
    step(f"NPU: export masked-demo at batch 1 for {target} (the HTP backend emulates the NPU on this CPU)")
    b = export_bundle(load_spec("masked-demo", batch=1), cfg.out / "npu" / "masked", ExportConfig(), source="masked-demo")
    step("NPU: quantize every op (qnn profile), budget measured on the HTP backend")
    q = quantize_bundle(b.root, QuantizeConfig(profile="qnn", calib_samples=cfg.npu_n, eval_samples=cfg.npu_n, eval_seed=cfg.seed,
                                               target=target))
    step(f"NPU: compile the context binary for {target}")
    built = build_bundle(b.root, target, "int8")
    step("NPU: check qnn:int8 (precompiled context) vs ort:fp32")
    doc = check_bundle(b.root, CheckConfig(reference="ort:fp32", candidate="qnn:int8", n=cfg.npu_n, seed=cfg.seed, target=target))
    engine = built["engine"]
    return {
        "target": target,
        "bundle": str(b.root),
        "quantize": {"passed": q["passed"], "checks": q["budget"]["checks"], "share_8bit": q["qnn"]["share_8bit"],
                     "promoted_16bit": q["qnn"]["promoted_16bit"], "measured_on": q["budget"]["measured_on"]},
        "build": {"engine": engine["path"], "bytes": engine["bytes"], "device": engine["device"], "qnn": engine["qnn"],
                  "session_seconds": engine["session_seconds"]},
        "check": {"passed": doc["passed"], "failed": doc["failed"],
                  "metrics": {k: v for k, v in doc["metrics"].items() if isinstance(v, (int, float))}},
        "note": "latency on this host is x86 emulation of the NPU; accuracy is the NPU's arithmetic",
    }


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
        # The budget keys only (`--budget KEY=...`); each is one measure with one name (the
        # ground-truth quality per precision stays in the JSON: flow's snr_db vs clean frames
        # would be a second, different snr_db row here).
        for c in r["budget"]:
            rows.append((kind, c["key"], c["value"], f"{c['op']} {c['limit']:g}: " + ("pass" if c["passed"] else "FAIL")))
        rows.append((kind, "size MB (FP32 -> INT8)", f"{r['sizes']['fp32_bytes'] / 1e6:.2f} -> {r['sizes']['int8_bytes'] / 1e6:.2f}",
                     f"{r['sizes']['ratio']:.2f}x"))
        speed = r.get("speed") or {}
        if speed.get("measured"):
            rows.append((kind, f"ms per decode (FP32 -> INT8, {speed['isa']})",
                         f"{speed['fp32_ms_per_decode']:.1f} -> {speed['int8_ms_per_decode']:.1f}", f"{speed['int8_speedup']:.2f}x"))
    arith = next((r.get("arithmetic") for r in qz.values() if r.get("arithmetic")), None)
    title = "quantize: INT8 vs FP32 (held-out set, identical noise)"
    if arith:
        title += f"; scheme {arith['scheme']['name']} for this {arith['isa']} CPU"
    o.table(title, ["model", "budget metric", "INT8", "limit"], rows)
    print_demo_check(o, report["stages"]["check"])
    b = report["stages"]["build"]
    o.table("build: lint + engine for the cpu target (--precision auto)", ["model", "lint", "precision", "engine", "MB", "runtime"],
            [(k, "pass" if s["lint_passed"] else f"{s['lint']['error']} error(s)", s["precision"], s["engine"], s["bytes"] / 1e6, s["runtime"])
             for k, s in b.items()])
    for k, s in b.items():
        o.line(f"{k}: {s['precision']} because {s['precision_choice']}")
    prof = report["stages"]["profile"]
    t = prof["table"]  # the full side-by-side table, ratios and sweep are in the HTML report
    eng = prof["engine"]
    o.line(f"profile engine: {eng['runtime']}, the fastest here (" + ", ".join(
        f"{e} {ms:.1f} ms" for e, ms in sorted(eng["median_ms"].items(), key=lambda kv: kv[1]))
        + f" per {eng['precision']} decode, median of {eng['rounds']} interleaved rounds)")
    o.table(f"profile: masked-demo on {eng['runtime']} ({prof.get('rows', '?')} rows per decode)", t["summary"]["columns"], t["summary"]["rows"])
    for line in t["not_measured"] + ([t["nar_vs_ar"]] if t.get("nar_vs_ar") else []):
        o.line(line)
    if t.get("frontier", {}).get("rows"):
        o.table(f"quality-latency frontier, ranked by {prof['frontier']['metric']} (* = Pareto-optimal)", t["frontier"]["columns"], t["frontier"]["rows"])
    for line in t.get("frontier_lines", []) + t["power"]:
        o.line(line)
    o.line(f"profile report: {prof['html']} (JSON: {prof['json']})")
    npu = report["stages"].get("npu")
    if npu:
        _print_npu(o, npu)


def _print_npu(o: Output, npu: dict[str, Any]) -> None:
    if "skipped" in npu:
        o.line(f"NPU stage skipped: {npu['skipped']}")
        return
    q, b, c = npu["quantize"], npu["build"], npu["check"]
    rows = [("quantize (qnn profile)", c_["key"], c_["value"], f"{c_['op']} {c_['limit']:g}: " + ("pass" if c_["passed"] else "FAIL"))
            for c_ in q["checks"]]
    rows.append(("quantize (qnn profile)", "activations at 8 bit", q["share_8bit"], f"{q['promoted_16bit']} tensor(s) at 16 bit"))
    rows += [("check qnn:int8 vs ort:fp32", k, v, "FAIL" if k in c["failed"] else "") for k, v in c["metrics"].items()
             if k in ("token_agreement", "top1_agreement", "logits_kl") or k.startswith("quality_drop.event")]
    rows.append(("check qnn:int8 vs ort:fp32", "verdict", "pass" if c["passed"] else "FAIL", ", ".join(c["failed"])))
    s = b["session_seconds"]
    rows.append((f"build {npu['target']}", f"context binary ({b['device']})", b["bytes"] / 1e6,
                 f"MB; session {s['load_precompiled']:.2f} s loaded vs {s['compile']:.2f} s compiling"))
    o.table(f"NPU: masked-demo on {npu['target']} ({q['measured_on']}; {npu['note']})", ["stage", "metric", "value", ""], rows)
