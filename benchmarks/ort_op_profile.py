"""Where an INT8 forward spends its time on ONNX Runtime CPU, against FP32: kernel time per op type
from ORT's own profiler, on the feeds a real decode gives the network.

    python benchmarks/ort_op_profile.py BUNDLE [--runs 20] [--threads 1] [--out benchmarks/results/ort_op_profile.json]

BUNDLE must hold an ``int8`` model (``edgekit quantize``). Each precision runs ``--runs`` forwards
on the calls of one recorded FP32 decode (round robin) with ``SessionOptions.enable_profiling``;
the table sums ORT's ``Node`` events per op type (QGemm, MatMulIntegerToFloat, DynamicQuantizeLinear,
QuantizeLinear, … for INT8; MatMul, Gemm, … for FP32) and says which share of the kernel time each
takes, so "INT8 does not pay here" comes with the ops that eat the gain. Run it alone; the CPU
model and flags go into the JSON.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from collections import defaultdict
from pathlib import Path
from typing import Any

from edgekit.bundle import Bundle
from edgekit.host import HostFacts, cpu_identity
from edgekit.quantize.calibrate import record_trajectories


def _profile(model: Path, feeds: list[dict[str, Any]], runs: int, threads: int) -> dict[str, Any]:
    import onnxruntime as ort

    with tempfile.TemporaryDirectory(prefix="edgekit-opprof-") as tmp:
        so = ort.SessionOptions()
        so.intra_op_num_threads = threads
        so.enable_profiling = True
        so.profile_file_prefix = str(Path(tmp) / "ort")
        sess = ort.InferenceSession(str(model), so, providers=["CPUExecutionProvider"])
        for i in range(3):  # warm-up: ORT allocates and picks kernels on the first calls
            sess.run(None, feeds[i % len(feeds)])
        for i in range(runs):
            sess.run(None, feeds[i % len(feeds)])
        events = json.loads(Path(sess.end_profiling()).read_text())
    by_op: dict[str, float] = defaultdict(float)
    for e in events:
        if e.get("cat") == "Node" and e.get("name", "").endswith("_kernel_time"):
            by_op[e["args"]["op_name"]] += e["dur"] / 1000.0  # us -> ms
    # The profile covers warm-up and measured runs alike: per-run figures from the measured share.
    total = sum(by_op.values())
    per_run = total / (runs + 3)
    ops = sorted(by_op.items(), key=lambda kv: -kv[1])
    return {
        "kernel_ms_per_forward": per_run,
        "ops": [{"op": op, "share": ms / total, "ms_per_forward": ms / (runs + 3)} for op, ms in ops],
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("bundle", type=Path)
    ap.add_argument("--runs", type=int, default=20)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--out", type=Path, default=Path("benchmarks/results/ort_op_profile.json"))
    args = ap.parse_args()
    bundle = Bundle.load(args.bundle)
    if not bundle.has("int8"):
        sys.exit(f"error: {args.bundle} has no int8 model; run `edgekit quantize {args.bundle}` first")
    from edgekit.runtimes.ort import OrtOptions, OrtRuntime

    with OrtRuntime(bundle.path_of("fp32"), OrtOptions(intra_op_threads=args.threads)) as fp32:
        feeds = record_trajectories(bundle, fp32, bundle.batch, seed=0).feeds
    host = HostFacts.detect()
    doc: dict[str, Any] = {
        "schema": "edgekit.bench.ort_op_profile/1",
        "cpu": cpu_identity(),
        "isa_class": host.isa_class,
        "bundle": str(args.bundle),
        "batch": bundle.batch,
        "threads": args.threads,
        "calls": len(feeds),
    }
    for precision in ("fp32", "int8"):
        doc[precision] = _profile(bundle.path_of(precision), feeds, args.runs, args.threads)
    doc["int8_speedup_kernel_time"] = doc["fp32"]["kernel_ms_per_forward"] / doc["int8"]["kernel_ms_per_forward"]
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(doc, indent=1))
    print(f"{doc['cpu'].get('model')} ({host.isa_class}), {bundle.name} batch {bundle.batch}, {args.threads} thread(s)")
    for precision in ("fp32", "int8"):
        p = doc[precision]
        print(f"\n{precision}: {p['kernel_ms_per_forward']:.2f} ms kernel time per forward")
        for row in p["ops"][:10]:
            print(f"  {row['op']:<28} {100 * row['share']:5.1f} %  {row['ms_per_forward']:.3f} ms")
    print(f"\nINT8/FP32 kernel time per forward: {doc['int8_speedup_kernel_time']:.2f}x faster\nwrote {args.out}")


if __name__ == "__main__":
    main()
