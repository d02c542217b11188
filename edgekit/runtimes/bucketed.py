"""A step-bucketed INT8 model behind the one ``Runtime`` protocol: one inner runtime per step
range (each graph with its own activation scales over shared weights), picked per call from the
position the call's own feeds show (``spec.step_position``: the mask share, t, or the cache
position). The decode loops stay as they are: they never say which step they are at."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

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
            raise BundleError(
                f"step buckets: {len(runtimes)} graphs for {len(boundaries)} boundaries; "
                "expected one more graph than boundaries"
            )
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

    # What the engine says (settings, timing note, session, files): the first graph's.
    @property
    def settings(self) -> Mapping[str, Any]:
        return self.runtimes[0].settings

    @property
    def timing_note(self) -> str | None:
        return self.runtimes[0].timing_note

    @property
    def session_info(self) -> Mapping[str, Any] | None:
        return self.runtimes[0].session_info

    @property
    def model_files(self) -> tuple[Path, ...]:
        return self.runtimes[0].model_files

    @property
    def outputs_stay_valid(self) -> int:  # each graph keeps its own outputs: the least of them
        return min(rt.outputs_stay_valid for rt in self.runtimes)

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

    def __enter__(self) -> BucketedRuntime:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


# opener(path, shared): ``shared`` True when several sessions take turns in one decode (ORT opens
# them with ``runtimes.ort.taking_turns``: spinning inside runs only, one shared arena).
PathOpener = Callable[[Path, bool], Runtime]


def open_artifact(bundle: Bundle, artifact: str, open_path: PathOpener) -> Runtime:
    """The runtime over a bundle artifact: one file, or every step bucket's graph behind a
    ``BucketedRuntime`` when the int8 model was quantized with ``--step-buckets``."""
    buckets = bundle.step_buckets(artifact)
    if buckets is None:
        return open_path(bundle.path_of(artifact), False)
    return open_paths([bundle.path_of(a) for a in buckets.graphs], buckets.boundaries, bundle, open_path)


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
