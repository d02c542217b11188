r"""The engine `edgekit build` ships for an ONNX Runtime target, opened the way an app opens it
(a plain ``onnxruntime.InferenceSession``, ``session.run(None, feeds)``), against what
`edgekit run` runs on the bundle (its ``OrtRuntime``: graph fusions in memory, IOBinding), per
forward, FP32 and INT8, on the masked and flow demos (issue #44, point 1):

    flock /tmp/edgekit-cpu.lock python benchmarks/shipped_engine.py \
        --masked edgekit-demo/masked --flow edgekit-demo/flow

Bundles with an int8 model come from `edgekit demo -o edgekit-demo`; a bundle path that does not
exist is made there (export at batch 8, then `quantize`, about a minute each on 2 cores). The
bundles are copied before `edgekit build --rebuild` writes engines: yours stay as they are.

Per demo, one interleaved group (``edgekit.probes.latency.interleaved``): every call runs
``--burst`` forwards back to back (a decode's steady state: a session's threads still spin from
its own last run) after ``SPIN_GAP_S`` idle (the previous candidate's spinning threads are gone),
so load that comes and goes hits every candidate alike. Candidates:

- ``edgekit run``: the bundle's ONNX through ``open_runtime`` (what `edgekit run --precision P` opens);
- ``plain .onnx``: the cpu target's engine, ORT's default session options;
- ``plain .onnx +opts``: the same file with the session options its engine entry records;
- ``plain .ort``: a CPU-only mobile target's ``.ort`` (fixed style), default options;
- ``plain android .ort +opts``: the android-arm64 engine (runtime style; QNN/NNAPI listed, so no
  contrib fusion: standard ONNX, slower on this CPU than the fused graph by design, so not held
  to the goal) with its recorded options (the saved-optimization replay).

Prints each candidate's ms per forward (median, p25-p75) and its speed as a share of `edgekit
run`'s (goal: >= 0.97), the INT8/FP32 ratio per route, with the CPU, its ISA flags, ONNX
Runtime's version and the load average before and after. Takes 2-4 minutes on 2 cores.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from edgekit.bundle import Bundle
from edgekit.export.verify import random_feed
from edgekit.host import HostFacts
from edgekit.probes.latency import SPIN_GAP_S, interleaved

GOAL = 0.97
MOBILE_TARGET = """name = "cpu-mobile"
description = "A phone app's CPU-only onnxruntime (.ort, every optimization baked in)"
arch = "host"
runtimes = ["ort"]
precisions = ["fp32", "int8"]
quantization_profile = "cpu"
[ort]
providers = ["CPUExecutionProvider"]
format = "ort"
optimization_style = "fixed"
"""


def ensure_bundle(path: Path, model: str, target: str | None = None) -> Path:
    """``path`` when it holds a bundle with an int8 model; else export ``model`` there at batch 8
    and quantize it (cpu profile; ``target``: `quantize --target`, e.g. intel-cpu)."""
    from edgekit.export import ExportConfig, export_bundle
    from edgekit.models import load_spec
    from edgekit.quantize import QuantizeConfig, quantize_bundle

    if not (path / "edgekit.json").is_file():
        print(f"exporting {model} to {path} (batch 8)", file=sys.stderr)
        export_bundle(load_spec(model, batch=8), path, ExportConfig(), source=model)
    if not Bundle.load(path).has("int8"):
        print(f"quantizing {path} (cpu profile{f', --target {target}' if target else ''})", file=sys.stderr)
        quantize_bundle(path, QuantizeConfig(target=target))
    return path


def plain_session(path: Path, recorded: dict[str, Any] | None, threads: int) -> Any:
    """What an app opens: ORT's defaults, or the options the engine entry records."""
    import onnxruntime as ort

    from edgekit.runtimes.ort import GRAPH_OPTIMIZATION_LEVELS

    so = ort.SessionOptions()
    so.intra_op_num_threads = threads
    if recorded is not None:
        so.graph_optimization_level = getattr(
            ort.GraphOptimizationLevel, GRAPH_OPTIMIZATION_LEVELS[recorded["graph_optimization_level"]]
        )
        for key, value in recorded["config_entries"].items():
            so.add_session_config_entry(key, value)
    return ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"])


