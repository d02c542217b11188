"""Where an INT8 forward spends its time on ONNX Runtime CPU, against FP32: kernel time per op type
from ORT's own profiler, on the feeds a real decode gives the network.

    python benchmarks/ort_op_profile.py BUNDLE [--runs 20] [--threads 1] [--out benchmarks/results/ort_op_profile.json]
    python benchmarks/ort_op_profile.py BUNDLE --runtime openvino [--threads 2]

With ``--runtime openvino`` the same on OpenVINO's CPU plugin, as ``edgekit run --runtime openvino``
compiles each model (f32 inference precision, edgekit's Sin rewrite): its per-node counters
(``PERF_COUNT``) summed per "layer type (kernel)", e.g. ``Convolution (brgconv_avx512_I8)`` (an int8
kernel) against ``Convolution (brgconv_avx512_f32)`` (a float fallback), ``Sin (ref_any_f32)`` (a
scalar reference kernel).

BUNDLE must hold an ``int8`` model (``edgekit quantize``). Each precision is opened as
``edgekit run --runtime ort`` opens it (edgekit's fusions and disabled optimizers, IO binding) with
ORT's profiler on, and runs ``--runs`` forwards (after 3 warm-up forwards, left out) on the calls of
one recorded FP32 decode (round robin; a long decode's recording keeps every n-th call). The table
sums ORT's ``Node`` events per op type (QGemm, MatMulIntegerToFloat, QuantizeLinear, … for INT8;
MatMul, Gemm, … for FP32; "MatMul [x·x]" is a MatMul of two activations, the attention core) side
by side, ms per forward and share of that precision's kernel time, so "INT8 does not pay here" comes
with the ops that eat the gain; the JSON adds the 15 slowest nodes and the wall time of a forward.
Run it alone; the CPU model and flags go into the JSON.
"""

from __future__ import annotations

import argparse
import bisect
import json
import statistics
import sys
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

from edgekit._userhooks import TRUST_CODE
from edgekit.bundle import Bundle
from edgekit.errors import EdgekitError
from edgekit.host import HostFacts, cpu_identity
from edgekit.quantize.calibrate import record_trajectories

# Op types of a MatMul over two activations (the attention core's q·kᵀ and p·v stay float in INT8):
# told apart from a weight's MatMul by ORT's trace, which lists only the inputs a run feeds it.
_MATMULS = ("MatMul", "FusedMatMul")
WARMUP = 3  # ORT allocates and picks kernels on the first calls: not in the figures


def op_key(event: dict[str, Any]) -> str:
    """The row a trace ``Node`` event counts in: its op type, with "[x·x]" added for a MatMul whose
    inputs are all activations (no weight among them)."""
    args = event["args"]
    op = str(args["op_name"])
    shapes = args.get("input_type_shape") or []
    if op in _MATMULS and len(shapes) >= 2:
        return f"{op} [x·x]"
    return op


def kernel_times(events: list[dict[str, Any]], warmup: int) -> tuple[dict[str, float], dict[str, float], int]:
    """({row: kernel ms}, {node: kernel ms}, measured runs) per forward, each the median over the
    runs after the first ``warmup`` in an ORT trace (``model_run`` events mark each run): a run the
    host interrupted does not move the figures (on a shared 2-core machine one such run made four
    nodes of a ten-run mean 20x their median)."""
    spans = sorted(
        (e["ts"], e["ts"] + e["dur"]) for e in events if e.get("cat") == "Session" and e.get("name") == "model_run"
    )
    if len(spans) <= warmup:
        raise ValueError(f"the trace has {len(spans)} runs, not more than the {warmup} warm-up runs")
    spans = spans[warmup:]
    starts = [a for a, _ in spans]
    per_run_op: list[dict[str, float]] = [defaultdict(float) for _ in spans]
    per_run_node: list[dict[str, float]] = [defaultdict(float) for _ in spans]
    for e in events:
        name = str(e.get("name", ""))
        if e.get("cat") != "Node" or not name.endswith("_kernel_time") or e["ts"] < starts[0]:
            continue
        run = bisect.bisect_right(starts, e["ts"]) - 1
        per_run_op[run][op_key(e)] += e["dur"] / 1000.0  # us -> ms
        per_run_node[run][name.removesuffix("_kernel_time")] += e["dur"] / 1000.0
    return _median_run(per_run_op), _median_run(per_run_node), len(spans)


