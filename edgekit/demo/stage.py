"""`edgekit demo`'s run: the whole pipeline on the built-in models and the default CPU target,
composed from the stages (export, decode, quantize, check, build, profile), and its sizes."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from edgekit.builder import build_bundle, demo_build_stage, module_available
from edgekit.bundle import Bundle
from edgekit.check import CheckConfig, check_bundle, demo_check
from edgekit.demo.clock import StageClock
from edgekit.evaluate import evaluate
from edgekit.export import ExportConfig, export_bundle
from edgekit.models import load_spec
from edgekit.models.corpus import default_corpus
from edgekit.profile import DEMO_FRONTIER_STEPS, DEMO_SWEEP_LENGTHS, demo_profile
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
        "profile masked-demo against the AR baseline on the fastest engine here (with the quality-latency"
        " frontier), and write the HTML report",
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