def measure_demo(bundle_path: Path, work: Path, threads: int, rounds: int, burst: int) -> dict[str, Any]:
    """Build the engines in a copy of the bundle, then time every candidate interleaved."""
    from edgekit.builder import build_bundle
    from edgekit.runtimes import open_runtime

    root = Path(shutil.copytree(bundle_path, work / bundle_path.name))
    mobile = work / "cpu-mobile.toml"
    mobile.write_text(MOBILE_TARGET)
    engines: dict[str, dict[str, Any]] = {}
    for precision in ("fp32", "int8"):
        for target in ("cpu", mobile, "android-arm64"):
            name = target if isinstance(target, str) else "cpu-mobile"
            engines[f"{name}/{precision}"] = build_bundle(root, target, precision, rebuild=True)[
                "engine"
            ]  # this edgekit's build
    bundle = Bundle.load(root)
    feeds = random_feed(bundle.inputs, np.random.default_rng(0))
    runners: dict[str, Callable[[], object]] = {}
    opened: list[Any] = []
    for precision in ("fp32", "int8"):
        rt = open_runtime(bundle, "ort", precision, threads=threads)
        opened.append(rt)
        runners[f"edgekit run {precision}"] = lambda rt=rt: rt.run(feeds)
        for label, key, recorded in (
            ("plain .onnx", "cpu", False),
            ("plain .onnx +opts", "cpu", True),
            ("plain .ort", "cpu-mobile", False),
            ("plain android .ort +opts", "android-arm64", True),
        ):
            entry = engines[f"{key}/{precision}"]
            session = plain_session(root / entry["path"], entry["session_options"] if recorded else None, threads)
            runners[f"{label} {precision}"] = lambda s=session: s.run(None, feeds)

    def bursts(fn: Callable[[], object]) -> Callable[[], None]:
        def run() -> None:
            for _ in range(burst):
                fn()

        return run

    try:
        samples = interleaved({k: bursts(fn) for k, fn in runners.items()}, rounds, warmup=2, gap_s=SPIN_GAP_S)
    finally:
        for rt in opened:
            rt.close()
    per_forward = {k: np.asarray(v) / burst for k, v in samples.items()}
    stats = {
        k: {
            "median_ms": float(np.median(v)),
            "p25_ms": float(np.percentile(v, 25)),
            "p75_ms": float(np.percentile(v, 75)),
        }
        for k, v in per_forward.items()
    }
    for k, row in stats.items():
        precision = k.rsplit(" ", 1)[1]
        row["share_of_edgekit_run"] = stats[f"edgekit run {precision}"]["median_ms"] / row["median_ms"]
    routes = sorted({k.rsplit(" ", 1)[0] for k in stats})
    int8_speedup = {r: stats[f"{r} fp32"]["median_ms"] / stats[f"{r} int8"]["median_ms"] for r in routes}
    changes = {
        k: {"graph_changes": e.get("graph_changes"), "session_options": e.get("session_options"), "path": e["path"]}
        for k, e in engines.items()
    }
    return {
        "bundle": str(bundle_path),
        "batch": bundle.batch,
        "stats": stats,
        "int8_speedup": int8_speedup,
        "engines": changes,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument(
        "--masked", type=Path, default=Path("edgekit-demo/masked"), help="masked demo bundle with int8 (made if absent)"
    )
    ap.add_argument(
        "--flow", type=Path, default=Path("edgekit-demo/flow"), help="flow demo bundle with int8 (made if absent)"
    )
    ap.add_argument("--threads", type=int, default=0, help="intra-op threads of every session (0 = ORT's default)")
    ap.add_argument("--rounds", type=int, default=20, help="interleaved rounds (each candidate timed once per round)")
    ap.add_argument("--burst", type=int, default=5, help="forwards per timed call")
    ap.add_argument("--demos", default="masked,flow", help="comma-separated: which demos to run")
    ap.add_argument("--json", type=Path, help="also write the results here")
    args = ap.parse_args()

    import onnxruntime as ort

    host = HostFacts.detect()
    load_before = os.getloadavg()
    started = time.time()
    wanted = {d.strip() for d in args.demos.split(",") if d.strip()}
    if not wanted or wanted - {"masked", "flow"}:
        ap.error(f"--demos {args.demos!r}: give masked, flow or both")
    sources = {"masked": (args.masked, "masked-demo"), "flow": (args.flow, "flow-demo")}
    bundles = {name: ensure_bundle(path, model) for name, (path, model) in sources.items() if name in wanted}
    results: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="edgekit-shipped-") as tmp:
        for name, path in bundles.items():
            (Path(tmp) / name).mkdir()
            results[name] = measure_demo(path, Path(tmp) / name, args.threads, args.rounds, args.burst)
    doc = {
        "cpu": host.cpu,
        "arch": host.arch,
        "isa": list(host.isa),
        "isa_class": host.isa_class,
        "cores": os.cpu_count(),
        "onnxruntime": ort.__version__,
        "threads": args.threads,
        "rounds": args.rounds,
        "burst": args.burst,
        "load_before": [round(x, 2) for x in load_before],
        "load_after": [round(x, 2) for x in os.getloadavg()],
        "seconds": round(time.time() - started, 1),
        "demos": results,
    }
    print(
        f"CPU: {host.cpu} ({host.arch}, {os.cpu_count()} cores); ISA flags: {' '.join(host.isa) or 'none read'} "
        f"(class {host.isa_class}); onnxruntime {ort.__version__}; threads {args.threads or 'ORT default'}"
    )
    print(
        f"load average before {doc['load_before']}, after "
        f"{doc['load_after']}; {args.rounds} rounds x {args.burst} forwards, "
        f"interleaved, {SPIN_GAP_S}s gap"
    )
    for name, res in results.items():
        print(
            f"\n{name} demo (batch {res['batch']}): ms per forward, median [p25-p75], and speed as a share of "
            "`edgekit run`"
        )
        for key, row in res["stats"].items():
            # The android .ort is standard ONNX for QNN/NNAPI (no contrib fusion): not held to the goal.
            held = not key.startswith(("edgekit", "plain android"))
            flag = f"  < {GOAL}" if held and row["share_of_edgekit_run"] < GOAL else ""
            print(
                f"  {key:30s} {row['median_ms']:7.2f} [{row['p25_ms']:6.2f}-{row['p75_ms']:6.2f}]  "
                f"{row['share_of_edgekit_run']:5.3f}{flag}"
            )
        print("  INT8 speedup over FP32: " + ", ".join(f"{r} {v:.2f}x" for r, v in res["int8_speedup"].items()))
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(doc, indent=1))


if __name__ == "__main__":
    main()