def _median_run(per_run: list[dict[str, float]]) -> dict[str, float]:
    """{key: the median over runs of its ms} (0 in a run that lacks it)."""
    keys = {k for r in per_run for k in r}
    return {k: float(statistics.median(r.get(k, 0.0) for r in per_run)) for k in keys}


def _forward_doc(by_op: dict[str, float], by_node: dict[str, float], runs: int, walls: list[float]) -> dict[str, Any]:
    """One precision's record: kernel ms per forward, rows by op (their share) and the 15 slowest
    nodes, and the median wall ms of a forward."""
    total = sum(by_op.values())
    ops = sorted(by_op.items(), key=lambda kv: -kv[1])
    nodes = sorted(by_node.items(), key=lambda kv: -kv[1])[:15]
    return {
        "runs": runs,
        "kernel_ms_per_forward": total,
        "wall_ms_per_forward": float(statistics.median(walls)),
        "ops": [{"op": op, "share": ms / total, "ms_per_forward": ms} for op, ms in ops],
        "top_nodes": [{"node": n, "share": ms / total, "ms_per_forward": ms} for n, ms in nodes],
    }


def profile_forward(model: Path, feeds: list[dict[str, Any]], runs: int, threads: int) -> dict[str, Any]:
    """The model as ``edgekit run --runtime ort`` opens it (edgekit's contrib fusions, its disabled
    optimizers, IO binding), with ORT's profiler on: kernel ms per op type and per node, per
    forward, and the wall ms of a forward (what ``run`` costs beyond its kernels: ORT's executor,
    binding the feeds)."""
    from edgekit.runtimes.ort import OrtOptions, OrtRuntime

    walls = []
    with OrtRuntime(model, OrtOptions(intra_op_threads=threads, profiling=True)) as rt:
        for i in range(WARMUP + runs):
            t0 = time.perf_counter_ns()
            rt.run(feeds[i % len(feeds)])
            if i >= WARMUP:
                walls.append((time.perf_counter_ns() - t0) / 1e6)
        trace = rt.end_profiling()
    try:
        by_op, by_node, measured = kernel_times(json.loads(trace.read_text()), WARMUP)
    finally:
        trace.unlink(missing_ok=True)
    return _forward_doc(by_op, by_node, measured, walls)


