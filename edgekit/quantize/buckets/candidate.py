"""An INT8 candidate on the runtime that measures the budget: how each of its graphs is opened, and
the resident memory that opening and running it adds (what ``--step-buckets auto`` weighs a
bucket count by, ``--bucket-memory``).

Memory is measured in a child process, as a deployment would see it: the RSS after opening every
graph of the candidate and running each once on a recorded call of its own step range, minus
the RSS before the first open (the runtime's libraries, its compiled kernels and buffers
included). In this process the figures would be blurred by every candidate decoded before.
Measured (flow demo, batch 2, 4 buckets, 2026-12-02): ORT 61 MB for one scale, 68 MB for four
(the sessions share one weights file and one arena); OpenVINO 103 against 175 MB: each compiled
model keeps its own kernels and buffers (about 23 MB on the flow demo, of which the INT8 weights
are 2), and no setting of its CPU plugin shares them.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from edgekit.errors import EdgekitError
from edgekit.runtimes.registry import FileOptions, backend

CHILD_TIMEOUT_S = 600


def open_graph(runtime: str, model: Path, threads: int, spin: bool = True, bucket: bool = False) -> Any:
    """One INT8 graph of a candidate on the budget runtime, as its registry entry opens a file
    (``open_file``). ORT's threads spin inside runs always, and between runs unless ``spin`` is
    False or ``bucket``: one of several bucket sessions that take turns in one decode, which also
    share one arena (as the registry opens them)."""
    entry = backend(runtime, "--runtime")
    if entry.open_file is None:
        raise EdgekitError(f"--runtime {runtime} opens no ONNX file: it cannot decode a candidate for the budget")
    return entry.open_file(model, FileOptions("int8", threads, shared=bucket, spin=spin))


def added_rss(
    runtime: str, graphs: Sequence[Path], feeds: Sequence[Mapping[str, np.ndarray]], threads: int
) -> int | None:
    """Bytes of resident memory that opening ``graphs`` (one candidate: a graph per step bucket) on
    ``runtime`` and running graph i once on ``feeds[i]`` add to a fresh process; None where the
    process's RSS cannot be read (no /proc: not Linux)."""
    if len(graphs) != len(feeds):
        raise ValueError(f"{len(graphs)} graphs for {len(feeds)} feeds")
    with tempfile.TemporaryDirectory(prefix="edgekit-rss-") as tmp:
        npz = Path(tmp) / "feeds.npz"
        arrays = {f"{i}/{name}": np.asarray(value) for i, f in enumerate(feeds) for name, value in f.items()}
        # numpy's stub types **kwds against savez's own allow_pickle: bool keyword; the keys here
        # are "call/input" names.
        np.savez(npz, **arrays)  # type: ignore[arg-type]
        spec = {"runtime": runtime, "graphs": [str(g) for g in graphs], "feeds": str(npz), "threads": threads}
        (Path(tmp) / "spec.json").write_text(json.dumps(spec))
        done = subprocess.run(
            [sys.executable, "-m", "edgekit.quantize.buckets.candidate", str(Path(tmp) / "spec.json")],
            capture_output=True,
            text=True,
            timeout=CHILD_TIMEOUT_S,
        )
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or ["no output"])[-1]
        raise EdgekitError(
            f"measuring the memory of a step-bucketed candidate on {runtime} failed: {last}",
            hint="--bucket-memory 0 skips the measurement (no bound on the memory step buckets add)",
        )
    value = json.loads(done.stdout.strip().splitlines()[-1])["added_bytes"]
    return None if value is None else int(value)


def _rss_bytes() -> int | None:
    try:
        with open("/proc/self/status") as status:
            for line in status:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        return None
    return None


def _child(spec_path: str) -> None:
    spec = json.loads(Path(spec_path).read_text())
    stored = np.load(spec["feeds"])
    feeds: list[dict[str, np.ndarray]] = [{} for _ in spec["graphs"]]
    for key in stored.files:
        index, name = key.split("/", 1)
        feeds[int(index)][name] = stored[key]
    several = len(spec["graphs"]) > 1
    before = _rss_bytes()
    opened = [open_graph(spec["runtime"], Path(g), spec["threads"], bucket=several) for g in spec["graphs"]]
    for rt, f in zip(opened, feeds):
        rt.run(f)
    after = _rss_bytes()
    print(json.dumps({"added_bytes": None if before is None or after is None else after - before}))
    for rt in opened:
        rt.close()


if __name__ == "__main__":
    _child(sys.argv[1])
