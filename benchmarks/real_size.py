"""Real-size models through every edgekit command (issue #42): the zoo's architectures at their
published sizes (``benchmarks/zoo/``), each through export -> run (FP32) -> quantize -> check ->
build -> run (the built engine) -> profile, stage by stage.

    python benchmarks/real_size.py [--models amused-256,matcha-decoder,f5-dit,ar-gpt-medium]
        [--out DIR] [--stages export,run,quantize,check,build,run-engine,profile]
        [--stages build-intel-cpu,lint-jetson,lint-snapdragon,debug,pack,unpack,inspect-unpacked]
        [--quantize-args "--calib-samples 4 --eval-samples 4"] [--record]
    python benchmarks/real_size.py --table      # the recorded runs as the docs' markdown table

Each stage is the CLI itself in a child process (``python -m edgekit.cli STAGE ... --json``),
measured from outside: wall time, peak resident memory of that process (``wait4``'s
ru_maxrss), the files it wrote into the bundle (count and bytes), and what it cost in FP32
decodes of the model (wall / one warm FP32 decode on ONNX Runtime: ``profile``'s median, else
quantize's speed timing, else the cold decode ``run`` timed; ``fp32_decode_unit`` says which). The stage's own
JSON document is kept too. One JSON document per model goes to ``--out`` and to stdout;
``--record`` appends each as a line to ``benchmarks/real_size_runs.jsonl`` (the history the
docs' large-models page quotes). Run it alone on the machine: every figure is that machine's,
at that load (the load average is recorded before and after each stage).

Needs the zoo's packages (``benchmarks/zoo/requirements*.txt``) and about 12 GB of free memory
and 20 GB of free disk for the 2.25 GiB masked transformer.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import shlex
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from benchmarks._host import CORE, machine, versions  # noqa: E402
from benchmarks.zoo import ZOO, ZooModel  # noqa: E402

STAGES = ("export", "run", "quantize", "check", "build", "run-engine", "profile")
# The rest of "over 2 GB everywhere" (issue #42.2), opt-in by name: an OpenVINO build, what a
# Jetson and a Snapdragon target get (their engines are built on the device or on AI Hub: here,
# lint of the graph they get), the first-error search, and a pack / unpack round trip whose
# unpacked bundle `inspect` reads and verifies.
EXTRA_STAGES = ("build-intel-cpu", "lint-jetson", "lint-snapdragon", "debug", "pack", "unpack", "inspect-unpacked")
JETSON, SNAPDRAGON = "jetson-orin-nano", "snapdragon-8-gen-3"


def tree(path: Path) -> dict[str, tuple[int, int]]:
    """Every file under ``path`` -> (size, mtime in ns)."""
    if not path.exists():
        return {}
    return {str(p.relative_to(path)): (p.stat().st_size, p.stat().st_mtime_ns) for p in path.rglob("*") if p.is_file()}


def run_stage(args: list[str], bundle: Path, log: Path | None = None) -> dict[str, Any]:
    """One CLI command in a child process, measured from outside: ``wait4`` gives that child's
    own peak RSS (ru_maxrss, KiB on Linux); its output goes through files, not pipes. ``log``: where
    its progress (stderr: each line with the time since it started) is kept, for where the time went."""
    before_files, load0 = tree(bundle), os.getloadavg()[0]
    cmd = [sys.executable, "-m", "edgekit.cli", *args, "--json"]
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        t0 = time.perf_counter()
        proc = subprocess.Popen(cmd, stdout=out, stderr=err, text=True, cwd=HERE.parent)
        _, status, usage = os.wait4(proc.pid, 0)
        wall = time.perf_counter() - t0
        proc.returncode = code = os.waitstatus_to_exitcode(status)
        out.seek(0), err.seek(0)
        stdout, stderr = out.read(), err.read()
    if log is not None:  # its folder too: a stage that failed at once may have made nothing
        log.parent.mkdir(parents=True, exist_ok=True)
        log.write_text(stderr)
    after = tree(bundle)
    written = {k: v for k, v in after.items() if before_files.get(k) != v}
    try:
        doc = json.loads(stdout) if stdout.strip() else None
    except json.JSONDecodeError:
        doc = None
    return {
        "command": "edgekit " + shlex.join(args),
        "exit_code": code,
        "wall_s": round(wall, 2),
        "peak_rss_mb": round(usage.ru_maxrss / 1024, 1),
        "files_written": len(written),
        "bytes_written": sum(size for size, _ in written.values()),
        "load_before": round(load0, 2),
        "load_after": round(os.getloadavg()[0], 2),
        "stderr_tail": stderr.strip().splitlines()[-3:] if code else [],
        "document": doc,
    }


def stage_args(stage: str, model: ZooModel, bundle: Path, opts: argparse.Namespace) -> list[str]:
    if stage == "export":
        return ["export", model.factory, "-o", str(bundle), "--batch", str(model.batch), "--overwrite"]
    if stage == "run":
        return [
            "run",
            str(bundle),
            "--runtime",
            "ort",
            "--precision",
            "fp32",
            *run_conditions(model, bundle.parent),
            "-o",
            str(bundle.parent / f"{model.name}-fp32.npz"),
        ]
    if stage == "quantize":
        return ["quantize", str(bundle), *shlex.split(opts.quantize_args)]
    if stage == "check":
        return ["check", str(bundle), *shlex.split(opts.check_args)]
    if stage == "build":
        return [
            "build",
            str(bundle),
            "--target",
            opts.target,
            "--precision",
            "int8",
            "--rebuild",
        ]  # a rerun's quantize made a new int8
    if stage == "run-engine":
        return [
            "run",
            str(bundle),
            "--target",
            opts.target,
            "--precision",
            "int8",
            *run_conditions(model, bundle.parent),
            "-o",
            str(bundle.parent / f"{model.name}-int8.npz"),
        ]
    if stage == "profile":
        return [
            "profile",
            str(bundle),
            "--runtime",
            opts.profile_runtimes,
            "--precision",
            "fp32,int8",
            *shlex.split(opts.profile_args),
        ]
    if stage == "build-intel-cpu":
        return ["build", str(bundle), "--target", "intel-cpu", "--precision", "int8", "--rebuild"]
    if stage == "lint-jetson":
        return ["lint", str(bundle), "--target", JETSON]
    if stage == "lint-snapdragon":
        return ["lint", str(bundle), "--target", SNAPDRAGON]
    if stage == "debug":
        return ["debug", str(bundle), "--rows", "1"]
    if stage == "pack":
        return ["pack", str(bundle), "--target", JETSON, "-o", str(packed(model, bundle))]
    if stage == "unpack":
        return ["unpack", str(packed(model, bundle)), "-o", str(unpacked(bundle))]
    if stage == "inspect-unpacked":
        return ["inspect", str(unpacked(bundle) / model.name)]
    raise ValueError(stage)


def packed(model: ZooModel, bundle: Path) -> Path:
    return bundle.parent / f"{model.name}-{JETSON}.tar.gz"


def unpacked(bundle: Path) -> Path:
    return bundle.parent / f"{bundle.name}-unpacked"


def run_conditions(model: ZooModel, folder: Path) -> list[str]:
    """`edgekit run`'s condition options: the model's own, or a .npz of one graph batch drawn by
    its condition sampler (seed 0)."""
    if model.run_cond:
        return list(model.run_cond)
    import importlib.util

    import numpy as np

    spec = importlib.util.spec_from_file_location(f"zoo_{model.file.stem}", model.file)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)  # type: ignore[union-attr]
    path = folder / f"{model.name}-conditions.npz"
    np.savez(path, **module.sample_conditions(np.random.default_rng(0), model.batch))
    return ["--cond-data", str(path)]


def fp32_decode_s(doc: dict[str, Any] | None) -> float | None:
    """The FP32 decode's wall seconds from `edgekit run --json` (a cold decode: the session's
    first run, with its allocations)."""
    ms = (doc or {}).get("wall_ms")
    return float(ms) / 1000 / max(int(doc.get("decode_calls") or 1), 1) if isinstance(ms, (int, float)) else None


def warm_fp32_decode_s(stages: dict[str, Any]) -> tuple[float | None, str]:
    """The unit every stage's cost is counted in: a warm FP32 decode on ONNX Runtime, from
    `profile`'s median (after its warm-up decodes) or else quantize's own unit (the median of its
    held-out FP32 decodes, or its speed timing: ``record.fp32_decodes``); else the cold decode
    `run` timed (aMUSEd-256: 36 s cold against 15 s warm, which flattered every count more than
    twofold)."""
    profile = (stages.get("profile") or {}).get("document") or {}
    for v in profile.get("variants") or []:
        median = ((v.get("latency") or {}).get("median_ms")) if v.get("id") == "ort fp32" else None
        if median:
            return median / 1000.0, "profile: ort fp32 median per decode (warm)"
    quantize = (stages.get("quantize") or {}).get("document") or {}
    unit = quantize.get("fp32_decode_unit") or {}
    if unit.get("seconds") and "cold" not in str(unit.get("from")):
        return float(unit["seconds"]), f"quantize: {unit['from']}"
    speed = quantize.get("speed") or {}
    if speed.get("measured") and speed.get("fp32_ms_per_decode"):
        return speed["fp32_ms_per_decode"] / 1000.0, "quantize: speed timing's fp32 median per decode (warm)"
    cold = fp32_decode_s((stages.get("run") or {}).get("document"))
    return cold, "run: the first FP32 decode (cold)"


def run_model(model: ZooModel, opts: argparse.Namespace) -> dict[str, Any]:
    bundle = Path(opts.out) / model.name
    report: dict[str, Any] = {
        "schema": "edgekit.real-size/1",
        "model": model.name,
        "source": model.source,
        "kind": model.kind,
        "batch": model.batch,
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "machine": machine(memory=True),
        "versions": versions((*CORE, "diffusers", "matcha-tts", "f5-tts")),
        "stages": {},
    }
    for stage in opts.stages:
        print(f"[{model.name}] {stage} ...", file=sys.stderr, flush=True)
        row = run_stage(stage_args(stage, model, bundle, opts), bundle, Path(opts.out) / f"{model.name}-{stage}.log")
        report["stages"][stage] = row
        print(
            f"[{model.name}] {stage}: exit {row['exit_code']}, {row['wall_s']:.0f} s, peak {row['peak_rss_mb']} MB",
            file=sys.stderr,
            flush=True,
        )
        if row["exit_code"] not in (0, 4):  # 4: a budget or check verdict, the run goes on
            break
    decode_s, unit = warm_fp32_decode_s(report["stages"])
    for row in report["stages"].values():
        row["fp32_decodes"] = round(row["wall_s"] / decode_s, 1) if decode_s else None
    report["fp32_decode_s"], report["fp32_decode_unit"] = decode_s, unit
    report["fp32_bytes"] = sum(size for k, (size, _) in tree(bundle).items() if k.startswith("fp32"))
    return report


def table(path: Path = HERE / "real_size_runs.jsonl") -> str:
    """The recorded runs as the markdown table the large-models page shows: per model and stage,
    exit code, wall time, peak RSS, bytes written and FP32-decode equivalents (the newest run of
    each model and stage wins), with the machine and date of each row. The decodes are counted in
    the run's own warm FP32 decode (``warm_fp32_decode_s``); ``*``: a run that timed only a cold
    one."""
    rows: dict[tuple[str, str], tuple[dict[str, Any], dict[str, Any]]] = {}
    for line in path.read_text().splitlines() if path.is_file() else []:
        report = json.loads(line)
        unit, source = warm_fp32_decode_s(report["stages"])
        if unit is None or "cold" in source:  # a run without profile or quantize: its recorded unit
            unit, source = report.get("fp32_decode_s"), report.get("fp32_decode_unit") or "cold"
        for stage, row in report["stages"].items():
            decodes = round(row["wall_s"] / unit, 1) if unit else None
            rows[(report["model"], stage)] = (report, row | {"fp32_decodes": decodes, "cold": "cold" in source})
    out = [
        "| model | FP32 | stage | exit | wall | peak RSS | written | FP32 decodes | machine, date |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    order = {s: i for i, s in enumerate((*STAGES, *EXTRA_STAGES))}
    for (name, stage), (report, row) in sorted(rows.items(), key=lambda kv: (kv[0][0], order.get(kv[0][1], 99))):
        m = report["machine"]
        decodes = "" if row.get("fp32_decodes") is None else f"{row['fp32_decodes']:g}" + ("*" if row["cold"] else "")
        out.append(
            f"| {name} | {report.get('fp32_bytes', 0) / 2**30:.2f} GiB "
            f"| `{stage}` | {row['exit_code']} | {row['wall_s']:.0f} s "
            f"| {row['peak_rss_mb'] / 1024:.1f} GB | {row['bytes_written'] / 2**30:.2f} GiB | {decodes} "
            f"| {m['cpu']} ({m['cores']} cores, {m['isa_class']}), {report['date'][:10]} |"
        )
    return "\n".join(out)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default=",".join(ZOO))
    ap.add_argument("--out", default="real-size-bundles")
    ap.add_argument("--stages", default=",".join(STAGES))
    ap.add_argument("--target", default="cpu")
    ap.add_argument("--quantize-args", default="")
    ap.add_argument("--check-args", default="")
    ap.add_argument("--profile-runtimes", default="ort,openvino")
    ap.add_argument("--profile-args", default="--iters 3 --warmup 1")
    ap.add_argument("--record", action="store_true")
    ap.add_argument("--table", action="store_true", help="print the recorded runs as a markdown table and exit")
    opts = ap.parse_args()
    if opts.table:
        print(table())
        return
    opts.stages = [s for s in opts.stages.split(",") if s]
    every = (*STAGES, *EXTRA_STAGES)
    unknown = [s for s in opts.stages if s not in every] + [m for m in opts.models.split(",") if m not in ZOO]
    if unknown:
        raise SystemExit(
            f"unknown stage or model: {', '.join(unknown)}; stages: {', '.join(every)}; models: {', '.join(ZOO)}"
        )
    Path(opts.out).mkdir(parents=True, exist_ok=True)
    for name in opts.models.split(","):
        report = run_model(ZOO[name], opts)
        text = json.dumps(report, indent=1, default=str)
        (Path(opts.out) / f"{name}.json").write_text(text)
        print(text)
        if opts.record:
            with open(HERE / "real_size_runs.jsonl", "a") as f:
                f.write(json.dumps({k: v for k, v in report.items()}, default=str) + "\n")


if __name__ == "__main__":
    main()
