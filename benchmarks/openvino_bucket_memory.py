"""What a step-bucketed model costs in memory on OpenVINO's CPU plugin, for each way of holding
its bucket graphs (issue #27: RSS with N buckets <= 1.2x one scale):

    python benchmarks/openvino_bucket_memory.py [--buckets 4] [--out benchmarks/results/openvino_bucket_memory.json]

The flow demo (batch 2) is exported and quantized with ``--step-buckets N`` (cpu profile, this
host's scheme); then each way below is opened in a fresh process, run once per bucket on a real
decode call of that bucket's t range, and the resident memory it added is read (VmRSS after minus
before the first open, OpenVINO's libraries included, as ``quantize --bucket-memory`` measures):

- ``one graph``: bucket 0's graph alone (the single-scale cost, the baseline)
- ``compiled models``: one compiled model per bucket, one ``ov.Core`` (what edgekit opens)
- ``a core each``: one compiled model per bucket, each from its own ``ov.Core``
- ``imported blobs``: each bucket compiled, exported (``export_model``) and imported back, as
  ``edgekit build --target intel-cpu`` ships them
- ``one If model``: one compiled model holding every bucket graph behind nested ``If`` ops on a
  bucket-index input (OpenVINO's Python API; the bodies are the bucket graphs as read)
- ``scales as inputs``: bucket 0's graph with a runtime Mul+Add before every activation
  quantizer and after every INT8 Gemm/Conv (the ops a graph whose scales are inputs needs; fed
  identity values, so it computes bucket 0): its memory and its time per call

Then the time per call of each (median over interleaved rounds, one process) and the ``If``
model's output against the separate bucket graphs. Run it alone; the CPU is recorded.
"""

from __future__ import annotations

import argparse
import collections
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

WAYS = ("one graph", "compiled models", "a core each", "imported blobs", "one If model", "scales as inputs")
CONFIG = {"INFERENCE_PRECISION_HINT": "f32", "PERFORMANCE_HINT": "LATENCY"}


def _rss_mb() -> float:
    for line in open("/proc/self/status"):
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError("no VmRSS in /proc/self/status")


def nested_if(ov: Any, models: list[Any]) -> Any:
    """One ov.Model choosing models[i] by an ``edgekit_bucket`` input (int64 [1]) via nested If."""
    from openvino import opset8, opset13

    def level(i: int, data: list[Any], bucket: Any) -> list[Any]:
        iff = opset8.if_op(opset13.equal(bucket, opset13.constant(np.array([i], np.int64))).output(0))
        then_body = models[i]
        if i + 1 == len(models) - 1:
            else_body, else_bucket = models[i + 1], None
        else:
            params = [ov.op.Parameter(p.get_element_type(), p.get_partial_shape()) for p in data]
            else_bucket = ov.op.Parameter(ov.Type.i64, ov.PartialShape([1]))
            outs = level(i + 1, params, else_bucket)
            else_body = ov.Model([opset13.result(o) for o in outs], params + [else_bucket], f"buckets_{i + 1}_on")
        iff.set_then_body(then_body)
        iff.set_else_body(else_body)
        for k, p in enumerate(data):
            iff.set_input(p.output(0), then_body.get_parameters()[k], else_body.get_parameters()[k])
        if else_bucket is not None:
            iff.set_input(bucket.output(0), None, else_bucket)
        return [iff.set_output(t, e) for t, e in zip(then_body.get_results(), else_body.get_results())]

    ref = models[0]
    params = []
    for p in ref.get_parameters():
        q = ov.op.Parameter(p.get_element_type(), p.get_partial_shape())
        q.output(0).get_tensor().set_names(set(p.output(0).get_names()))
        params.append(q)
    bucket = ov.op.Parameter(ov.Type.i64, ov.PartialShape([1]))
    bucket.output(0).get_tensor().set_names({"edgekit_bucket"})

    results = []
    for o, r in zip(level(0, params, bucket), ref.get_results()):
        res = opset13.result(o)
        res.output(0).get_tensor().set_names(set(r.output(0).get_names()))
        results.append(res)
    return ov.Model(results, params + [bucket], "bucketed")


