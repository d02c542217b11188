"""`edgekit demo`: the whole pipeline on the built-in models and the default CPU target, composed
from the stages (export, decode, quantize, check, build, profile). Nothing below imports it."""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from edgekit.builder import build_bundle, demo_build_stage, module_available
from edgekit.bundle import Bundle
from edgekit.check import CheckConfig, check_bundle, demo_check
from edgekit.check.render import print_demo_check
from edgekit.evaluate import evaluate
from edgekit.export import ExportConfig, export_bundle
from edgekit.host import cpu_identity
from edgekit.models import load_spec
from edgekit.models.corpus import default_corpus
from edgekit.output import Output
from edgekit.profile import DEMO_FRONTIER_STEPS, DEMO_SWEEP_LENGTHS, demo_profile
from edgekit.profile.render import print_frontier
from edgekit.quantize import QuantizeConfig, demo_quantize, quantize_bundle
from edgekit.runtimes import open_runtime


@dataclass(frozen=True)
class DemoConfig:
    """The demo's sizes. By default they fit a few minutes on 2 cores (benchmarks/demo_time.py
    records them); ``full`` restores the complete pipeline's (`edgekit demo --full`): the
    frontier at K = 1..16 on ``n`` conditions instead of K = 1..8 on 16, a length sweep point
    for a measured crossover (two architecture-only exports), and the NPU stage (minutes)."""

    out: Path = Path("edgekit-demo")  # one bundle per demo model below it
    batch: int = 8  # static graph batch: 8 rows per network call
    n: int = 32  # evaluation sequences per model (held-out conditions)
    seed: int = 0
    full: bool = False
    # The NPU stage (needs edgekit[qnn]): masked-demo at batch 1 for this Snapdragon target,
    # quantized with the qnn profile, compiled to a context binary, checked on the emulated HTP.
    # Minutes on the x86 emulation (7.1 min at load 7-8 on 2 vCPUs): with ``full`` or --npu only.
    npu_target: str | None = "snapdragon-8-gen-3"
    npu: bool | None = None  # None: run it with ``full``
    npu_n: int = 4  # held-out rows for the NPU budget and check: the HTP emulation is ~10x slower per forward
    # Calibration sequences for the NPU's INT8 (FP32 decodes on the CPU: cheap). With 4, the
    # 20,000-step masked model missed top-1 with only the logits at 16 bit and the search ran on
    # for minutes; with quantize's default 8 it met the budget at 151 of 152 activations 8-bit.
    npu_calib: int = 8

    @property
    def gate_n(self) -> int:
        """Held-out rows of each INT8 budget and of the check that judges the same rows. Not cut
        for the demo: with 8 rows the budget search took as long (its cost is re-quantizing per
        fallback, not decoding) and the AR model needed two fallbacks instead of none."""
        return min(self.n, 16)

    @property
    def frontier_steps(self) -> tuple[int, ...]:
        return DEMO_FRONTIER_STEPS if self.full else (1, 2, 4, 5, 6, 8)  # K=16 alone cost as much as K=1..8

    @property
    def frontier_n(self) -> int:
        return self.n if self.full else min(self.n, 16)

    @property
    def sweep_lengths(self) -> tuple[int, ...]:
        # The sweep exports two architecture-only models (~12 s); without it the crossover is the
        # bound from the bundle length (profile says so).
        return DEMO_SWEEP_LENGTHS if self.full else ()

    @property
    def runs_npu(self) -> bool:
        return bool(self.npu_target) and (self.full if self.npu is None else self.npu)


