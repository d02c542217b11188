"""`edgekit quantize` against NNCF's post-training quantization on the same host, the same FP32
ONNX and the same calibration rows (issue #44.6: edgekit's quantize within 3x NNCF's time).

    python benchmarks/quantize_vs_nncf.py --nncf-python /path/to/venv-with-nncf/bin/python [--models masked flow]
        [--record]

NNCF pins its own dependencies, so it runs in its own interpreter (``--nncf-python``: a venv with
``pip install nncf==3.4.0`` and this venv's onnx / onnxruntime / openvino versions). Per demo model:

1. ``edgekit export <model>-demo`` into a temp folder (not timed);
2. the calibration rows edgekit records on that bundle (its default: ``calib_samples`` decode
   trajectories, every network call) are saved to an .npz: the SAME feeds go to NNCF;
3. ``edgekit quantize BUNDLE --json`` as a child process: wall and CPU seconds, whole command
   (interpreter start, recording the trajectories, the budget search, the speed check);
4. NNCF in its interpreter: ``nncf.quantize(onnx_model, nncf.Dataset(feeds), subset_size=len(feeds))``
   on the FP32 ONNX (ONNX backend, default preset): wall of the whole child process and of the call.

Writes one JSON document (stdout, ``--out``) with the CPU model, flags class, core count, load
before/after and versions; ``--record`` appends it to benchmarks/quantize_vs_nncf_runs.jsonl.
Run it alone on the machine: every figure is that machine's, at that load.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from benchmarks._host import machine, versions  # noqa: E402

GOAL_RATIO = 3.0  # issue #44.6: edgekit's quantize <= 3x NNCF's time

NNCF_SCRIPT = r"""
import json, sys, time
t_start = time.perf_counter()
import numpy as np, onnx, nncf
model = onnx.load(sys.argv[1])
data = np.load(sys.argv[2])
n = int(data["n"])
names = [str(x) for x in data["names"]]
feeds = [{k: data[f"{i}/{k}"] for k in names} for i in range(n)]
t0 = time.perf_counter()
q = nncf.quantize(model, nncf.Dataset(feeds), subset_size=n)
t1 = time.perf_counter()
onnx.save(q, sys.argv[3])
print(json.dumps({"call_s": t1 - t0, "process_s": time.perf_counter() - t_start, "nncf": nncf.__version__}))
"""


def edgekit_cli() -> list[str]:
    return [sys.executable, "-m", "edgekit.cli"]


def save_calibration_feeds(bundle_dir: Path, out: Path) -> int:
    """The feeds edgekit's default quantize calibrates on, as one .npz; returns how many."""
    from edgekit.bundle import Bundle
    from edgekit.quantize.calibrate import record_trajectories
    from edgekit.quantize.config import QuantizeConfig
    from edgekit.quantize.decodes import tokens_per_row
    from edgekit.runtimes import open_runtime

    bundle = Bundle.load(bundle_dir)
    cfg, _ = QuantizeConfig().with_samples(bundle.kind, tokens_per_row(bundle, {}), bundle.batch)
    runtime = open_runtime(bundle, "ort", "fp32")
    try:
        traj = record_trajectories(bundle, runtime, cfg.samples[0], cfg.calib_seed, cfg.decode)
    finally:
        runtime.close()
    names = sorted(traj.feeds[0])
    arrays = {f"{i}/{k}": np.asarray(f[k]) for i, f in enumerate(traj.feeds) for k in names}
    np.savez(out, n=len(traj.feeds), names=np.array(names), **arrays)
    return len(traj.feeds)


def children_cpu_s() -> float:
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def run_model(model: str, nncf_python: str, work: Path) -> dict[str, object]:
    bundle = work / model
    subprocess.run([*edgekit_cli(), "export", f"{model}-demo", "-o", str(bundle)], check=True, capture_output=True)
    feeds = work / f"{model}-calib.npz"
    n = save_calibration_feeds(bundle, feeds)

    cpu0, t0 = children_cpu_s(), time.perf_counter()
    done = subprocess.run([*edgekit_cli(), "quantize", str(bundle), "--json"], capture_output=True, text=True)
    ek_wall, ek_cpu = time.perf_counter() - t0, children_cpu_s() - cpu0
    if done.returncode not in (0, 4):  # 4: the budget was not met (the figures still stand)
        raise SystemExit(f"edgekit quantize {model} failed ({done.returncode}): {done.stderr[-2000:]}")
    summary = json.loads(done.stdout)

    fp32 = next(bundle.glob("fp32-*.onnx"))
    cpu0, t0 = children_cpu_s(), time.perf_counter()
    nn = subprocess.run(
        [nncf_python, "-c", NNCF_SCRIPT, str(fp32), str(feeds), str(work / f"{model}-nncf.onnx")],
        capture_output=True,
        text=True,
    )
    nn_wall, nn_cpu = time.perf_counter() - t0, children_cpu_s() - cpu0
    if nn.returncode != 0:
        raise SystemExit(f"NNCF on {model} failed: {nn.stderr[-2000:]}")
    nncf = json.loads(nn.stdout.strip().splitlines()[-1])
    return {
        "model": model,
        "calibration_feeds": n,
        "edgekit": {
            "wall_s": round(ek_wall, 2),
            "cpu_s": round(ek_cpu, 2),
            "budget_met": summary.get("passed"),
            "fallbacks": len(summary.get("fallback") or []),
            "fp32_decodes": summary.get("fp32_decodes"),
            "stage_s": {k: round(v, 2) for k, v in (summary.get("timing_s") or {}).items()},
        },
        "nncf": {
            "wall_s": round(nn_wall, 2),
            "cpu_s": round(nn_cpu, 2),
            "call_s": round(nncf["call_s"], 2),
            "version": nncf["nncf"],
        },
        "ratio_wall": round(ek_wall / nn_wall, 2),
        "within_goal": ek_wall <= GOAL_RATIO * nn_wall,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--nncf-python", default=os.environ.get("EDGEKIT_NNCF_PYTHON"), help="an interpreter with nncf")
    ap.add_argument("--models", nargs="+", default=["masked", "flow"], choices=["masked", "flow", "ar"])
    ap.add_argument("--out", type=Path)
    ap.add_argument("--record", action="store_true", help="append to benchmarks/quantize_vs_nncf_runs.jsonl")
    args = ap.parse_args()
    if not args.nncf_python:
        raise SystemExit(
            "--nncf-python is required: a venv's python with `pip install nncf==3.4.0` (see the docstring)"
        )
    load_before = os.getloadavg()[0]
    with tempfile.TemporaryDirectory(prefix="edgekit-vs-nncf-") as tmp:
        rows = [run_model(m, args.nncf_python, Path(tmp)) for m in args.models]
    doc = {
        "schema": "edgekit.bench.quantize-vs-nncf/1",
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "command": " ".join(["python", "benchmarks/quantize_vs_nncf.py", *sys.argv[1:]]),
        "machine": machine(),
        "load_before": round(load_before, 2),
        "load_after": round(os.getloadavg()[0], 2),
        "versions": versions(),
        "goal_ratio": GOAL_RATIO,
        "models": rows,
    }
    text = json.dumps(doc, indent=2)
    print(text)
    if args.out:
        args.out.write_text(text + "\n")
    if args.record:
        with open(HERE / "quantize_vs_nncf_runs.jsonl", "a") as f:
            f.write(json.dumps(doc) + "\n")


if __name__ == "__main__":
    main()