def scales_as_inputs(src: Path, out: Path) -> Path:
    """Bucket 0's graph with a runtime Mul+Add (fed 1 and 0) before every activation quantizer and
    after every Gemm/Conv that reads a dequantized activation."""
    import onnx
    from onnx import TensorProto, helper

    m = onnx.load(str(src))
    g = m.graph
    inits = {i.name for i in g.initializer}
    producer = {o: n for n in g.node for o in n.output}
    added, inputs = [], []

    def scalar(name: str) -> str:
        inputs.append(helper.make_tensor_value_info(name, TensorProto.FLOAT, [1]))
        return name

    for k, n in enumerate([n for n in g.node if n.op_type == "QuantizeLinear" and n.input[0] not in inits]):
        x = n.input[0]
        added += [
            helper.make_node("Mul", [x, scalar(f"scale_{k}")], [f"{x}_scaled_{k}"]),
            helper.make_node("Add", [f"{x}_scaled_{k}", scalar(f"shift_{k}")], [f"{x}_shifted_{k}"]),
        ]
        n.input[0] = f"{x}_shifted_{k}"
    for k, n in enumerate([n for n in g.node if n.op_type in ("Gemm", "Conv")]):
        p = producer.get(n.input[0])
        if p is None or p.op_type != "DequantizeLinear" or p.input[0] in inits:
            continue
        y = n.output[0]
        n.output[0] = f"{y}_raw"
        added += [
            helper.make_node("Mul", [f"{y}_raw", scalar(f"out_scale_{k}")], [f"{y}_rescaled"]),
            helper.make_node("Add", [f"{y}_rescaled", scalar(f"out_shift_{k}")], [y]),
        ]
    nodes, have, pending = [], {i.name for i in g.input} | inits | {i.name for i in inputs} | {""}, list(g.node) + added
    while pending:  # topological order
        rest = [n for n in pending if not all(i in have for i in n.input)]
        for n in pending:
            if n not in rest:
                nodes.append(n)
                have.update(n.output)
        if len(rest) == len(pending):
            raise RuntimeError("cycle while ordering the rewritten graph")
        pending = rest
    del g.node[:]
    g.node.extend(nodes)
    g.input.extend(inputs)
    onnx.save(m, str(out))
    return out


def open_way(ov: Any, way: str, graphs: list[Path], blobs: list[Path], scaled: Path) -> list[tuple[Any, int | None]]:
    """[(compiled model, the bucket index it is fed or None)] for ``way``."""
    core = ov.Core()
    if way == "one graph":
        return [(core.compile_model(str(graphs[0]), "CPU", CONFIG), None)]
    if way == "compiled models":
        return [(core.compile_model(str(g), "CPU", CONFIG), None) for g in graphs]
    if way == "a core each":
        return [(ov.Core().compile_model(str(g), "CPU", CONFIG), None) for g in graphs]
    if way == "imported blobs":
        return [(core.import_model(b.read_bytes(), "CPU", CONFIG), None) for b in blobs]
    if way == "one If model":
        compiled = core.compile_model(nested_if(ov, [core.read_model(str(g)) for g in graphs]), "CPU", CONFIG)
        return [(compiled, i) for i in range(len(graphs))]
    return [(core.compile_model(str(scaled), "CPU", CONFIG), None)]


def feeds_for(compiled: Any, call: dict[str, np.ndarray], bucket: int | None) -> dict[str, np.ndarray]:
    feeds = dict(call)
    for port in compiled.inputs:
        name = port.get_any_name()
        if name == "edgekit_bucket":
            feeds[name] = np.array([bucket], np.int64)
        elif name not in feeds:  # scales as inputs: identity values
            feeds[name] = np.array([0.0 if "shift" in name else 1.0], np.float32)
    return feeds