class StageClock:
    """Wall and CPU seconds per demo stage, and progress lines that say how long the run has
    taken so far (``[1:23] quantize ...``): the demo took minutes with no word of where."""

    def __init__(self, say: Callable[[str], None]):
        self.say = say
        self.t0, self.cpu0 = time.perf_counter(), time.process_time()
        self.stages: dict[str, dict[str, float]] = {}
        self.current: str | None = None
        self._seen: set[str] = set()

    def _stamp(self) -> str:
        m, s = divmod(int(time.perf_counter() - self.t0), 60)
        return f"[{m}:{s:02d}]"

    def start(self, stage: str) -> None:
        """Close the running stage (if another) and open ``stage``."""
        if stage == self.current:
            return
        now, cpu = time.perf_counter(), time.process_time()
        if self.current is not None:
            self.stages[self.current]["wall_s"] += now - self.stages[self.current].pop("_wall")
            self.stages[self.current]["cpu_s"] += cpu - self.stages[self.current].pop("_cpu")
        self.current = stage
        entry = self.stages.setdefault(stage, {"wall_s": 0.0, "cpu_s": 0.0})
        entry["_wall"], entry["_cpu"] = now, cpu

    def step(self, message: str, stage: str | None = None) -> None:
        if stage is not None:
            self.start(stage)
        self.say(f"{self._stamp()} {message}")

    def detail(self, message: str) -> None:
        """A line inside the running stage (a model being quantized, an NPU step)."""
        self.say(f"{self._stamp()}   {message}")

    def profile_detail(self, label: str, done: int, total: int) -> None:
        """The profiler's progress(label, done, total): one line per label."""
        if label not in self._seen:
            self._seen.add(label)
            self.detail(label)

    def finish(self) -> dict[str, Any]:
        """{"stages": {name: {wall_s, cpu_s}}, "wall_s", "cpu_s", "cpu", "cores", "load_avg"}."""
        self.start("_end")
        self.stages.pop("_end")
        cpu = cpu_identity()
        try:
            load = [round(x, 2) for x in os.getloadavg()]
        except OSError:
            load = None
        return {
            "stages": self.stages,
            "wall_s": time.perf_counter() - self.t0,
            "cpu_s": time.process_time() - self.cpu0,
            "cpu": cpu["model"],
            "cores": cpu["cores"],
            "load_avg_end": load,
        }


