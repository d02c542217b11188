"""OpenVINO's routes for an intel-cpu engine side by side (issue #44, point 2): per forward, FP32
and INT8, the masked and flow demos, in one interleaved group per demo, with NNCF's own OpenVINO
IR of the same model beside them where an interpreter with NNCF is given:

    python benchmarks/openvino_routes.py --masked edgekit-demo/masked --flow edgekit-demo/flow \
        [--nncf-python /path/to/venv-with-nncf/bin/python]

Bundles with an int8 model come from `edgekit demo -o edgekit-demo`; a path that does not exist is
made there (export at batch 8, then `quantize --target intel-cpu`: the budget decoded and the
fallback form timed on OpenVINO; about a minute each on 2 cores). Which quantization a bundle
holds (its target, budget runtime and fallback form) is printed with its figures.

Routes (``edgekit.builder.openvino_routes``, what `edgekit build --target intel-cpu` compares):
``onnx`` (the bundle's ONNX compiled by the CPU plugin: what the blob holds), ``ir`` (the IR
``ov.save_model`` writes from it), ``ir-fp16`` (the same with f16-stored float weights; for the
QDQ model OpenVINO writes the very same files, so it is not timed twice), ``ir-hoisted`` (the IR
of the QDQ graph with its activation Q/DQ moved ahead of their Reshape: ``builder.openvino_qdq``;
for FP32 the same as ``ir``). Every route is compiled with the intel-cpu target's settings
(LATENCY, f32; ``--threads``) and fed the same feed (the middle call of one recorded decode);
``measure_routes`` times them round-robin, ``--forwards`` forwards back to back per call,
``--rounds`` calls each.

``--masked-int8 FILE`` (repeatable): another INT8 model of the masked bundle's graph (another
quantize's, e.g. with other fallbacks or ``QuantizeConfig(attention_scores="int8")``), timed and
judged in the same group as ``int8 file <name>``: A/B figures from one interleaved run.

``--nncf-python``: NNCF's post-training quantization (``nncf.quantize`` on ``ov.convert_model`` of
the bundle's FP32 ONNX, default preset, in that interpreter: NNCF pins its own dependencies) on the
feeds edgekit calibrates on (``benchmarks/quantize_vs_nncf.py``'s), timed as ``nncf ir`` in the
same group.

Prints per demo each row's ms per forward (median [p25-p75]), its SNR against the FP32 model's
outputs on the decode's feeds, the exec graph's weighted kernels by runtime precision (what ran
as int8, what stayed float), INT8/FP32 per route (FP32 ``onnx`` / INT8 route: the issue's goal is
>= 2.2 on the masked demo) and, with NNCF, each route's speed against NNCF's IR, with the CPU, its
ISA flags, OpenVINO's version and the load average before and after. A smoke run:
``--forwards 3 --rounds 2``. ``--record`` appends the run to ``benchmarks/openvino_routes_runs.jsonl``.
Run it alone on the machine: every figure is that machine's, at that load.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
from quantize_vs_nncf import save_calibration_feeds  # benchmarks/ is the script's folder: its first sys.path entry
from shipped_engine import ensure_bundle

from edgekit.bundle import Bundle
from edgekit.host import HostFacts

GOAL = 2.2
NNCF_ROW = "nncf ir"

NNCF_IR_SCRIPT = r"""
import sys, numpy as np, openvino as ov, nncf
data = np.load(sys.argv[2])
names = [str(x) for x in data["names"]]
feeds = [{k: data[f"{i}/{k}"] for k in names} for i in range(int(data["n"]))]
model = nncf.quantize(ov.convert_model(sys.argv[1]), nncf.Dataset(feeds), subset_size=len(feeds))
ov.save_model(model, sys.argv[3], compress_to_fp16=False)
print(nncf.__version__)
"""


def nncf_ir(bundle: Bundle, nncf_python: str, work: Path) -> tuple[Path, str]:
    """(NNCF's OpenVINO IR of the bundle's FP32 model on edgekit's calibration feeds, NNCF's version)."""
    feeds = work / "calibration.npz"
    save_calibration_feeds(bundle.root, feeds)
    xml = work / "nncf.xml"
    done = subprocess.run(
        [nncf_python, "-c", NNCF_IR_SCRIPT, str(bundle.path_of("fp32")), str(feeds), str(xml)],
        capture_output=True,
        text=True,
    )
    if done.returncode != 0:
        raise SystemExit(f"NNCF failed on {bundle.root}: {done.stderr[-2000:]}")
    return xml, done.stdout.strip().splitlines()[-1]


def quantization_of(bundle: Bundle) -> dict[str, Any]:
    """What the bundle's int8 model is: quantize's target, budget runtime, fallbacks and their form."""
    q = bundle.manifest.get("quantization") or {}
    config = q.get("config") or {}
    form = q.get("fallback_form") or {}
    return {
        "target": config.get("target"),
        "budget_runtime": config.get("runtime"),
        "fallbacks": [f.get("label") or f.get("node") for f in q.get("fallback") or []],
        "attention_scores": config.get("attention_scores", "float"),
        "fallback_form": form.get("chosen"),
        "fallback_form_measured_on": form.get("measured_on"),
    }


def measure_demo(
    root: Path,
    work: Path,
    threads: int,
    rounds: int,
    forwards: int,
    nncf_python: str | None = None,
    also: Sequence[Path] = (),
) -> dict[str, Any]:
    """Every route of both precisions (NNCF's IR, and the INT8 files ``also``: the ONNX route) opened
    at once, judged on one decode's feeds, timed interleaved."""
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
            routes, unavailable = write_routes(bundle.path_of(precision), work / precision, for_cpu=True)
            notes |= {f"{precision} {k}": v for k, v in unavailable.items()}
            for name, route in routes.items():
                if route.same_as:
                    notes[f"{precision} {name}"] = route.note or f"same as {route.same_as}"
                    continue
                opened[f"{precision} {name}"] = OpenVinoRuntime(route.model, options_for(settings, precision, threads))
        for path in also:
            opened[f"int8 file {path.stem}"] = OpenVinoRuntime(path, options_for(settings, "int8", threads))
        nncf_version = None
        if nncf_python:
            xml, nncf_version = nncf_ir(bundle, nncf_python, work)
            opened[NNCF_ROW] = OpenVinoRuntime(xml, options_for(settings, "int8", threads))
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
    int8_over_fp32 = {k: base / s["median_ms"] for k, s in stats.items() if k.startswith(("int8", "nncf"))}
    same_route = {
        r: stats[f"fp32 {r}"]["median_ms"] / stats[f"int8 {r}"]["median_ms"]
        for r in ("onnx", "ir")
        if f"fp32 {r}" in stats and f"int8 {r}" in stats
    }
    if "int8 ir-hoisted" in stats and "fp32 ir" in stats:  # FP32 has nothing to hoist: its ir is the same graph
        same_route["ir-hoisted"] = stats["fp32 ir"]["median_ms"] / stats["int8 ir-hoisted"]["median_ms"]
    # Per-round ratios against NNCF's IR (load that shifts between rounds cancels in a round's ratio).
    over_nncf = (
        {
            k: float(np.median(np.asarray(samples[NNCF_ROW]) / np.asarray(v)))
            for k, v in samples.items()
            if k.startswith("int8")
        }
        if NNCF_ROW in samples
        else {}
    )
    return {
        "bundle": str(root),
        "batch": bundle.batch,
        "quantization": quantization_of(bundle),
        "nncf": nncf_version,
        "feeds": how,
        "stats": stats,
        "notes": notes,
        "int8_over_fp32_onnx": int8_over_fp32,
        "int8_over_fp32_same_route": same_route,
        "int8_speed_over_nncf_ir": over_nncf,
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
    ap.add_argument(
        "--nncf-python",
        default=os.environ.get("EDGEKIT_NNCF_PYTHON"),
        help="an interpreter with nncf (and this venv's openvino): NNCF's IR timed beside the routes",
    )
    ap.add_argument(
        "--masked-int8",
        type=Path,
        action="append",
        default=[],
        metavar="FILE",
        help="another INT8 ONNX of the masked bundle's graph, timed beside its routes (repeatable)",
    )
    ap.add_argument("--json", type=Path, help="also write the results here")
    ap.add_argument("--record", action="store_true", help="append the results to benchmarks/openvino_routes_runs.jsonl")
    args = ap.parse_args()

    from edgekit.runtimes.openvino import openvino_version

    wanted = {d.strip() for d in args.demos.split(",") if d.strip()}
    if not wanted or wanted - {"masked", "flow"}:
        ap.error(f"--demos {args.demos!r}: give masked, flow or both")
    host = HostFacts.detect()
    load_before = os.getloadavg()
    started = time.time()
    sources = {"masked": (args.masked, "masked-demo"), "flow": (args.flow, "flow-demo")}
    bundles = {
        name: ensure_bundle(path, model, target="intel-cpu")
        for name, (path, model) in sources.items()
        if name in wanted
    }
    results: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="edgekit-ov-routes-") as tmp:
        for name, path in bundles.items():
            work = Path(tmp) / name
            work.mkdir(parents=True)
            also = args.masked_int8 if name == "masked" else []
            results[name] = measure_demo(path, work, args.threads, args.rounds, args.forwards, args.nncf_python, also)
    doc = {
        "schema": "edgekit.bench.openvino-routes/1",
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "command": " ".join(["python", "benchmarks/openvino_routes.py", *sys.argv[1:]]),
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
        q = res["quantization"]
        print(
            f"\n{name} demo (batch {res['batch']}; accuracy on {res['feeds']}): ms per forward, median [p25-p75]\n"
            f"  int8: quantize --target {q['target']} (budget on {q['budget_runtime']}), fallbacks "
            f"{', '.join(q['fallbacks']) or 'none'} in form {q['fallback_form']} "
            f"(timed on {q['fallback_form_measured_on']}), attention scores {q['attention_scores']}"
            + (f"; NNCF {res['nncf']}" if res["nncf"] else "")
        )
        for key, row in res["stats"].items():
            print(
                f"  {key:28s} {row['median_ms']:7.3f} [{row['p25_ms']:7.3f}-{row['p75_ms']:7.3f}]  "
                f"SNR vs FP32 {row['snr_vs_fp32_db']:6.1f} dB  {_kernels(row['exec'])}"
            )
        for key, note in res["notes"].items():
            print(f"  {key:28s} {note}")
        ratios = ", ".join(
            f"{k} {v:.2f}x" + (f" (< {GOAL})" if name == "masked" and v < GOAL else "")
            for k, v in res["int8_over_fp32_onnx"].items()
        )
        print(f"  INT8 speedup over FP32 onnx: {ratios}")
        print(
            "  INT8 over FP32, same route: "
            + ", ".join(f"{k} {v:.2f}x" for k, v in res["int8_over_fp32_same_route"].items())
        )
        if res["int8_speed_over_nncf_ir"]:
            print(
                "  speed against NNCF's IR (median of per-round ratios, > 1: faster): "
                + ", ".join(f"{k} {v:.2f}x" for k, v in res["int8_speed_over_nncf_ir"].items())
            )
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(doc, indent=1))
    if args.record:
        with open(Path(__file__).resolve().parent / "openvino_routes_runs.jsonl", "a") as f:
            f.write(json.dumps(doc) + "\n")


if __name__ == "__main__":
    main()