def child(way: str, spec_path: str) -> None:
    spec = json.loads(Path(spec_path).read_text())
    calls = [dict(np.load(p)) for p in spec["calls"]]
    before = _rss_mb()
    import openvino as ov

    opened = open_way(
        ov, way, [Path(g) for g in spec["graphs"]], [Path(b) for b in spec["blobs"]], Path(spec["scaled"])
    )
    requests: dict[int, Any] = {}  # one request per compiled model (the If model runs every body on its one)
    for i, (compiled, bucket) in enumerate(opened):
        request = requests.setdefault(id(compiled), compiled.create_infer_request())
        request.infer(feeds_for(compiled, calls[i if bucket is None else bucket], bucket))
    print(json.dumps({"added_mb": _rss_mb() - before}))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--buckets", type=int, default=4)
    ap.add_argument("--rounds", type=int, default=40)
    ap.add_argument("--out", type=Path, default=None)
    ap.add_argument("--child", nargs=2, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        return child(*args.child)

    import openvino as ov

    from edgekit.bundle import Bundle
    from edgekit.export.to_bundle import export_bundle
    from edgekit.host import cpu_identity
    from edgekit.models import load_spec
    from edgekit.quantize import QuantizeConfig, quantize_bundle
    from edgekit.quantize.budget import decode_eval_set
    from edgekit.runtimes import open_runtime
    from edgekit.runtimes.recording import RecordingRuntime

    tmp = Path(tempfile.mkdtemp(prefix="edgekit-ov-memory-"))
    print(f"· export + quantize the flow demo with --step-buckets {args.buckets} in {tmp}", file=sys.stderr)
    root = export_bundle(load_spec("flow-demo", batch=2), tmp / "flow", source="flow-demo").root
    quantize_bundle(root, QuantizeConfig(step_buckets=args.buckets, bucket_memory=0))
    b = Bundle.load(root)
    graphs = [b.path_of(a) for a in b.step_buckets().graphs]
    # One real decode call per bucket: the first call of the held-out decode whose t falls in it.
    with open_runtime(b, "ort", "int8") as rt:
        recorder = RecordingRuntime(rt, b.kind, b.meta)
        decode_eval_set(b, recorder, 1, 0, {})
    calls: list[Any] = [None] * len(graphs)
    for feeds in recorder.feeds:
        i = rt.bucket(feeds)
        calls[i] = calls[i] if calls[i] is not None else feeds
    calls = [c if c is not None else recorder.feeds[0] for c in calls]
    call_files = []
    for i, c in enumerate(calls):
        call_files.append(tmp / f"call-{i}.npz")
        np.savez(call_files[-1], **c)
    core, blobs = ov.Core(), []
    for i, g in enumerate(graphs):
        exported = core.compile_model(str(g), "CPU", CONFIG).export_model()
        blobs.append(tmp / f"bucket-{i}.blob")
        blobs[-1].write_bytes(exported.getvalue() if hasattr(exported, "getvalue") else bytes(exported))
    scaled = scales_as_inputs(graphs[0], tmp / "scales-as-inputs.onnx")
    spec = tmp / "spec.json"
    spec.write_text(
        json.dumps(
            {
                "graphs": [str(g) for g in graphs],
                "blobs": [str(p) for p in blobs],
                "scaled": str(scaled),
                "calls": [str(p) for p in call_files],
            }
        )
    )

    rows: dict[str, dict[str, Any]] = {}
    for way in WAYS:
        out = subprocess.run(
            [sys.executable, __file__, "--child", way, str(spec)], capture_output=True, text=True, check=True
        )
        rows[way] = {"added_mb": json.loads(out.stdout.strip().splitlines()[-1])["added_mb"]}
        print(f"· {way}: {rows[way]['added_mb']:.1f} MB", file=sys.stderr)

    # Time per call, interleaved: each way runs its bucket's call in turn (round robin over buckets).
    opened = {way: open_way(ov, way, graphs, blobs, scaled) for way in WAYS}
    requests = {
        way: [
            (c.create_infer_request(), feeds_for(c, calls[i if k is None else k], k)) for i, (c, k) in enumerate(items)
        ]
        for way, items in opened.items()
    }
    times: dict[str, list[float]] = collections.defaultdict(list)
    for _ in range(args.rounds):
        for way, reqs in requests.items():
            t0 = time.perf_counter()
            for request, feeds in reqs:
                request.infer(feeds)
            times[way].append((time.perf_counter() - t0) / len(reqs))
    ref = {i: np.array(r.get_output_tensor(0).data) for i, (r, _) in enumerate(requests["compiled models"])}
    snr = []
    for i, (request, _) in enumerate(requests["one If model"]):
        request.infer(requests["one If model"][i][1])
        got = np.array(request.get_output_tensor(0).data).astype(np.float64)
        snr.append(
            float(10 * np.log10((ref[i].astype(np.float64) ** 2).sum() / max(((ref[i] - got) ** 2).sum(), 1e-30)))
        )
    base_mb, base_ms = rows["one graph"]["added_mb"], float(np.median(times["one graph"]))
    for way in WAYS:
        ms = float(np.median(times[way]))
        rows[way] |= {"ratio": rows[way]["added_mb"] / base_mb, "ms_per_call": ms * 1e3, "ms_ratio": ms / base_ms}
    result = {
        "cpu": cpu_identity(),
        "openvino": ov.get_version(),
        "buckets": len(graphs),
        "rows": rows,
        "if_model_vs_bucket_graphs_snr_db": snr,
        "date": time.strftime("%Y-%m-%d"),
    }
    print(
        f"| way ({len(graphs)} buckets, flow demo batch 2) | memory "
        "added, MB | vs one graph | ms per call | vs one graph |"
    )
    print("|---|---|---|---|---|")
    for way, r in rows.items():
        print(f"| {way} | {r['added_mb']:.1f} | {r['ratio']:.2f}x | {r['ms_per_call']:.2f} | {r['ms_ratio']:.2f}x |")
    print(f"one If model vs the separate bucket graphs: {', '.join(f'{s:.0f}' for s in snr)} dB")
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
