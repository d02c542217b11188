"""Why the masked demo model trails the AR baseline: decode settings vs the network itself.

    python benchmarks/masked_quality.py [--n 64] [--steps 8,16,64] [--out benchmarks/results/masked_quality.json]

1. Decode settings on the shipped weights (FP32 PyTorch modules through edgekit's own loops, the
   same held-out conditions and seeds as benchmarks/demo_quality.py): masked-demo at K = 8, 16,
   64 with the bundle defaults (temperature 1, choice temperature 4.5), a colder setting
   (temperature 0.5, choice temperature 1) and greedy; the AR baseline at temperature 1 and 0.5
   (a colder sampler helps it too, so the comparison stays like for like).
2. The network alone: on 256 held-out true sequences with one position masked, the masked
   model's NLL and top-1 accuracy for that token against the corpus's exact posterior
   (every candidate token scored by the exact sequence likelihood). If the network's single-token
   posterior is far from the exact one, no decode schedule can make its sequences valid.
"""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path

import numpy as np
import torch

from edgekit.bundle import Bundle
from edgekit.evaluate import evaluate
from edgekit.models import load_spec
from edgekit.models.corpus import default_corpus
from edgekit.runtimes.torch_ref import TorchRuntime

MASKED_SETTINGS = {
    "defaults (T=1, choice T=4.5)": {},
    "T=0.5, choice T=1": {"temperature": 0.5, "choice_temperature": 1.0},
    "greedy (T=0)": {"temperature": 0.0},
}
AR_SETTINGS = {"defaults (T=1)": {}, "T=0.5": {"temperature": 0.5}}


def _bundle(spec, root: Path) -> Bundle:
    model = {"name": spec.name, "kind": spec.kind, "meta": dict(spec.meta), "ground_truth": spec.ground_truth}
    return Bundle.new(
        root / spec.name, model=model, inputs=spec.inputs, outputs=spec.outputs, decode_defaults=spec.decode_defaults
    )


def decode_grid(n: int, batch: int, masked_steps: tuple[int, ...], tmp: Path) -> list[dict]:
    rows = []
    for name, grid, steps in (("masked-demo", MASKED_SETTINGS, masked_steps), ("ar-demo", AR_SETTINGS, (None,))):
        spec = load_spec(name, batch=batch)
        bundle = _bundle(spec, tmp)
        with TorchRuntime(spec.module, spec.inputs, spec.outputs) as rt:
            for k in steps:
                for label, opts in grid.items():
                    if k == 64 and opts.get("temperature") == 0.0:
                        continue  # greedy at K=64 adds nothing the other two rows do not show
                    options = dict(opts) | ({"steps": k} if k else {})
                    q = evaluate(bundle, rt, n, seed=0, decode_options=options)["quality"]
                    rows.append({"model": name, "steps": k or spec.meta["max_len"], "setting": label, **q})
                    print(
                        (
                            f"{name:12} K={k or '-':>3} {label:30} validity "
                            f"{q['validity']:.3f}  event acc {q['event_accuracy']:.3f}"
                        ),
                        flush=True,
                    )
    return rows


def single_mask_posterior(count: int = 256) -> dict:
    """Masked model vs the exact posterior of one masked token given the rest of a true sequence."""
    corpus = default_corpus()
    rng = np.random.default_rng(5)
    classes = rng.integers(0, corpus.config.num_classes, count)
    seqs = corpus.sample_tokens(classes, rng)
    pos = rng.integers(0, corpus.config.seq_len, count)
    V = corpus.config.vocab_size
    exact_nll, exact_hit = [], []
    for s, c, p in zip(seqs, classes, pos):
        cand = np.repeat(s[None], V, axis=0)
        cand[:, p] = np.arange(V)
        logp = -corpus.sequence_nll(cand, np.full(V, c))
        logp -= np.logaddexp.reduce(logp)
        exact_nll.append(-logp[s[p]])
        exact_hit.append(np.argmax(logp) == s[p])
    spec = load_spec("masked-demo", batch=count)
    masked = torch.from_numpy(seqs).clone()
    masked[torch.arange(count), torch.from_numpy(pos)] = spec.meta["mask_id"]
    with torch.no_grad():
        logits = spec.module(masked, torch.from_numpy(classes.astype(np.int64)))[
            torch.arange(count), torch.from_numpy(pos)
        ]
    target = torch.from_numpy(seqs[np.arange(count), pos])
    return {
        "sequences": count,
        "exact_nll": float(np.mean(exact_nll)),
        "exact_top1": float(np.mean(exact_hit)),
        "model_nll": float(torch.nn.functional.cross_entropy(logits, target)),
        "model_top1": float((logits.argmax(-1) == target).float().mean()),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=64)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--steps", default="8,16,64", help="masked step counts K (64 is the slow one)")
    ap.add_argument("--out", type=Path, default=Path("benchmarks/results/masked_quality.json"))
    args = ap.parse_args()
    torch.set_num_threads(2)
    post = single_mask_posterior()  # first: cheap, and the answer to "why"
    print(
        f"one masked token given the rest of a true sequence ({post['sequences']} held-out): "
        f"masked-demo NLL {post['model_nll']:.3f} nats, top-1 {post['model_top1']:.3f}; "
        f"exact posterior NLL {post['exact_nll']:.3f}, top-1 {post['exact_top1']:.3f}",
        flush=True,
    )
    with tempfile.TemporaryDirectory() as tmp:
        rows = decode_grid(args.n, args.batch, tuple(int(k) for k in args.steps.split(",")), Path(tmp))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(
        json.dumps({"schema": "edgekit.masked-quality/1", "n": args.n, "decode": rows, "single_mask": post}, indent=2)
    )
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