def run_demo(cfg: DemoConfig, progress: Any = None) -> dict[str, Any]:
    """The whole pipeline on the built-in models and the default CPU target: export + verify
    each, decode with the masked generator, feed its tokens to the flow decoder, decode the AR
    baseline, and score everything against the corpus's ground truth."""
    clock = StageClock(progress or (lambda message: None))
    step = clock.step
    report: dict[str, Any] = {"schema": "edgekit.demo/1", "out": str(cfg.out), "stages": {}}
    bundles: dict[str, Bundle] = {}
    for name in ("masked-demo", "flow-demo", "ar-demo"):
        step(f"export {name}", stage="export")
        b = export_bundle(
            load_spec(name, batch=cfg.batch), cfg.out / name.removesuffix("-demo"), ExportConfig(), source=name
        )
        bundles[b.kind] = b
        ver = b.verification["fp32"]
        report["stages"].setdefault("export", {})[name] = {
            "bundle": str(b.root),
            "bytes": b.artifact("fp32").bytes,
            "verified": ver.passed,
            "max_abs_error": max(o.max_abs for o in ver.outputs.values()),
        }
    quality: dict[str, Any] = {}
    step("decode masked-demo (MaskGIT) on ort fp32", stage="decode")
    with open_runtime(bundles["masked"], "ort", "fp32") as rt:
        masked = evaluate(bundles["masked"], rt, cfg.n, cfg.seed)
    quality["masked"] = masked["quality"]
    step("decode flow-demo (flow matching) on the masked tokens", stage="decode")
    with open_runtime(bundles["flow"], "ort", "fp32") as rt:
        flow = evaluate(bundles["flow"], rt, cfg.n, cfg.seed, cond={"tokens": masked["output"]})
    quality["flow"] = flow["quality"]
    step("decode ar-demo (KV-cache baseline) on ort fp32", stage="decode")
    with open_runtime(bundles["ar"], "ort", "fp32") as rt:
        quality["ar"] = evaluate(bundles["ar"], rt, cfg.n, cfg.seed)["quality"]
    quality["corpus"] = default_corpus().reference_token_metrics
    report["stages"]["decode"] = {
        "runtime": "ort",
        "precision": "fp32",
        "n": cfg.n,
        "seed": cfg.seed,
        "quality": quality,
    }

    step("quantize each model to INT8 (cpu profile), calibrated on FP32 decode trajectories", stage="quantize")
    report["stages"]["quantize"] = demo_quantize(bundles, n=cfg.gate_n, seed=cfg.seed, progress=clock.detail)

    step("check: INT8 vs FP32 on ORT per model, the CI accuracy gate", stage="check")
    report["stages"]["check"] = demo_check(bundles, n=cfg.gate_n, seed=cfg.seed)

    step("lint and build each bundle for the cpu target (optimized ONNX)", stage="build")
    report["stages"]["build"] = {kind: demo_build_stage(b.root, "cpu", "auto") for kind, b in bundles.items()}

    step(
        "profile masked-demo against the AR baseline on the fastest engine here (with the quality-latency frontier), and write the HTML report",
        stage="profile",
    )
    report["stages"]["profile"] = demo_profile(
        bundles,
        cfg.out,
        n=cfg.frontier_n,
        progress=clock.profile_detail,
        frontier_steps=cfg.frontier_steps,
        sweep_lengths=cfg.sweep_lengths,
    )
    if cfg.runs_npu:
        clock.start("npu")
        report["stages"]["npu"] = npu_stage(cfg, clock.detail)
    elif cfg.npu_target:
        report["stages"]["npu"] = {
            "skipped": "minutes on the x86 HTP emulation: `edgekit demo --npu` (or --full) runs it"
            + ("" if module_available("onnxruntime_qnn") else "; it needs onnxruntime-qnn (pip install 'edgekit[qnn]')")
        }
    report["sizes"] = {
        "full": cfg.full,
        "n": cfg.n,
        "gate_n": cfg.gate_n,
        "frontier_steps": list(cfg.frontier_steps),
        "frontier_n": cfg.frontier_n,
        "sweep_lengths": list(cfg.sweep_lengths),
        "npu": cfg.runs_npu,
    }
    report["timing"] = clock.finish()
    return report


def npu_stage(cfg: DemoConfig, step: Any) -> dict[str, Any]:
    """masked-demo on a Snapdragon NPU: full-integer quantization whose budget is measured on the
    HTP backend, an EPContext build for the target, and the check qnn:int8 vs ort:fp32 loading
    that precompiled context. Skipped, with the install line, without onnxruntime-qnn."""
    if not module_available("onnxruntime_qnn"):
        return {"skipped": "onnxruntime-qnn is not installed (pip install 'edgekit[qnn]')"}
    target = cfg.npu_target
    step(f"NPU: export masked-demo at batch 1 for {target} (the HTP backend emulates the NPU on this CPU)")
    b = export_bundle(
        load_spec("masked-demo", batch=1), cfg.out / "npu" / "masked", ExportConfig(), source="masked-demo"
    )
    step("NPU: quantize every op (qnn profile), budget measured on the HTP backend")
    q = quantize_bundle(
        b.root,
        QuantizeConfig(
            profile="qnn", calib_samples=cfg.npu_calib, eval_samples=cfg.npu_n, eval_seed=cfg.seed, target=target
        ),
    )
    step(f"NPU: compile the context binary for {target}")
    built = build_bundle(b.root, target, "int8")
    step("NPU: check qnn:int8 (precompiled context) vs ort:fp32")
    doc = check_bundle(
        b.root, CheckConfig(reference="ort:fp32", candidate="qnn:int8", n=cfg.npu_n, seed=cfg.seed, target=target)
    )
    engine = built["engine"]
    return {
        "target": target,
        "bundle": str(b.root),
        "quantize": {
            "passed": q["passed"],
            "checks": q["budget"]["checks"],
            "share_8bit": q["qnn"]["share_8bit"],
            "promoted_16bit": q["qnn"]["promoted_16bit"],
            "measured_on": q["budget"]["measured_on"],
        },
        "build": {
            "engine": engine["path"],
            "bytes": engine["bytes"],
            "device": engine["device"],
            "qnn": engine["qnn"],
            "session_seconds": engine["session_seconds"],
        },
        "check": {
            "passed": doc["passed"],
            "failed": doc["failed"],
            "metrics": {k: v for k, v in doc["metrics"].items() if isinstance(v, (int, float))},
        },
        "note": "latency on this host is x86 emulation of the NPU; accuracy is the NPU's arithmetic",
    }


