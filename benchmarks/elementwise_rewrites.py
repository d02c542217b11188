"""The elementwise rewrites edgekit's runtimes make, timed against the graphs they replace, side by
side in one run: ``Sin`` on OpenVINO's CPU plugin (its reference kernel against the polynomial of
``runtimes/openvino_sin.py``) and Mish on ONNX Runtime's CPU provider (``Softplus -> Tanh -> Mul``
against the logistic form of ``runtimes/ort_fusions.rewrite_mish``), each on a float32 tensor of an
activation's size, with the error of each form against float64.

    python benchmarks/elementwise_rewrites.py [--shape 2,400,1024] [--threads 2] [--rounds 30] [--json OUT]

Each pair is timed interleaved (one call of each per round, the median of the rounds); the CPU
model, its ISA class and the package versions go into the JSON. Run it alone.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _host import machine, versions  # noqa: E402


def _graph(nodes: list[Any], shape: list[int], opset: int) -> bytes:
    from onnx import TensorProto, helper

    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, shape)],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=8)
    return model.SerializeToString()


def sin_pair(shape: list[int], threads: int) -> tuple[dict[str, Any], np.ndarray]:
    """{"reference kernel": compiled, "polynomial": compiled} of y = sin(x) on OpenVINO's CPU."""
    import openvino as ov
    from onnx import helper

    from edgekit.runtimes.openvino_sin import rewrite_sins

    core = ov.Core()
    data = _graph([helper.make_node("Sin", ["x"], ["y"])], shape, 17)
    config = {"INFERENCE_PRECISION_HINT": "f32", "INFERENCE_NUM_THREADS": threads, "PERFORMANCE_HINT": "LATENCY"}
    out = {}
    for name in ("reference kernel", "polynomial"):
        model = core.read_model(data, b"")
        if name == "polynomial" and rewrite_sins(model) != 1:
            raise SystemExit("error: the Sin was not rewritten (shape under openvino_sin.MIN_ELEMENTS?)")
        out[name] = core.compile_model(model, "CPU", config)
    x = np.random.default_rng(0).uniform(-50.0, 50.0, shape).astype(np.float32)  # a Snake's α·x range
    return out, x


def mish_pair(shape: list[int], threads: int) -> tuple[dict[str, Any], np.ndarray]:
    """{"Softplus chain": session, "logistic form": session} of y = mish(x) on ONNX Runtime's CPU."""
    import onnx
    import onnxruntime as ort
    from onnx import helper

    from edgekit.runtimes.ort_fusions import rewrite_mish

    nodes = [
        helper.make_node("Softplus", ["x"], ["sp"]),
        helper.make_node("Tanh", ["sp"], ["t"]),
        helper.make_node("Mul", ["x", "t"], ["y"]),
    ]
    data = _graph(nodes, shape, 17)
    rewritten = onnx.load_from_string(data)
    if rewrite_mish(rewritten) != 1:
        raise SystemExit("error: the Mish was not rewritten")
    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    out = {
        name: ort.InferenceSession(blob, options, providers=["CPUExecutionProvider"])
        for name, blob in (("Softplus chain", data), ("logistic form", rewritten.SerializeToString()))
    }
    x = (np.random.default_rng(0).standard_normal(shape) * 3.0).astype(np.float32)
    return out, x


def _call(runner: Any, x: np.ndarray) -> np.ndarray:
    if hasattr(runner, "create_infer_request"):  # an ov.CompiledModel
        return runner({"x": x})[runner.outputs[0]]
    return runner.run(None, {"x": x})[0]


def time_pair(runners: dict[str, Any], x: np.ndarray, rounds: int, exact: np.ndarray) -> dict[str, Any]:
    """Each runner's median ms over ``rounds`` interleaved calls (after 3 warm-up calls each) and
    its largest error against ``exact`` (float64)."""
    samples: dict[str, list[float]] = {name: [] for name in runners}
    errors = {name: float(np.abs(_call(r, x).astype(np.float64) - exact).max()) for name, r in runners.items()}
    for _ in range(3):
        for r in runners.values():
            _call(r, x)
    for _ in range(rounds):
        for name, r in runners.items():
            t0 = time.perf_counter()
            _call(r, x)
            samples[name].append((time.perf_counter() - t0) * 1e3)
    return {
        name: {"median_ms": statistics.median(s), "max_abs_error": errors[name], "samples_ms": s}
        for name, s in samples.items()
    }


def shape_arg(text: str) -> list[int]:
    """``--shape``: positive integers, comma-separated (e.g. 2,400,1024)."""
    try:
        shape = [int(d) for d in text.split(",")]
    except ValueError:
        shape = []
    if not shape or min(shape) < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not a shape: give positive integers, comma-separated (2,400,8)")
    return shape


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--shape", type=shape_arg, default=[2, 400, 1024], help="the tensor's shape, comma-separated")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=30)
    ap.add_argument("--json", type=Path, default=None, help="also write the record here")
    args = ap.parse_args()
    shape = args.shape
    doc: dict[str, Any] = {
        "schema": "edgekit.bench.elementwise_rewrites/1",
        "machine": machine(),
        "versions": versions(),
        "shape": shape,
        "threads": args.threads,
        "rounds": args.rounds,
    }
    sins, x = sin_pair(shape, args.threads)
    doc["openvino_sin"] = time_pair(sins, x, args.rounds, np.sin(x.astype(np.float64)))
    mishes, x = mish_pair(shape, args.threads)
    x64 = x.astype(np.float64)
    doc["ort_mish"] = time_pair(mishes, x, args.rounds, x64 * np.tanh(np.log1p(np.exp(x64))))
    m = doc["machine"]
    print(f"{m['cpu']} ({m['cores']} cores, {m['isa_class']}), float32{shape}, {args.threads} thread(s)")
    for key, title in (("openvino_sin", "OpenVINO CPU, Sin"), ("ort_mish", "ONNX Runtime CPU, Mish")):
        (old, old_r), (new, new_r) = doc[key].items()
        print(
            f"{title}: {old} {old_r['median_ms']:.3f} ms, {new} {new_r['median_ms']:.3f} ms "
            f"({old_r['median_ms'] / new_r['median_ms']:.1f}x); max error vs float64 "
            f"{old_r['max_abs_error']:.2g} / {new_r['max_abs_error']:.2g}"
        )
    if args.json is not None:
        args.json.write_text(json.dumps(doc, indent=1))
        print(f"wrote {args.json}")


if __name__ == "__main__":
    main()
