"""Where quantize's memory peaks (issue #42 point 3): ``quantize_bundle`` in this process, its
resident memory sampled every 50 ms by a thread and each sample tagged by the phase the run is in.

    python benchmarks/quantize_memory.py BUNDLE [--calib-samples 2] [--eval-samples 2]
        [--max-fallback 0] [--method minmax] [--out FILE.json] [--trust-code]
    python benchmarks/quantize_memory.py BUNDLE --defaults   # what `edgekit quantize BUNDLE` runs

The small settings above keep a run to one candidate; ``--defaults`` takes QuantizeConfig's own
(what the CLI runs with no options: auto method, auto sample counts, the search), where a model's
peak may come from the search's phases rather than the first candidate's.

The phases are the pipeline's own steps, found by wrapping the functions that run them (nothing
in edgekit is changed): prepare, FP32 calibration decodes (recording), FP32 held-out decodes,
calibrate (ORT's calibrator, or edgekit's), each candidate's build (ORT's quantizer, or derived), its
held-out INT8 decodes, the sensitivity ranking, the range drift, the speed timing, and recording
the artifact. For each: the peak RSS, the RSS when it began and ended, and its seconds. The
goal it is measured against: peak <= 2.5x the FP32 weight bytes + one decode's activations.

The bundle is quantized in place (its int8 artifact is replaced): pass a copy. Run it alone on
the machine (a 600 M-parameter model takes minutes and ~2.5x its weights of memory).
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import json
import os
import resource
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

PAGE = os.sysconf("SC_PAGE_SIZE")


def rss_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * PAGE


class PhaseSampler:
    """A thread that reads this process's RSS every ``interval`` s and files it under the phase
    the run is in (a stack: a phase inside another is its own row)."""

    def __init__(self, interval: float = 0.05):
        self.interval = interval
        self.stack: list[str] = ["start"]
        self.rows: dict[str, dict[str, Any]] = {}
        self.order: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)
        self.t0 = time.perf_counter()

    def _row(self, name: str) -> dict[str, Any]:
        if name not in self.rows:
            self.rows[name] = {"phase": name, "peak_rss": 0, "samples": 0, "seconds": 0.0}
            self.order.append(name)
        return self.rows[name]

    def sample(self) -> None:
        rss = rss_bytes()
        row = self._row(self.stack[-1])
        row["peak_rss"] = max(row["peak_rss"], rss)
        row["samples"] += 1

    def _loop(self) -> None:
        while not self._stop.wait(self.interval):
            self.sample()

    @contextlib.contextmanager
    def phase(self, name: str) -> Iterator[None]:
        self.sample()
        row = self._row(name)
        row.setdefault("rss_begin", rss_bytes())
        self.stack.append(name)
        t = time.perf_counter()
        try:
            yield
        finally:
            self.sample()
            row["seconds"] += time.perf_counter() - t
            row["rss_end"] = rss_bytes()
            self.stack.pop()

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()


def wrap(owner: Any, attr: str, sampler: PhaseSampler, name: str | Callable[..., str]) -> None:
    """Replace ``owner.attr`` by the same function run inside phase ``name`` (or name(*args))."""
    original = getattr(owner, attr)

    @functools.wraps(original)
    def tagged(*args: Any, **kwargs: Any) -> Any:
        with sampler.phase(name(*args, **kwargs) if callable(name) else name):
            return original(*args, **kwargs)

    setattr(owner, attr, tagged)


def instrument(sampler: PhaseSampler) -> None:
    import onnxruntime.quantization.calibrate as ort_calib

    from edgekit.quantize import calibrator, stage
    from edgekit.quantize.cpu import candidates, fallback

    builds = iter(range(10**6))
    wrap(fallback.FallbackProfile, "prepare", sampler, "prepare")
    wrap(stage, "record_trajectories", sampler, "FP32 calibration decodes (recording)")
    wrap(
        stage,
        "decode_eval_set",
        sampler,
        lambda *a, **k: (
            "speed: INT8 and FP32 decodes" if sampler.stack[-1].startswith("speed") else "FP32 held-out decodes"
        ),
    )
    wrap(fallback.FallbackProfile, "calibrate", sampler, "calibrate")
    # ORT's calibrator (what edgekit ran before quantize/calibrator.py), and edgekit's collection.
    wrap(ort_calib, "create_calibrator", sampler, "calibrate: ORT create_calibrator (proto + augmented session)")
    wrap(calibrator, "collect_min_max", sampler, "calibrate: tapped session, ranges call by call")
    wrap(calibrator, "collect_histograms", sampler, "calibrate: tapped session, histograms call by call")
    # Candidates: ORT's quantizer once per scale set, every other one derived by graph edits.
    wrap(candidates, "quantize_model", sampler, lambda *a, **k: f"build {next(builds)} (ORT's quantizer)")
    wrap(candidates, "derive_candidate", sampler, "derived candidates (graph edits)")
    wrap(fallback.FallbackProfile, "measure", sampler, "candidate held-out INT8 decodes")
    wrap(fallback.FallbackProfile, "sensitivity", sampler, "sensitivity ranking")
    wrap(fallback, "node_sensitivity", sampler, "sensitivity: tapped graphs (the noise each node adds)")
    wrap(fallback, "isolated_output_sqnr", sampler, "sensitivity: one node INT8 at a time")
    wrap(fallback, "range_drift", sampler, "range drift (summary)")
    wrap(fallback.FallbackProfile, "choose_fallback_form", sampler, "fallback form timing")
    wrap(stage, "decode_speed", sampler, "speed: INT8 vs FP32")
    wrap(stage, "record_result", sampler, "record artifact")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("bundle", type=Path)
    ap.add_argument("--calib-samples", type=int, default=2)
    ap.add_argument("--eval-samples", type=int, default=2)
    ap.add_argument("--max-fallback", type=int, default=0)
    ap.add_argument("--method", default="minmax")
    ap.add_argument("--out", type=Path)
    ap.add_argument("--trust-code", action="store_true", help="run the condition sampler a copied bundle names")
    ap.add_argument("--defaults", action="store_true", help="QuantizeConfig's defaults (the CLI's), not the above")
    args = ap.parse_args(argv)

    from edgekit._sidefiles import model_bytes
    from edgekit._userhooks import TRUST_CODE
    from edgekit.bundle import Bundle
    from edgekit.quantize import QuantizeConfig, quantize_bundle

    TRUST_CODE.set(args.trust_code)
    weights = model_bytes(Path(Bundle.load(args.bundle, verify=False).path_of("fp32")))
    sampler = PhaseSampler()
    instrument(sampler)
    cfg = (
        QuantizeConfig()
        if args.defaults
        else QuantizeConfig(
            calib_samples=args.calib_samples,
            eval_samples=args.eval_samples,
            max_fallback=args.max_fallback,
            method=args.method,
        )
    )
    t0 = time.perf_counter()
    sampler.start()
    try:
        with sampler.phase("quantize (outside any phase below)"):
            summary = quantize_bundle(args.bundle, cfg, progress=lambda m: print(f"  {m}", file=sys.stderr))
    finally:
        sampler.stop()
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    gib = 2**30
    doc = {
        "bundle": str(args.bundle),
        "config": {k: getattr(cfg, k) for k in ("calib_samples", "eval_samples", "max_fallback", "method")},
        "fp32_weight_bytes": weights,
        "peak_rss_bytes": peak,
        "ratio": peak / weights,
        "wall_s": time.perf_counter() - t0,
        "memory_record": summary.get("memory"),
        "phases": [sampler.rows[n] for n in sampler.order],
    }
    print(
        f"FP32 weights {weights / gib:.2f} GiB; peak RSS {peak / gib:.2f} GiB = {peak / weights:.2f}x", file=sys.stderr
    )
    for row in doc["phases"]:
        print(
            f"  {row['peak_rss'] / gib:6.2f} GiB peak ({row['peak_rss'] / weights:4.2f}x)  "
            f"begin {row.get('rss_begin', 0) / gib:5.2f} end {row.get('rss_end', 0) / gib:5.2f}  "
            f"{row['seconds']:7.1f} s  {row['phase']}",
            file=sys.stderr,
        )
    text = json.dumps(doc, indent=1, default=str)
    if args.out:
        args.out.write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
