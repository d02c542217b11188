"""The AR step's cache forms side by side on ONNX Runtime CPU: the same network exported in two
forms (``edgekit.spec.AR_CACHE_IO``; e.g. a bundle of the stacked "loop" form and one of the
"layers" form), kernel time per op type and wall time per forward, on the feeds of one recorded
FP32 decode of each.

    python benchmarks/ar_cache_forms.py OLD_BUNDLE NEW_BUNDLE [--precision fp32] [--runs 20]
        [--threads 2] [--rounds 2] [--out benchmarks/results/ar_cache_forms.json]

Each bundle is opened as ``edgekit run --runtime ort`` opens it (``ort_op_profile.profile_forward``:
edgekit's fusions and disabled optimizers, IO binding, ORT's profiler on), ``--runs`` forwards
after 3 warm-up forwards; the two bundles take turns ``--rounds`` times (A B, B A, ...) and each
figure is the median over its rounds. Both decodes use seed 0: the same tokens when the two
bundles hold the same weights, so the forwards see the same positions. Run it alone (under the
CPU lock); the CPU model and flags go into the JSON. Recorded runs: ``ar_cache_forms_runs.jsonl``
(one document a line, with its command and date); docs/large-models.md reads them.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.ort_op_profile import profile_forward  # noqa: E402
from edgekit.bundle import Bundle  # noqa: E402
from edgekit.host import HostFacts, cpu_identity  # noqa: E402
from edgekit.quantize.calibrate import record_trajectories  # noqa: E402
from edgekit.spec import ar_cache_form  # noqa: E402


def recorded_calls(bundle: Bundle, threads: int, max_mb: int) -> list[dict[str, Any]]:
    """The feeds of one greedy FP32 decode of ``bundle`` (every call, or every n-th past ``max_mb``)."""
    from edgekit.runtimes.ort import OrtOptions, OrtRuntime

    with OrtRuntime(bundle.path_of("fp32"), OrtOptions(intra_op_threads=threads)) as rt:
        recorded = record_trajectories(bundle, rt, bundle.batch, seed=0, max_bytes=max_mb << 20)
    return list(recorded.feeds)


def merged(profiles: list[dict[str, Any]]) -> dict[str, Any]:
    """One bundle's rounds as one profile: every figure the median over the rounds."""
    ops = {o["op"] for p in profiles for o in p["ops"]}
    per_op = {
        op: statistics.median(next((o["ms_per_forward"] for o in p["ops"] if o["op"] == op), 0.0) for p in profiles)
        for op in ops
    }
    total = sum(per_op.values())
    return {
        "rounds": len(profiles),
        "kernel_ms_per_forward": total,
        "wall_ms_per_forward": statistics.median(p["wall_ms_per_forward"] for p in profiles),
        "wall_ms_rounds": [p["wall_ms_per_forward"] for p in profiles],
        "ops": sorted(
            ({"op": op, "ms_per_forward": ms, "share": ms / total} for op, ms in per_op.items()),
            key=lambda o: -o["ms_per_forward"],
        ),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("old", type=Path)
    ap.add_argument("new", type=Path)
    ap.add_argument("--precision", default="fp32", help="fp32, int8 or fp32,int8 (each bundle must hold it)")
    ap.add_argument("--runs", type=int, default=20)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--max-record-mb", type=int, default=512, help="bound of each decode's recording")
    ap.add_argument("--out", type=Path, default=Path("benchmarks/results/ar_cache_forms.json"))
    args = ap.parse_args()
    bundles = {"old": Bundle.load(args.old), "new": Bundle.load(args.new)}
    precisions = [p.strip() for p in args.precision.split(",") if p.strip()]
    for b in bundles.values():
        if b.kind != "ar":
            sys.exit(f"error: {b.root} is a {b.kind} bundle; both must be ar bundles")
        missing = [p for p in precisions if not b.has(p)]
        if missing:
            sys.exit(f"error: {b.root} has no {', '.join(missing)} model; run `edgekit quantize {b.root}` first")
    forms = {role: ar_cache_form(b.inputs, b.outputs) for role, b in bundles.items()}
    feeds = {role: recorded_calls(b, args.threads, args.max_record_mb) for role, b in bundles.items()}
    host = HostFacts.detect()
    doc: dict[str, Any] = {
        "schema": "edgekit.bench.ar_cache_forms/1",
        "cpu": cpu_identity(),
        "isa_class": host.isa_class,
        "threads": args.threads,
        "runs": args.runs,
        "bundles": {
            role: {"path": str(b.root), "form": forms[role], "calls": len(feeds[role])} for role, b in bundles.items()
        },
    }
    for precision in precisions:
        rounds: dict[str, list[dict[str, Any]]] = {"old": [], "new": []}
        for r in range(args.rounds):
            for role in ("old", "new") if r % 2 == 0 else ("new", "old"):
                path = bundles[role].path_of(precision)
                rounds[role].append(profile_forward(path, feeds[role], args.runs, args.threads))
        old, new = merged(rounds["old"]), merged(rounds["new"])
        doc[precision] = {
            "old": old,
            "new": new,
            "kernel_speedup": old["kernel_ms_per_forward"] / new["kernel_ms_per_forward"],
            "wall_speedup": old["wall_ms_per_forward"] / new["wall_ms_per_forward"],
        }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(doc, indent=1))
    print(
        f"{doc['cpu'].get('model')} ({host.isa_class}), {args.threads} thread(s), "
        f"{args.runs} forwards x {args.rounds} rounds"
    )
    for role, b in doc["bundles"].items():
        print(f"  {role}: {b['path']} ({b['form']} form, {b['calls']} recorded calls)")
    for precision in precisions:
        d = doc[precision]
        print(f"\n{precision}: {'op type':<28} {'old ms':>9} {'new ms':>9}")
        old_ops = {o["op"]: o["ms_per_forward"] for o in d["old"]["ops"]}
        new_ops = {o["op"]: o["ms_per_forward"] for o in d["new"]["ops"]}
        for op in sorted({*old_ops, *new_ops}, key=lambda o: -max(old_ops.get(o, 0.0), new_ops.get(o, 0.0))):
            print(f"  {op:<34} {old_ops.get(op, 0.0):9.3f} {new_ops.get(op, 0.0):9.3f}")
        old, new = d["old"], d["new"]
        print(
            f"  kernels per forward {old['kernel_ms_per_forward']:.2f} -> {new['kernel_ms_per_forward']:.2f} ms "
            f"({d['kernel_speedup']:.2f}x); wall {old['wall_ms_per_forward']:.2f} -> "
            f"{new['wall_ms_per_forward']:.2f} ms ({d['wall_speedup']:.2f}x)"
        )
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