def profile_forward_openvino(model: Path, feeds: list[dict[str, Any]], runs: int, threads: int) -> dict[str, Any]:
    """As ``profile_forward`` on OpenVINO's CPU plugin: kernel ms per "layer type (kernel)" and per
    node, the median over ``runs`` forwards after the warm-up, and the wall ms of a forward."""
    from edgekit.runtimes.openvino import OpenVinoRuntime, OvOptions

    walls, per_run_op, per_run_node = [], [], []
    options = OvOptions(threads=threads, inference_precision="f32", profiling=True, double_buffer=False)
    with OpenVinoRuntime(model, options) as rt:
        for i in range(WARMUP + runs):
            t0 = time.perf_counter_ns()
            rt.run(feeds[i % len(feeds)])
            if i < WARMUP:
                continue
            walls.append((time.perf_counter_ns() - t0) / 1e6)
            ops: dict[str, float] = defaultdict(float)
            nodes: dict[str, float] = defaultdict(float)
            for entry in rt.op_profile():
                ops[f"{entry['type']} ({entry['kernel']})"] += entry["us"] / 1e3
                nodes[entry["node"]] += entry["us"] / 1e3
            per_run_op.append(ops)
            per_run_node.append(nodes)
    return _forward_doc(_median_run(per_run_op), _median_run(per_run_node), runs, walls)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("bundle", type=Path)
    ap.add_argument("--runs", type=int, default=20)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--out", type=Path, default=Path("benchmarks/results/ort_op_profile.json"))
    ap.add_argument("--runtime", choices=("ort", "openvino"), default="ort")
    ap.add_argument("--trust-code", action="store_true", help="run the condition sampler of a copied bundle")
    args = ap.parse_args()
    TRUST_CODE.set(args.trust_code)
    try:
        bundle = Bundle.load(args.bundle)
    except EdgekitError as exc:
        sys.exit(f"error: {exc}")
    if not bundle.has("int8"):
        sys.exit(f"error: {args.bundle} has no int8 model; run `edgekit quantize {args.bundle}` first")
    from edgekit.runtimes.ort import OrtOptions, OrtRuntime

    try:  # a copied bundle's condition sampler is refused without --trust-code: one line
        with OrtRuntime(bundle.path_of("fp32"), OrtOptions(intra_op_threads=args.threads)) as fp32:
            feeds = record_trajectories(bundle, fp32, bundle.batch, seed=0).feeds
    except EdgekitError as exc:
        sys.exit(f"error: {exc}")
    host = HostFacts.detect()
    doc: dict[str, Any] = {
        "schema": "edgekit.bench.ort_op_profile/1",
        "runtime": args.runtime,
        "cpu": cpu_identity(),
        "isa_class": host.isa_class,
        "bundle": str(args.bundle),
        "batch": bundle.batch,
        "threads": args.threads,
        "calls": len(feeds),
    }
    profile = profile_forward if args.runtime == "ort" else profile_forward_openvino
    for precision in ("fp32", "int8"):
        doc[precision] = profile(bundle.path_of(precision), feeds, args.runs, args.threads)
    doc["int8_speedup_kernel_time"] = doc["fp32"]["kernel_ms_per_forward"] / doc["int8"]["kernel_ms_per_forward"]
    doc["int8_speedup_wall"] = doc["fp32"]["wall_ms_per_forward"] / doc["int8"]["wall_ms_per_forward"]
    doc["side_by_side"] = side_by_side(doc["fp32"], doc["int8"])
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(doc, indent=1))
    print(
        f"{doc['cpu'].get('model')} ({host.isa_class}), {args.runtime}, {bundle.name} batch {bundle.batch}, "
        f"{args.threads} thread(s)"
    )
    print(f"\n{'op type':<44} {'FP32 ms':>9} {'share':>6} {'INT8 ms':>9} {'share':>6}")
    for row in doc["side_by_side"]:
        f, q = row["fp32_ms"], row["int8_ms"]
        print(f"  {row['op']:<42} {f:9.3f} {100 * row['fp32_share']:5.1f}% {q:9.3f} {100 * row['int8_share']:5.1f}%")
    for precision in ("fp32", "int8"):
        kernels, wall = doc[precision]["kernel_ms_per_forward"], doc[precision]["wall_ms_per_forward"]
        print(f"{precision}: {kernels:.2f} ms kernels, {wall:.2f} ms wall per forward")
    print(
        f"INT8/FP32 per forward: {doc['int8_speedup_kernel_time']:.2f}x faster in kernel time, "
        f"{doc['int8_speedup_wall']:.2f}x in wall time\nwrote {args.out}"
    )


def side_by_side(fp32: dict[str, Any], int8: dict[str, Any]) -> list[dict[str, Any]]:
    """One row per op type of either profile, by the larger of its two times: ms per forward and
    share of that precision's kernel time (0 where the op does not occur)."""
    f = {o["op"]: o for o in fp32["ops"]}
    q = {o["op"]: o for o in int8["ops"]}
    rows = [
        {
            "op": op,
            "fp32_ms": f[op]["ms_per_forward"] if op in f else 0.0,
            "fp32_share": f[op]["share"] if op in f else 0.0,
            "int8_ms": q[op]["ms_per_forward"] if op in q else 0.0,
            "int8_share": q[op]["share"] if op in q else 0.0,
        }
        for op in {*f, *q}
    ]
    return sorted(rows, key=lambda r: -max(r["fp32_ms"], r["int8_ms"]))


if __name__ == "__main__":
    main()
