"""Which INT8 scheme is right and fast on THIS CPU: every cpu-profile scheme of
``edgekit.arithmetic.SCHEMES`` plus plain onnxruntime ``quantize_static``/``quantize_dynamic``,
measured side by side on the demo models, in one process:

    python benchmarks/isa_schemes.py [--out benchmarks/results/isa_schemes.json] [--models masked,flow]

Per scheme and model: output SNR per forward against FP32 on held-out recorded decode calls (ORT
and OpenVINO), the budget metrics per decode (lockstep token agreement / frame SNR, as `edgekit
quantize` measures them, no fallback), whether its int8 weights can saturate the AVX2 kernel (the
largest pair sum, > 128 = can), and speed per forward (median of interleaved runs, 1 thread)
as INT8/FP32 ratios. The CPU model and flags go into the JSON: these figures hold for this CPU's
class only (edgekit.host.isa_class). Run it alone (no tests or training beside it).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from edgekit.arithmetic import SCHEMES, int8_weight_pairs
from edgekit.bundle import Bundle
from edgekit.host import HostFacts, cpu_identity
from edgekit.quantize.budget import compare, decode_eval_set, snr_db
from edgekit.quantize.calibrate import calibration_reader, record_trajectories
from edgekit.quantize.config import QuantizeConfig
from edgekit.quantize.cpu.ptq import prepare_model, quantize_model
from edgekit.quantize.cpu.select import select_nodes, weight_only_by_rule
from edgekit.quantize.graph import analyse_graph, module_labels
from edgekit.quantize.quiet import quiet_ort_logging
from edgekit.runtimes.onnx_file import load_onnx
from edgekit.runtimes.ort import OrtOptions, OrtRuntime

BATCH = {"masked": 8, "flow": 2, "ar": 8}


def _say(msg: str) -> None:
    print(f"· {msg}", file=sys.stderr, flush=True)


def _export(kind: str, out: Path) -> Bundle:
    from edgekit.export.to_bundle import export_bundle
    from edgekit.models import load_spec

    name = f"{kind}-demo"
    export_bundle(load_spec(name, batch=BATCH[kind]), out, source=name)
    return Bundle.load(out)


def _max_pair(path: Path) -> int:
    """The largest |q_2i| + |q_2i+1| the u8s8 kernel can form from the int8 weights of the
    model's INT8 layers (weight-only layers compute in float: not counted); 0 for u8 weights."""
    return max(int8_weight_pairs(load_onnx(path), path.parent).values(), default=0)


def _speed(paths: dict[str, Path], feed: dict[str, np.ndarray], runtime: str, rounds: int) -> dict[str, float]:
    """Median ms per forward of each model, interleaved (1 thread)."""
    if runtime == "ort":
        sessions = {k: OrtRuntime(p, OrtOptions(intra_op_threads=1)) for k, p in paths.items()}
    else:
        from edgekit.runtimes.openvino import OpenVinoRuntime, OvOptions

        sessions = {k: OpenVinoRuntime(p, OvOptions(threads=1)) for k, p in paths.items()}
    times: dict[str, list[float]] = {k: [] for k in sessions}
    for rt in sessions.values():
        for _ in range(3):
            rt.run(feed)
    for _ in range(rounds):
        for k, rt in sessions.items():
            t0 = time.perf_counter_ns()
            rt.run(feed)
            times[k].append((time.perf_counter_ns() - t0) / 1e6)
    for rt in sessions.values():
        rt.close()
    return {k: float(np.median(v)) for k, v in times.items()}


def _plain(prepared: Path, out: Path, feeds: list[dict[str, np.ndarray]], dynamic: bool) -> Path:
    """onnxruntime's own quantizers as a user would call them (QDQ u8s8 per-channel static; dynamic)."""
    from onnxruntime import quantization as q

    with quiet_ort_logging():
        if dynamic:
            q.quantize_dynamic(str(prepared), str(out), weight_type=q.QuantType.QInt8, per_channel=True)
        else:
            q.quantize_static(
                str(prepared),
                str(out),
                calibration_reader(feeds),
                quant_format=q.QuantFormat.QDQ,
                activation_type=q.QuantType.QUInt8,
                weight_type=q.QuantType.QInt8,
                per_channel=True,
                op_types_to_quantize=["MatMul", "Gemm", "Conv"],
            )
    return out


