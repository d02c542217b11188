"""What an int8 embedding table costs per call (``edgekit/quantize/cpu/tables.py``): one Gather of
an FP32 table against its int8 form (Gather of the int8 table and of the row scales, Cast, Mul),
each a one-lookup model, on ONNX Runtime's CPU EP (edgekit's session options) and OpenVINO's CPU
plugin, timed interleaved, with the rows' SNR, the bytes and OpenVINO's exec graph of the int8 form:

    python benchmarks/gather_tables.py [--threads 2] [--rounds 7] [--calls 200]
    python benchmarks/gather_tables.py --demos edgekit-demo   # what the tables cost in accuracy

Shapes: the demo token table (65 x 128, [8, 64] tokens: the masked demo at batch 8) and
aMUSEd-256's (8256 x 768, [2, 256] tokens: one CFG pair of 16 x 16 latents), random values (the
time does not depend on them). ``MIN_TABLE_BYTES``'s "three more kernels per call" is this
script's difference. Run it alone on the machine: every figure is that machine's, at that load.

``--demos DIR``: the demo bundles' int8 models (``edgekit demo -o DIR``) judged by `check`'s default
gate (``evaluate.gate_runtimes``: the held-out rows, seed and decode settings quantize judged) as
quantize wrote them and with their tables of ``MIN_TABLE_BYTES`` and over stored int8 (every step
bucket's graph), side by side against the same FP32 answers: the margin and the gated metrics
before and after, and the files' bytes. The table's effect alone: nothing else in the model moves.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks._host import machine, versions  # noqa: E402

SHAPES = {"demo token table": ((65, 128), (8, 64)), "aMUSEd-256 token table": ((8256, 768), (2, 256))}


def lookup_model(path: Path, rows: int, dim: int, idx: tuple[int, ...]) -> Path:
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    table = np.random.default_rng(0).standard_normal((rows, dim)).astype(np.float32)
    graph = helper.make_graph(
        [helper.make_node("Gather", ["table", "ids"], ["rows"], name="embed", axis=0)],
        "lookup",
        [helper.make_tensor_value_info("ids", TensorProto.INT64, list(idx))],
        [helper.make_tensor_value_info("rows", TensorProto.FLOAT, [*idx, dim])],
        [numpy_helper.from_array(table, "table")],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    model.ir_version = 9
    onnx.save_model(model, str(path))
    return path


def time_interleaved(runs: dict[str, object], feed: dict, rounds: int, calls: int) -> dict[str, float]:
    """{name: median µs per call} over ``rounds`` rounds of ``calls`` calls each, round-robin."""
    samples: dict[str, list[float]] = {k: [] for k in runs}
    for rt in runs.values():
        for _ in range(20):  # warm-up, discarded
            rt.run(feed)
    for _ in range(rounds):
        for name, rt in runs.items():
            t0 = time.perf_counter_ns()
            for _ in range(calls):
                rt.run(feed)
            samples[name].append((time.perf_counter_ns() - t0) / calls / 1e3)
    return {k: statistics.median(v) for k, v in samples.items()}


def demos(root: Path) -> None:
    """Print each demo's check gate with the bundle's int8 model and with its tables int8."""
    from edgekit._sidefiles import place_side_files
    from edgekit.bundle import Bundle
    from edgekit.evaluate import gate_runtimes
    from edgekit.evaluate.data import stored_rows
    from edgekit.quantize.cpu.tables import MIN_TABLE_BYTES, store_tables_int8
    from edgekit.quantize.graph import analyse_graph
    from edgekit.runtimes import open_runtime
    from edgekit.runtimes.bucketed import BucketedRuntime
    from edgekit.runtimes.ort import OrtOptions, OrtRuntime

    shown = ("token_agreement", "top1_agreement", "logits_kl", "snr_db", "velocity_snr_db")
    for kind in [k for k in ("masked", "flow", "ar") if (root / k).is_dir()]:
        bundle = Bundle.load(root / kind)
        q = bundle.quantization
        assert q is not None, f"{bundle.root} has no int8 model: run `edgekit demo -o {root}`"
        ev = q.budget_eval
        buckets = bundle.step_buckets()
        graphs = [bundle.path_of(a) for a in (buckets.graphs if buckets else ["int8"])]
        with tempfile.TemporaryDirectory(prefix="gather-tables-") as tmp:
            after, converted = [], set()
            for g in graphs:
                place_side_files(g, Path(tmp), link=False)
                copy = Path(tmp) / g.name
                copy.write_bytes(g.read_bytes())
                plan = analyse_graph(copy)
                tables = [n.name for n in plan.nodes if n.table and 4 * int(np.prod(n.table)) >= MIN_TABLE_BYTES]
                done = set(store_tables_int8(copy, tables))
                converted |= {n.label for n in plan.nodes if n.name in done}
                after.append(copy)
            opts = OrtOptions(intra_op_threads=2)
            ref = OrtRuntime(bundle.path_of("fp32"), opts)
            opened = [OrtRuntime(p, opts) for p in after]
            cand = BucketedRuntime(opened, buckets.boundaries, bundle.kind, bundle.meta) if buckets else opened[0]
            rows = stored_rows(bundle)
            n = ev.samples or 16
            gates = {}
            for label, rt in (("as quantized", open_runtime(bundle, "ort", "int8", threads=2)), ("tables int8", cand)):
                gates[label] = gate_runtimes(bundle, ref, rt, n, ev.seed or 0, ev.decode or {}, rows)
                rt.close()
            ref.close()
            # One-file graphs only: a bucketed model's shared weights file still holds the dead FP32 table.
            sizes = f"{graphs[0].stat().st_size} -> {after[0].stat().st_size} bytes" if not buckets else "n/a (buckets)"
        print(f"{kind}: tables int8: {sorted(converted)}; {n} held-out rows, seed {ev.seed}")
        for label, gate in gates.items():
            metrics = ", ".join(f"{k} {v:.4g}" for k, v in gate["metrics"].items() if k in shown)
            print(f"  {label:>12}: margin {gate['margin']:+.4f} passed {gate['passed']}; {metrics}")
        print(f"  int8 file: {sizes}")


def main() -> None:
    from edgekit.quantize.cpu.tables import store_tables_int8
    from edgekit.runtimes.openvino import OpenVinoRuntime, OvOptions
    from edgekit.runtimes.openvino_ir import exec_precisions
    from edgekit.runtimes.ort import OrtOptions, OrtRuntime

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--calls", type=int, default=200)
    ap.add_argument("--demos", type=Path, help="the folder `edgekit demo -o` wrote: the tables' accuracy effect")
    args = ap.parse_args()
    print(f"host: {machine()} load {os.getloadavg()[0]:.2f}; {versions()}")
    if args.demos is not None:
        demos(args.demos)
        return
    with tempfile.TemporaryDirectory() as tmp:
        for label, ((rows, dim), idx) in SHAPES.items():
            fp32 = lookup_model(Path(tmp) / f"{rows}-fp32.onnx", rows, dim, idx)
            int8 = Path(tmp) / f"{rows}-int8.onnx"
            int8.write_bytes(fp32.read_bytes())
            store_tables_int8(int8, ["embed"])
            feed = {"ids": np.random.default_rng(1).integers(0, rows, idx).astype(np.int64)}
            ort_opts = OrtOptions(intra_op_threads=args.threads)
            ov_opts = OvOptions(threads=args.threads)
            runs = {
                "ort fp32": OrtRuntime(fp32, ort_opts),
                "ort int8": OrtRuntime(int8, ort_opts),
                "ov fp32": OpenVinoRuntime(fp32, ov_opts),
                "ov int8": OpenVinoRuntime(int8, ov_opts),
            }
            want = runs["ort fp32"].run(feed)["rows"]
            snr = {
                k: 10 * np.log10(np.sum(want**2) / max(np.sum((rt.run(feed)["rows"] - want) ** 2), 1e-30))
                for k, rt in runs.items()
                if "int8" in k
            }
            us = time_interleaved(runs, feed, args.rounds, args.calls)
            ov_ops = [
                f"{op.get_rt_info()['layerType'].astype(str)}:{op.get_rt_info()['runtimePrecision'].astype(str)}"
                for op in runs["ov int8"].compiled.get_runtime_model().get_ordered_ops()
                if op.get_rt_info()["layerType"].astype(str) not in ("Parameter", "Result", "Input", "Output")
            ]
            print(
                f"{label} {rows}x{dim}, ids {list(idx)}: file {fp32.stat().st_size / 1e6:.3f} -> "
                f"{int8.stat().st_size / 1e6:.3f} MB; µs per call (median of {args.rounds}x{args.calls}): "
                + ", ".join(f"{k} {v:.1f}" for k, v in us.items())
                + f"; int8 - fp32: ort {us['ort int8'] - us['ort fp32']:+.1f}, ov {us['ov int8'] - us['ov fp32']:+.1f}"
                + "; rows SNR dB: "
                + ", ".join(f"{k} {v:.1f}" for k, v in snr.items())
                + f"\n  OpenVINO exec graph (int8 form): {' '.join(ov_ops)}; "
                + str(exec_precisions(runs["ov int8"].compiled))
            )
            for rt in runs.values():
                rt.close()
    print(f"load after: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
