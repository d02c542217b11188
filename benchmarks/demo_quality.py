"""Quality of the built-in demo models against the corpus ground truth: trained vs untrained.

    python benchmarks/demo_quality.py [--n 64] [--out benchmarks/results/demo_quality.json]

Runs the FP32 PyTorch modules (no export needed) through edgekit's own decode loops with the
bundle decode defaults, on held-out conditions; the untrained rows use the same architecture
at its initialisation (torch.manual_seed(0)). The README's model-quality table comes from here.
"""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path

import torch

from edgekit.bundle import Bundle
from edgekit.evaluate import evaluate
from edgekit.models import load_spec
from edgekit.models.corpus import default_corpus
from edgekit.models.demo import build_module
from edgekit.runtimes.torch_ref import TorchRuntime


def _bundle(spec, root: Path) -> Bundle:
    model = {"name": spec.name, "kind": spec.kind, "meta": dict(spec.meta), "ground_truth": spec.ground_truth}
    return Bundle.new(
        root / spec.name, model=model, inputs=spec.inputs, outputs=spec.outputs, decode_defaults=spec.decode_defaults
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=64)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--out", type=Path, default=Path("benchmarks/results/demo_quality.json"))
    args = ap.parse_args()
    torch.set_num_threads(2)
    rows = {}
    with tempfile.TemporaryDirectory() as tmp:
        for trained in (True, False):
            label = "trained" if trained else "untrained"
            masked_tokens = None
            for name in ("masked-demo", "ar-demo", "flow-demo"):
                spec = load_spec(name, batch=args.batch)
                module = spec.module
                if not trained:
                    torch.manual_seed(0)
                    fresh = build_module(name).eval()
                    module = type(module)(fresh).eval() if name == "ar-demo" else fresh  # ARStep wraps the model
                bundle = _bundle(spec, Path(tmp))
                with TorchRuntime(module, spec.inputs, spec.outputs) as rt:
                    cond = {"tokens": masked_tokens} if name == "flow-demo" else None
                    res = evaluate(bundle, rt, args.n, seed=0, cond=cond)
                if name == "masked-demo":
                    masked_tokens = res["output"]
                    if trained:  # the NAR quality/steps trade-off: more steps, fewer parallel commits
                        for steps in (4, 16, 64):
                            with TorchRuntime(module, spec.inputs, spec.outputs) as rt:
                                q = evaluate(bundle, rt, args.n, seed=0, decode_options={"steps": steps})["quality"]
                            rows[f"{name} (trained, K={steps})"] = q
                rows[f"{name} ({label})"] = res["quality"]
    rows["corpus (true samples)"] = default_corpus().reference_token_metrics
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({"schema": "edgekit.demo-quality/1", "n": args.n, "rows": rows}, indent=2))
    print(f"{'model':32} {'validity':>9} {'event acc':>9} {'NLL/tok':>8} {'SNR dB':>7}")
    for label, q in rows.items():
        print(
            f"{label:32} {q.get('validity', float('nan')):9.3f} {q.get('event_accuracy', float('nan')):9.3f} "
            f"{q.get('nll_per_token', float('nan')):8.3f} {q.get('snr_db', float('nan')):7.1f}"
        )
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