def measure_model(kind: str, tmp: Path, rounds: int, ov: bool) -> dict[str, Any]:
    bundle = _export(kind, tmp / kind)
    fp32 = bundle.path_of("fp32")
    prepared, _, _ = prepare_model(fp32, tmp / f"{kind}-prepared.onnx")
    plan = analyse_graph(prepared, "t" if kind == "flow" else None, module_labels(fp32))
    with OrtRuntime(fp32) as rt:
        calib = record_trajectories(bundle, rt, 8, 1000)
        held = record_trajectories(bundle, rt, BATCH[kind], 0)
        reference = decode_eval_set(bundle, rt, 16, 0, {})
    feeds = held.feeds[:: max(1, len(held.feeds) // 8)][:8]
    with OrtRuntime(fp32) as rt:  # runtimes reuse their output buffers: copy what is kept
        ref_out = [{k: v.copy() for k, v in rt.run(f).items()} for f in feeds]
    out_name = next(iter(bundle.outputs))
    rows: dict[str, Any] = {}
    paths: dict[str, Path] = {"fp32": fp32}
    for name in SCHEMES:
        cfg = QuantizeConfig(scheme=name)
        nodes, floated = select_nodes(plan, cfg)
        path = tmp / f"{kind}-{name}.onnx"
        _say(f"{kind}: quantize with {name}")
        quantize_model(
            prepared,
            path,
            calibration_reader(calib.feeds),
            nodes,
            cfg,
            plan,
            weight_only=weight_only_by_rule(floated, cfg),
        )
        paths[name] = path
    for name, dynamic in (("ort-quantize_static", False), ("ort-quantize_dynamic", True)):
        paths[name] = _plain(prepared, tmp / f"{kind}-{name}.onnx", calib.feeds, dynamic)
    with OrtRuntime(fp32) as fp32_rt:
        for name, path in paths.items():
            if name == "fp32":
                continue
            with OrtRuntime(path) as rt:
                got = [rt.run(f)[out_name].copy() for f in feeds]
                run = decode_eval_set(bundle, rt, 16, 0, {}, reference=fp32_rt)
            metrics = compare(kind, reference, run)
            rows[name] = {
                "forward_snr_db_ort": snr_db(np.concatenate([r[out_name] for r in ref_out]), np.concatenate(got)),
                "max_weight_pair_sum": _max_pair(path),
                "decode": {k: v for k, v in metrics.items() if not k.startswith("quality")},
            }
            if ov:
                from edgekit.runtimes.openvino import OpenVinoRuntime, OvOptions

                with OpenVinoRuntime(path, OvOptions(threads=1)) as rt:
                    got = [rt.run(f)[out_name].copy() for f in feeds]
                rows[name]["forward_snr_db_openvino"] = snr_db(
                    np.concatenate([r[out_name] for r in ref_out]), np.concatenate(got)
                )
    _say(f"{kind}: speed per forward, {rounds} interleaved rounds")
    fp32_ms: dict[str, float] = {}
    for runtime in ("ort", "openvino") if ov else ("ort",):
        ms = _speed(paths, feeds[len(feeds) // 2], runtime, rounds)
        fp32_ms[runtime] = ms["fp32"]
        for name in rows:
            rows[name][f"{runtime}_int8_ms"] = ms[name]
            rows[name][f"{runtime}_speedup_vs_{runtime}_fp32"] = ms["fp32"] / ms[name]
            rows[name][f"{runtime}_speedup_vs_ort_fp32"] = fp32_ms["ort"] / ms[name]
    return {"batch": BATCH[kind], "feeds": len(feeds), "fp32_ms": fp32_ms, "schemes": rows}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, default=Path("benchmarks/results/isa_schemes.json"))
    ap.add_argument("--models", default="masked,flow,ar")
    ap.add_argument("--rounds", type=int, default=40)
    ap.add_argument("--no-openvino", action="store_true")
    args = ap.parse_args()
    host = HostFacts.detect()
    try:
        import openvino  # noqa: F401

        ov = not args.no_openvino
    except ImportError:
        ov = False
    doc: dict[str, Any] = {
        "schema": "edgekit.bench.isa_schemes/1",
        "cpu": cpu_identity(),
        "isa_class": host.isa_class,
        "openvino": ov,
        "scheme_descriptions": {k: s.description for k, s in SCHEMES.items()},
        "models": {},
    }
    with tempfile.TemporaryDirectory(prefix="edgekit-isa-") as tmp:
        for kind in args.models.split(","):
            doc["models"][kind] = measure_model(kind, Path(tmp), args.rounds, ov)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(doc, indent=1))
    print(f"{doc['cpu']['model']} ({host.isa_class}; flags {' '.join(host.isa)})")
    for kind, m in doc["models"].items():
        print(f"\n{kind} (batch {m['batch']})")
        print(f"{'scheme':<22}{'fwd SNR ort':>12}{'fwd SNR ov':>12}{'pair max':>9}{'ort x':>7}{'ov x':>7}  decode")
        for name, r in m["schemes"].items():
            dec = ", ".join(f"{k} {v:.4g}" for k, v in r["decode"].items() if isinstance(v, float))
            ov_snr = r.get("forward_snr_db_openvino", float("nan"))
            ov_x = r.get("openvino_speedup_vs_openvino_fp32", float("nan"))
            print(
                f"{name:<22}{r['forward_snr_db_ort']:>12.1f}{ov_snr:>12.1f}"
                f"{r['max_weight_pair_sum']:>9}{r['ort_speedup_vs_ort_fp32']:>7.2f}{ov_x:>7.2f}  {dec}"
            )
    print(f"\nwrote {args.out}")


if __name__ == "__main__":
    main()
