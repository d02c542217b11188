"""A step-bucketed INT8 model behind the one ``Runtime`` protocol: one inner runtime per step
range (each graph with its own activation scales over shared weights), picked per call from the
position the call's own feeds show (``spec.step_position``: the mask share, t, or the cache
position). The decode loops stay as they are: they never say which step they are at."""

from __future__ import annotations

import hashlib
import json
import math
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

import numpy as np

from edgekit.bundle import Bundle
from edgekit.errors import BundleError
from edgekit.runtimes.base import Runtime
from edgekit.spec import step_position


class BucketedRuntime:
    """``runtimes[i]`` runs the calls whose position falls in bucket i: ``boundaries[i-1] <=
    position < boundaries[i]`` (ascending edges, len(runtimes) - 1 of them)."""

    def __init__(self, runtimes: Sequence[Runtime], boundaries: Sequence[float], kind: str, meta: Mapping[str, Any]):
        if len(runtimes) != len(boundaries) + 1 or not runtimes:
            raise BundleError(f"step buckets: {len(runtimes)} graphs for {len(boundaries)} boundaries; expected one more graph than boundaries")
        self.runtimes = list(runtimes)
        self.edges = np.asarray(boundaries, dtype=np.float64)
        self.kind, self.meta = kind, meta
        first = self.runtimes[0]
        self.name = first.name
        self.device = first.device
        self.inputs = first.inputs
        self.outputs = first.outputs
        self.calls = [0] * len(self.runtimes)  # per bucket: what the loop actually used

    @property
    def warnings(self) -> list[str]:
        return [w for rt in self.runtimes for w in rt.warnings]

    def __getattr__(self, attr: str) -> Any:  # settings, timing_note, session_info, ...: the first graph's
        if attr in ("runtimes", "edges"):
            raise AttributeError(attr)
        return getattr(self.runtimes[0], attr)

    def bucket(self, feeds: Mapping[str, np.ndarray]) -> int:
        position = step_position(self.kind, feeds, self.meta)
        if not np.isfinite(position):
            return 0
        return int(np.searchsorted(self.edges, position, side="right"))

    def run(self, feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        i = self.bucket(feeds)
        self.calls[i] += 1
        return self.runtimes[i].run(feeds)

    def close(self) -> None:
        for rt in self.runtimes:
            rt.close()

    def __enter__(self) -> "BucketedRuntime":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


def bucket_binding(by: str, boundaries: Sequence[float], graphs: Sequence[tuple[str, str]]) -> str:
    """The sha256 that binds each step bucket's graph to its place: the position axis, the edges
    and, in bucket order, each graph's (name, file sha256). ``quantize`` records it with the
    buckets (and ``build`` with their engines); a reader recomputes it from the hashes it verified,
    so graphs swapped in the manifest (paths and hashes moved together, each file still
    verifying) or edges edited are refused, never run at the wrong steps."""
    doc = {"by": str(by), "boundaries": [float(b) for b in boundaries], "graphs": [[str(n), str(s)] for n, s in graphs]}
    return hashlib.sha256(json.dumps(doc, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


def step_buckets(bundle: Bundle, artifact: str = "int8") -> dict[str, Any] | None:
    """The step buckets ``artifact`` was quantized with ({"n", "by", "boundaries", "artifacts",
    "binding"}: bucket 0 is ``artifact`` itself), or None for a one-scale model (or another
    artifact). A record whose parts disagree (counts, order, edges, its binding) is a BundleError."""
    if artifact != "int8":
        return None
    doc = (bundle.quantization or {}).get("step_buckets")
    if not isinstance(doc, Mapping) or (not doc.get("artifacts") and (doc.get("n") or 1) < 2):
        return None
    names, edges = list(doc.get("artifacts") or []), list(doc.get("boundaries") or [])
    missing = [a for a in names if not bundle.has(a)]
    if len(names) < 2 or names[0] != artifact or len(set(names)) != len(names) or doc.get("n") != len(names) \
            or len(edges) != len(names) - 1:
        problem = (f"record {doc.get('n')} buckets over graphs {names[:9]} with {len(edges)} boundaries "
                   f"(valid: n graphs, the first {artifact!r}, and n - 1 boundaries)")
    elif not all(math.isfinite(e) for e in edges) or any(b <= a for a, b in zip(edges, edges[1:])):
        problem = f"have boundaries {edges[:9]}, which are not ascending finite positions"
    elif missing:
        problem = f"name graph {missing[0]!r}, which is not in the manifest"
    elif doc.get("binding") != bucket_binding(doc.get("by", ""), edges, [(n, bundle.artifact(n).sha256) for n in names]):
        problem = ("do not match what quantize recorded: the graphs or their boundaries changed in the manifest "
                   "(each bucket's graph is bound to its place)")
    else:
        return dict(doc)
    raise BundleError(f"bundle {bundle.root}: the int8 model's step buckets {problem}",
                      hint=f"re-quantize with `edgekit quantize {bundle.root} --step-buckets {max(len(names), 2)}`")


# opener(path, shared): ``shared`` True when several sessions take turns in one decode (ORT opens
# them with ``runtimes.ort.taking_turns``: spinning inside runs only, one shared arena).
PathOpener = Callable[[Path, bool], Runtime]


def open_artifact(bundle: Bundle, artifact: str, open_path: PathOpener) -> Runtime:
    """The runtime over a bundle artifact: one file, or every step bucket's graph behind a
    ``BucketedRuntime`` when the int8 model was quantized with ``--step-buckets``."""
    buckets = step_buckets(bundle, artifact)
    if buckets is None:
        return open_path(bundle.path_of(artifact), False)
    return open_paths([bundle.path_of(a) for a in buckets["artifacts"]], buckets["boundaries"], bundle, open_path)


def open_paths(paths: Sequence[Path], boundaries: Sequence[float], bundle: Bundle, open_path: PathOpener) -> Runtime:
    opened: list[Runtime] = []
    try:
        for path in paths:
            opened.append(open_path(path, True))
    except BaseException:
        for rt in opened:
            rt.close()
        raise
    return BucketedRuntime(opened, boundaries, bundle.kind, bundle.meta)