def print_demo(o: Output, report: dict[str, Any]) -> None:
    """The demo's tables, stage by stage."""
    exp = report["stages"]["export"]
    o.table(
        "export: torch → static ONNX, verified against torch",
        ["model", "bundle", "MB", "max abs err", "verified"],
        [(m, e["bundle"], e["bytes"] / 1e6, e["max_abs_error"], e["verified"]) for m, e in exp.items()],
    )
    q = report["stages"]["decode"]["quality"]
    rows = [
        (
            "masked-demo (MaskGIT, 8 steps)",
            q["masked"]["validity"],
            q["masked"]["event_accuracy"],
            q["masked"]["nll_per_token"],
            "—",
        ),
        ("ar-demo (KV cache, 64 steps)", q["ar"]["validity"], q["ar"]["event_accuracy"], q["ar"]["nll_per_token"], "—"),
        (
            "corpus (true samples)",
            q["corpus"]["validity"],
            q["corpus"]["event_accuracy"],
            q["corpus"]["nll_per_token"],
            "—",
        ),
        ("flow-demo on masked tokens", "—", "—", "—", f"{q['flow']['snr_db']:.1f} dB"),
    ]
    o.table(
        f"decode quality vs the corpus ground truth (ort fp32, n={report['stages']['decode']['n']}, seed={report['stages']['decode']['seed']})",
        ["model", "validity", "event acc.", "NLL/token", "SNR vs clean"],
        rows,
    )
    qz = report["stages"]["quantize"]
    rows = []
    for kind, r in qz.items():
        # The budget keys only (`--budget KEY=...`); each is one measure with one name (the
        # ground-truth quality per precision stays in the JSON: flow's snr_db vs clean frames
        # would be a second, different snr_db row here).
        for c in r["budget"]:
            rows.append(
                (kind, c["key"], c["value"], f"{c['op']} {c['limit']:g}: " + ("pass" if c["passed"] else "FAIL"))
            )
        rows.append(
            (
                kind,
                "size MB (FP32 -> INT8)",
                f"{r['sizes']['fp32_bytes'] / 1e6:.2f} -> {r['sizes']['int8_bytes'] / 1e6:.2f}",
                f"{r['sizes']['ratio']:.2f}x",
            )
        )
        speed = r.get("speed") or {}
        if speed.get("measured"):
            rows.append(
                (
                    kind,
                    f"ms per decode (FP32 -> INT8, {speed['isa']})",
                    f"{speed['fp32_ms_per_decode']:.1f} -> {speed['int8_ms_per_decode']:.1f}",
                    f"{speed['int8_speedup']:.2f}x",
                )
            )
    arith = next((r.get("arithmetic") for r in qz.values() if r.get("arithmetic")), None)
    title = "quantize: INT8 vs FP32 (held-out set, identical noise)"
    if arith:
        title += f"; scheme {arith['scheme']['name']} for this {arith['isa']} CPU"
    o.table(title, ["model", "budget metric", "INT8", "limit"], rows)
    print_demo_check(o, report["stages"]["check"])
    b = report["stages"]["build"]
    o.table(
        "build: lint + engine for the cpu target (--precision auto)",
        ["model", "lint", "precision", "engine", "MB", "runtime"],
        [
            (
                k,
                "pass" if s["lint_passed"] else f"{s['lint']['error']} error(s)",
                s["precision"],
                s["engine"],
                s["bytes"] / 1e6,
                s["runtime"],
            )
            for k, s in b.items()
        ],
    )
    for k, s in b.items():
        o.line(f"{k}: {s['precision']} because {s['precision_choice']}")
    prof = report["stages"]["profile"]
    t = prof["table"]  # the full side-by-side table, ratios and sweep are in the HTML report
    eng = prof["engine"]
    o.line(
        f"profile engine: {eng['runtime']}, the fastest here ("
        + ", ".join(f"{e} {ms:.1f} ms" for e, ms in sorted(eng["median_ms"].items(), key=lambda kv: kv[1]))
        + f" per {eng['precision']} decode, median of {eng['rounds']} interleaved rounds)"
    )
    o.table(
        f"profile: masked-demo on {eng['runtime']} ({prof.get('rows', '?')} rows per decode)",
        t["summary"]["columns"],
        t["summary"]["rows"],
    )
    for line in t["not_measured"] + ([t["nar_vs_ar"]] if t.get("nar_vs_ar") else []):
        o.line(line)
    print_frontier(o, t, prof.get("frontier"))
    o.line(f"profile report: {prof['html']} (JSON: {prof['json']})")
    npu = report["stages"].get("npu")
    if npu:
        _print_npu(o, npu)
    if report.get("timing"):
        print_timing(o, report["timing"])


