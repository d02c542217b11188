"""OpenVINO's routes for an intel-cpu engine side by side (issue #44, point 2): per forward, FP32
and INT8, the masked and flow demos, in one interleaved group per demo:

    python benchmarks/openvino_routes.py --masked edgekit-demo/masked --flow edgekit-demo/flow

Bundles with an int8 model come from `edgekit demo -o edgekit-demo`; a path that does not exist is
made there (export at batch 8, then `quantize`, about a minute each on 2 cores).

Routes (``edgekit.builder.openvino_routes``, what `edgekit build --target intel-cpu` compares):
``onnx`` (the bundle's ONNX compiled by the CPU plugin: what the blob holds), ``ir`` (the IR
``ov.save_model`` writes from it), ``ir-fp16`` (the same with f16-stored float weights; for the
QDQ model OpenVINO writes the very same files, so it is not timed twice). Every route is compiled
with the intel-cpu target's settings (LATENCY, f32; ``--threads``) and fed the same feed (the
middle call of one recorded decode); ``measure_routes`` times them round-robin, ``--forwards``
forwards back to back per call, ``--rounds`` calls each.

Prints per demo each route's ms per forward (median [p25-p75]), its SNR against the FP32 model's
outputs on the decode's feeds, the exec graph's weighted kernels by runtime precision (what ran
as int8, what stayed float), and INT8/FP32 per route (FP32 ``onnx`` / INT8 route: the issue's
goal is >= 2.2 on the masked demo), with the CPU, its ISA flags, OpenVINO's version and the load
average before and after. A smoke run: ``--forwards 3 --rounds 2``.
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
from shipped_engine import ensure_bundle  # benchmarks/ is the script's folder: its first sys.path entry

from edgekit.bundle import Bundle
from edgekit.host import HostFacts

GOAL = 2.2


def measure_demo(root: Path, work: Path, threads: int, rounds: int, forwards: int) -> dict[str, Any]:
    """Every route of both precisions opened at once, judged on one decode's feeds, timed interleaved."""
    from edgekit.builder.openvino_routes import measure_routes, route_accuracy, route_feeds, write_routes
    from edgekit.runtimes.openvino import OpenVinoRuntime, options_for
    from edgekit.runtimes.openvino_ir import exec_precisions
    from edgekit.targets import load_target

    bundle = Bundle.load(root)
    settings = load_target("intel-cpu").openvino
    opened: dict[str, OpenVinoRuntime] = {}
    notes: dict[str, str] = {}
    try:
        for precision in ("fp32", "int8"):
            routes, unavailable = write_routes(bundle.path_of(precision), work / precision)
            notes |= {f"{precision} {k}": v for k, v in unavailable.items()}
            for name, route in routes.items():
                if route.same_as:
                    notes[f"{precision} {name}"] = route.note or f"same as {route.same_as}"
                    continue
                opened[f"{precision} {name}"] = OpenVinoRuntime(route.model, options_for(settings, precision, threads))
        feeds, how = route_feeds(bundle, opened["fp32 onnx"])
        outputs = {k: [{n: np.array(v) for n, v in rt.run(f).items()} for f in feeds] for k, rt in opened.items()}
        fp32 = outputs["fp32 onnx"]
        accuracy, _ = route_accuracy(outputs, fp32, source="fp32 onnx")
        samples = measure_routes(opened, feeds[len(feeds) // 2], rounds=rounds, burst=forwards)
        kernels = {k: exec_precisions(rt.compiled) for k, rt in opened.items()}
    finally:
        for rt in opened.values():
            rt.close()
    stats = {
        k: {
            "median_ms": float(np.median(v)),
            "p25_ms": float(np.percentile(v, 25)),
            "p75_ms": float(np.percentile(v, 75)),
            "snr_vs_fp32_db": accuracy[k]["snr_vs_fp32_db"],
            "exec": kernels[k],
        }
        for k, v in samples.items()
    }
    base = stats["fp32 onnx"]["median_ms"]
    int8_over_fp32 = {k: base / s["median_ms"] for k, s in stats.items() if k.startswith("int8")}
    same_route = {
        r: stats[f"fp32 {r}"]["median_ms"] / stats[f"int8 {r}"]["median_ms"]
        for r in ("onnx", "ir")
        if f"fp32 {r}" in stats and f"int8 {r}" in stats
    }
    return {
        "bundle": str(root),
        "batch": bundle.batch,
        "feeds": how,
        "stats": stats,
        "notes": notes,
        "int8_over_fp32_onnx": int8_over_fp32,
        "int8_over_fp32_same_route": same_route,
    }


def _kernels(exec_table: dict[str, dict[str, int]]) -> str:
    return " ".join(f"{t}:" + ",".join(f"{p}x{n}" for p, n in ops.items()) for t, ops in exec_table.items())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument(
        "--masked", type=Path, default=Path("edgekit-demo/masked"), help="masked demo bundle (made if absent)"
    )
    ap.add_argument("--flow", type=Path, default=Path("edgekit-demo/flow"), help="flow demo bundle (made if absent)")
    ap.add_argument("--demos", default="masked,flow", help="comma-separated: which demos to run")
    ap.add_argument("--threads", type=int, default=0, help="OpenVINO inference threads (0 = the plugin's choice)")
    ap.add_argument("--rounds", type=int, default=20, help="interleaved rounds (each route timed once per round)")
    ap.add_argument("--forwards", type=int, default=5, help="forwards back to back per timed call")
    ap.add_argument("--json", type=Path, help="also write the results here")
    args = ap.parse_args()

    from edgekit.runtimes.openvino import openvino_version

    wanted = {d.strip() for d in args.demos.split(",") if d.strip()}
    if not wanted or wanted - {"masked", "flow"}:
        ap.error(f"--demos {args.demos!r}: give masked, flow or both")
    host = HostFacts.detect()
    load_before = os.getloadavg()
    started = time.time()
    sources = {"masked": (args.masked, "masked-demo"), "flow": (args.flow, "flow-demo")}
    bundles = {name: ensure_bundle(path, model) for name, (path, model) in sources.items() if name in wanted}
    results: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="edgekit-ov-routes-") as tmp:
        for name, path in bundles.items():
            results[name] = measure_demo(path, Path(tmp) / name, args.threads, args.rounds, args.forwards)
    doc = {
        "cpu": host.cpu,
        "isa": list(host.isa),
        "isa_class": host.isa_class,
        "cores": os.cpu_count(),
        "openvino": openvino_version(),
        "threads": args.threads,
        "rounds": args.rounds,
        "forwards": args.forwards,
        "load_before": [round(x, 2) for x in load_before],
        "load_after": [round(x, 2) for x in os.getloadavg()],
        "seconds": round(time.time() - started, 1),
        "demos": results,
    }
    print(
        f"CPU: {host.cpu} ({os.cpu_count()} cores); ISA flags: {' '.join(host.isa) or 'none read'} "
        f"(class {host.isa_class}); OpenVINO {doc['openvino']}; threads {args.threads or 'plugin default'}"
    )
    print(
        f"load average before {doc['load_before']}, after {doc['load_after']}; {args.rounds} rounds x "
        f"{args.forwards} forwards, interleaved"
    )
    for name, res in results.items():
        print(f"\n{name} demo (batch {res['batch']}; accuracy on {res['feeds']}): ms per forward, median [p25-p75]")
        for key, row in res["stats"].items():
            print(
                f"  {key:14s} {row['median_ms']:7.3f} [{row['p25_ms']:7.3f}-{row['p75_ms']:7.3f}]  "
                f"SNR vs FP32 {row['snr_vs_fp32_db']:6.1f} dB  {_kernels(row['exec'])}"
            )
        for key, note in res["notes"].items():
            print(f"  {key:14s} {note}")
        ratios = ", ".join(
            f"{k} {v:.2f}x" + (f" (< {GOAL})" if name == "masked" and v < GOAL else "")
            for k, v in res["int8_over_fp32_onnx"].items()
        )
        print(f"  INT8 speedup over FP32 onnx: {ratios}")
        print(
            "  INT8 over FP32, same route: "
            + ", ".join(f"{k} {v:.2f}x" for k, v in res["int8_over_fp32_same_route"].items())
        )
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(doc, indent=1))


if __name__ == "__main__":
    main()
