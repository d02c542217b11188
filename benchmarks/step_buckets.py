"""Step-aware INT8 against one scale per tensor, side by side on the demo models (issue #27):

    python benchmarks/step_buckets.py [--out benchmarks/results/step_buckets.json] [--models flow,masked]
                                      [--qnn] [--png docs/img/step_buckets_flow.png]

For each model: ``edgekit quantize`` with one scale and with ``--step-buckets auto`` (cpu profile,
this host's scheme, default budgets, the same held-out set), then the budget result, the
fallbacks, the INT8 share of FLOPs, the bundle bytes of the INT8 model, per-decode latency of
FP32 / one-scale INT8 / bucketed INT8 (ORT and OpenVINO, opened as ``edgekit run`` opens them,
interleaved in one process with an idle gap before each decode, medians), for the flow model
also both quantized for 0.5 dB of headroom under ``check``'s 1 dB gate (the fallbacks each needs),
and the resident memory that opening and decoding each adds to a process (one subprocess each). With
``--qnn`` also the qnn profile on the emulated HTP (share of activations left at 8 bit; slow:
minutes per model). ``--png``: the flow model's per-step range drift and per-step SNR, one scale
vs bucketed. Run it alone (no tests or training beside it): the latency rows are ratios measured
side by side, the CPU model and flags are recorded.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

from edgekit.bundle import Bundle
from edgekit.host import HostFacts, cpu_identity
from edgekit.probes.latency import SPIN_GAP_S, interleaved
from edgekit.quantize import QuantizeConfig, quantize_bundle
from edgekit.quantize.budget import decode_eval_set
from edgekit.runtimes import open_runtime

BATCH = {"masked": 8, "flow": 2, "ar": 8}
HEADROOM_DROP_DB = 0.5  # `check`'s flow gate allows a 1 dB ground-truth SNR drop: half of it left
RSS_SCRIPT = """
import sys
from edgekit.bundle import Bundle
from edgekit.quantize.budget import decode_eval_set
from edgekit.runtimes import open_runtime

def rss_kb():
    for line in open("/proc/self/status"):
        if line.startswith("VmRSS:"):
            return int(line.split()[1])

b = Bundle.load(sys.argv[1])
decode_eval_set  # imported before the baseline: only what opening and decoding add is counted
before = rss_kb()
with open_runtime(b, sys.argv[2], sys.argv[3]) as rt:
    decode_eval_set(b, rt, b.batch, 0, {})
    print(rss_kb() - before)