def print_timing(o: Output, timing: dict[str, Any]) -> None:
    """The wall and CPU seconds of each stage, and the whole run in minutes with the machine."""
    rows = [(name, t["wall_s"], t["cpu_s"]) for name, t in timing["stages"].items()]
    o.table(
        "demo: time per stage (seconds)",
        ["stage", "wall", "CPU"],
        [*rows, ("total", timing["wall_s"], timing["cpu_s"])],
    )
    load = timing.get("load_avg_end")
    o.line(
        f"demo took {_minutes(timing['wall_s'])} wall, {_minutes(timing['cpu_s'])} CPU on {timing.get('cpu') or 'this CPU'}"
        f" ({timing.get('cores') or '?'} cores" + (f", load average {load[0]:g} at the end)" if load else ")")
    )


def _minutes(seconds: float) -> str:
    m, s = divmod(round(seconds), 60)
    return f"{m} min {s:02d} s" if m else f"{s} s"


def _print_npu(o: Output, npu: dict[str, Any]) -> None:
    if "skipped" in npu:
        o.line(f"NPU stage skipped: {npu['skipped']}")
        return
    q, b, c = npu["quantize"], npu["build"], npu["check"]
    rows = [
        (
            "quantize (qnn profile)",
            c_["key"],
            c_["value"],
            f"{c_['op']} {c_['limit']:g}: " + ("pass" if c_["passed"] else "FAIL"),
        )
        for c_ in q["checks"]
    ]
    rows.append(
        (
            "quantize (qnn profile)",
            "activations at 8 bit",
            q["share_8bit"],
            f"{q['promoted_16bit']} tensor(s) at 16 bit",
        )
    )
    rows += [
        ("check qnn:int8 vs ort:fp32", k, v, "FAIL" if k in c["failed"] else "")
        for k, v in c["metrics"].items()
        if k in ("token_agreement", "top1_agreement", "logits_kl") or k.startswith("quality_drop.event")
    ]
    rows.append(("check qnn:int8 vs ort:fp32", "verdict", "pass" if c["passed"] else "FAIL", ", ".join(c["failed"])))
    s = b["session_seconds"]
    rows.append(
        (
            f"build {npu['target']}",
            f"context binary ({b['device']})",
            b["bytes"] / 1e6,
            f"MB; session {s['load_precompiled']:.2f} s loaded vs {s['compile']:.2f} s compiling",
        )
    )
    o.table(
        f"NPU: masked-demo on {npu['target']} ({q['measured_on']}; {npu['note']})",
        ["stage", "metric", "value", ""],
        rows,
    )
