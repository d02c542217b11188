"""The soak measurements, each run in a fresh interpreter by tests/reliability/test_soak.py.

RSS is a process-wide figure: inside a pytest-xdist worker it also counts what earlier tests left
behind (their threads, arenas and allocator pools still settling), which once read +4 MiB over a
decode loop that allocates nothing. A child process that does only the soak gives the loop's own
growth. Usage: ``python -m tests.reliability._soak_child {ar|fused|masked} BUNDLE_DIR``; prints one
JSON object.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import numpy as np

from edgekit.bundle import Bundle
from edgekit.decode.dispatch import decode, decode_config
from edgekit.probes.latency import summarize
from edgekit.probes.memory import memory_snapshot
from edgekit.runtimes import open_runtime


def _growth(run_once, warmup: int, measured: int) -> int:
    for i in range(warmup):
        run_once(i)
    before = memory_snapshot().rss_bytes
    for i in range(measured):
        run_once(i)
    return memory_snapshot().rss_bytes - before


def ar(root: Path) -> dict:
    """The AR loop feeds ORT's double-buffered cache outputs straight back."""
    from edgekit.runtimes.ort import OrtRuntime

    bundle = Bundle.load(root)
    with open_runtime(bundle, "ort", "fp32", threads=1) as rt:
        defaults = bundle.manifest["decode_defaults"]
        growth = _growth(
            lambda i: decode("ar", rt, bundle.meta, {}, decode_config("ar", defaults, {}, seed=i)), 1000, 1000
        )
        return {"growth": growth, "ping_pong": isinstance(rt, OrtRuntime) and rt.outputs_stay_valid == 2}


def fused(root: Path) -> dict:
    """Tokens ping-pong through the fused masked step graph (exported by the parent)."""
    from edgekit.decode.fused import decode_fused
    from edgekit.runtimes import open_fused

    bundle = Bundle.load(root)
    cond = {"class_id": np.array([0, 2])}
    rt, entry = open_fused(bundle, "step", threads=1)
    with rt:
        cfg = decode_config("masked", bundle.manifest["decode_defaults"], {})
        return {"growth": _growth(lambda i: decode_fused("masked", rt, entry, cond, cfg), 1000, 1000)}


def masked(root: Path) -> dict:
    """2,000 masked decodes after a 2,000-decode warm-up, timed into a preallocated array."""
    bundle = Bundle.load(root)
    defaults = bundle.manifest["decode_defaults"]
    with open_runtime(bundle, "ort", "fp32", threads=1) as rt:
        # Warm-up: the ORT arena and the malloc/pymalloc pools settle over the first ~1,500
        # decodes (measured: +1.1, +0.8, +0.1 MiB per 500, then 0).
        for i in range(2000):
            decode("masked", rt, bundle.meta, {}, decode_config("masked", defaults, {}, seed=i))
        samples = np.zeros(2000, dtype=np.int64)  # preallocated: the measurement must not allocate
        before = memory_snapshot().rss_bytes
        for i in range(2000):
            t0 = time.perf_counter_ns()
            out = decode("masked", rt, bundle.meta, {}, decode_config("masked", defaults, {}, seed=i))
            samples[i] = time.perf_counter_ns() - t0
        after = memory_snapshot().rss_bytes
    stats = summarize(samples.tolist())
    return {
        "growth": after - before,
        "shape": list(out.output.shape),
        "n": stats.n,
        "median_ms": stats.median_ms,
        "p99_ms": stats.p99_ms,
    }


if __name__ == "__main__":
    which, root = sys.argv[1], Path(sys.argv[2])
    print(json.dumps({"ar": ar, "fused": fused, "masked": masked}[which](root)))