"""


def _say(msg: str) -> None:
    print(f"· {msg}", file=sys.stderr, flush=True)


def _export(kind: str, out: Path, batch: int | None = None) -> Path:
    from edgekit.export.to_bundle import export_bundle
    from edgekit.models import load_spec

    export_bundle(load_spec(f"{kind}-demo", batch=batch or BATCH[kind]), out, source=f"{kind}-demo")
    return out


def _int8_bytes(root: Path) -> int:
    b = Bundle.load(root)
    buckets = b.step_buckets()
    names = list(buckets.graphs) if buckets is not None else ["int8"]
    total = 0
    for name in names:
        art = b.manifest["artifacts"][name]
        total += art["bytes"] + sum(s["bytes"] for s in art.get("side_files", []) if name == names[0])
    return total


def _rss_mb(root: Path, runtime: str, precision: str) -> float:
    out = subprocess.run(
        [sys.executable, "-c", RSS_SCRIPT, str(root), runtime, precision], capture_output=True, text=True, check=True
    )
    return int(out.stdout.strip().splitlines()[-1]) / 1024  # KiB -> MiB


def _latency(single: Path, bucketed: Path, runtime: str, rounds: int) -> dict[str, float]:
    """Median ms per decode, interleaved, each runtime opened as `edgekit run` opens it (a bucketed
    model's ORT sessions spin inside runs only and share one arena). Every timed decode follows an
    idle gap (SPIN_GAP_S): without it, a session's threads still spinning after its decode took
    the next candidate's cores and whichever came next looked slower."""
    b1, bn = Bundle.load(single), Bundle.load(bucketed)
    rts = {
        "fp32": open_runtime(b1, runtime, "fp32"),
        "int8 one scale": open_runtime(b1, runtime, "int8"),
        "int8 bucketed": open_runtime(bn, runtime, "int8"),
    }
    try:
        fns = {k: (lambda rt=rt: decode_eval_set(b1, rt, b1.batch, 0, {})) for k, rt in rts.items()}
        ms = interleaved(fns, rounds, warmup=2, gap_s=SPIN_GAP_S)
    finally:
        for rt in rts.values():
            rt.close()
    return {k: float(np.median(v)) for k, v in ms.items()}


def _summary(s: dict[str, Any]) -> dict[str, Any]:
    keep = ("passed", "int8_flop_share", "speed", "step_buckets", "qnn")
    out = {k: s.get(k) for k in keep}
    out["budget"] = {c["key"]: c["value"] for c in s["budget"]["checks"]}
    out["fallback"] = [f["label"] for f in s["fallback"]]
    if out.get("step_buckets"):
        out["step_buckets"] = {k: v for k, v in out["step_buckets"].items() if k not in ("drift", "per_step")}
    return out


def measure(kind: str, tmp: Path, rounds: int, qnn: bool, cpu: bool = True) -> dict[str, Any]:
    doc: dict[str, Any] = {"batch": BATCH[kind]}
    if cpu:
        doc |= _measure_cpu(kind, _export(kind, tmp / kind / "fp32"), tmp, rounds)
    if qnn and _has("onnxruntime_qnn"):
        base = _export(kind, tmp / kind / "fp32-b1", batch=1)  # the NPU stage's batch (the HTP emulation is slow)
        for label, buckets in (("qnn one scale", None), ("qnn bucketed", "auto")):
            root = tmp / kind / label.replace(" ", "-")
            shutil.copytree(base, root)
            _say(f"{kind}: quantize --profile qnn ({label}; the HTP emulation takes minutes)")
            s = quantize_bundle(root, QuantizeConfig(profile="qnn", step_buckets=buckets))
            doc[label] = _summary(s)
    return doc


def _measure_cpu(kind: str, base: Path, tmp: Path, rounds: int) -> dict[str, Any]:
    doc: dict[str, Any] = {}
    roots = {}
    for label, buckets in (("one scale", None), ("bucketed", "auto")):
        root = tmp / kind / label.replace(" ", "-")
        shutil.copytree(base, root)
        _say(f"{kind}: quantize ({label})")
        s = quantize_bundle(root, QuantizeConfig(step_buckets=buckets))
        doc[label] = _summary(s) | {"int8_bytes": _int8_bytes(root)}
        roots[label] = root
        if buckets:
            doc["per_step"] = (s.get("step_buckets") or {}).get("per_step")
            doc["drift"] = (s.get("step_buckets") or {}).get("drift")
    doc["bytes_ratio"] = doc["bucketed"]["int8_bytes"] / doc["one scale"]["int8_bytes"]
    if kind == "flow":
        # Issue #27's CPU goal: 0.5 dB of headroom under check's 1 dB ground-truth gate, with fewer
        # fallbacks than one scale needs for the same headroom.
        for label, buckets in (("one scale, 0.5 dB headroom", None), ("bucketed, 0.5 dB headroom", "auto")):
            root = tmp / kind / label.replace(" ", "-").replace(",", "")
            shutil.copytree(base, root)
            _say(f"{kind}: quantize ({label})")
            s = quantize_bundle(root, QuantizeConfig(step_buckets=buckets, budget={"gt_snr_drop_db": HEADROOM_DROP_DB}))
            doc[label] = _summary(s)
    runtimes = ["ort"] + (["openvino"] if _has("openvino") else [])
    for runtime in runtimes:
        _say(f"{kind}: latency per decode on {runtime}, {rounds} interleaved rounds")
        doc[f"latency_ms_{runtime}"] = _latency(roots["one scale"], roots["bucketed"], runtime, rounds)
        doc[f"rss_mb_{runtime}"] = {label: _rss_mb(roots[label], runtime, "int8") for label in roots}
    return doc


def _has(module: str) -> bool:
    from edgekit.host import module_available

    return module_available(module)


def plot(doc: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    steps, drift = doc.get("per_step"), doc.get("drift")
    fig, (a, b) = plt.subplots(1, 2, figsize=(10, 3.6))
    if drift:
        a.plot(drift["positions"], drift["mean_share_of_range"], "o-")
        a.set_xlabel("t (ODE time)")
        a.set_ylabel("mean share of the calibrated range")
        a.set_title("range drift across the decode", fontsize=9, loc="left")
    for edge in (doc["bucketed"].get("step_buckets") or {}).get("boundaries", []):
        a.axvline(edge, color="k", linestyle="--", linewidth=1)
        b.axvline(edge, color="k", linestyle="--", linewidth=1)
    if steps:
        b.plot(steps["position"], steps["one_scale_db"], "s-", label="one scale")
        b.plot(steps["position"], steps["bucketed_db"], "o-", label="step buckets")
        b.set_xlabel("t (ODE time)")
        b.set_ylabel("output SNR vs FP32, dB (teacher-forced)")
        b.legend(fontsize=8)
        b.set_title("per-step error, all weighted ops INT8", fontsize=9, loc="left")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, default=Path("benchmarks/results/step_buckets.json"))
    ap.add_argument("--models", default="flow,masked")
    ap.add_argument("--rounds", type=int, default=15)
    ap.add_argument("--qnn", action="store_true")
    ap.add_argument("--qnn-only", action="store_true", help="only the qnn profile rows (accuracy: may share the CPU)")
    ap.add_argument("--png", type=Path, default=None)
    args = ap.parse_args()
    host = HostFacts.detect()
    doc: dict[str, Any] = {
        "schema": "edgekit.bench.step_buckets/1",
        "cpu": cpu_identity(),
        "isa_class": host.isa_class,
        "models": {},
    }
    with tempfile.TemporaryDirectory(prefix="edgekit-buckets-") as tmp:
        for kind in args.models.split(","):
            doc["models"][kind] = measure(
                kind, Path(tmp), args.rounds, args.qnn or args.qnn_only, cpu=not args.qnn_only
            )
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(doc, indent=1, default=str))
    if args.png is not None and "per_step" in doc["models"].get("flow", {}):
        plot(doc["models"]["flow"], args.png)
    print(f"{doc['cpu']['model']} ({host.isa_class})")
    for kind, m in doc["models"].items():
        print(
            f"\n{kind} (batch {m['batch']})"
            + (f": bytes bucketed/one scale {m['bytes_ratio']:.2f}x" if "bytes_ratio" in m else "")
        )
        for label in (
            "one scale",
            "bucketed",
            "one scale, 0.5 dB headroom",
            "bucketed, 0.5 dB headroom",
            "qnn one scale",
            "qnn bucketed",
        ):
            r = m.get(label)
            if not r:
                continue
            sb = r.get("step_buckets") or {}
            q = r.get("qnn") or {}
            print(
                f"  {label:<26} passed {r['passed']}  buckets {sb.get('n', 1)}  fallbacks {len(r['fallback'])}  "
                f"INT8 FLOPs {r['int8_flop_share']['weighted']:.0%}  budget {r['budget']}"
                + (f"  8-bit activations {q.get('share_8bit')}" if q else "")
            )
        for runtime in ("ort", "openvino"):
            lat = m.get(f"latency_ms_{runtime}")
            if lat:
                print(
                    f"  {runtime}: ms/decode "
                    + ", ".join(f"{k} {v:.1f}" for k, v in lat.items())
                    + f"; bucketed/one scale {lat['int8 bucketed'] / lat['int8 one scale']:.2f}x"
                    + "; RSS added by open + decode, MB "
                    + ", ".join(f"{k} {v:.1f}" for k, v in m[f"rss_mb_{runtime}"].items())
                )
    print(f"\nwrote {args.out}")


if __name__ == "__main__":
    main()
