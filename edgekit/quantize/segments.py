"""Fetch groups run as one chain of graphs, each starting where the one before stopped.

A model whose tapped tensors do not fit one graph run (``taps.fetch_groups``) is read in groups,
and ``taps.outputs_only`` gives each group a graph that runs every node its tensors need from the
graph inputs: groups in graph order then cost about half a forward each (Sana-600M's histogram
pass: three groups, 2.19 forwards a call). Chained (``chain``), group g's graph runs only the nodes
no earlier group's graph ran, reads what those made as inputs (in a transformer: the residual
stream and the condition embeddings, a few MB) and outputs, beside its group, what later groups
read: about one forward a call whatever the number of groups, and each graph holds only its own
layers' weights. ``grouped_runs`` keeps the carried tensors per feed in memory where all of them
fit ``cap`` bytes (the fetch cap), else on disk beside the model (Sana-600M's histogram pass: 13.6
MB a call over 64 calls), and where the disk has no room either, every group runs unchained, as
before.

The values are the same as the whole graph's: run unoptimized (what every caller runs), each node
is the same kernel on the same inputs whatever graph holds it (``tests/quantize/test_segments.py``
compares them bit for bit). ``onnx`` and ``onnxruntime`` are imported lazily (``taps``).
"""

from __future__ import annotations

import contextlib
import shutil
import tempfile
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from edgekit.quantize.memory import tensor_bytes
from edgekit.quantize.taps import fetch_names, outputs_only, subgraph, tapped_session

GRAPH_ATTRIBUTES = (5, 10)  # onnx.AttributeProto GRAPH, GRAPHS: a subgraph reads outer names unseen


@dataclass(frozen=True)
class Segment:
    """One group's graph in a chain. ``graph``: weightless ``ModelProto`` (every graph input kept,
    ``takes`` added as inputs); ``fetch``: the group's tensors it outputs; ``carried``: the group's
    tensors an earlier graph made (read from the carry); ``takes``: the tensors it reads that earlier
    graphs made; ``gives``: the tensors it makes that later graphs read (outputs too); ``drops``:
    the carried tensors no graph after this one reads; ``nodes``: how many nodes it runs."""

    graph: Any
    fetch: tuple[str, ...]
    carried: tuple[str, ...]
    takes: tuple[str, ...]
    gives: tuple[str, ...]
    drops: tuple[str, ...]
    nodes: int


def chain(graph: Any, groups: Sequence[Sequence[str]]) -> list[Segment] | None:
    """``groups`` (tensors of ``graph``, weightless and shape-inferred, not changed) as a chain of
    graphs (module docstring); None where it cannot be chained: a node holds a subgraph, or a tensor
    to carry has no declared type."""
    src = graph.graph
    if any(a.type in GRAPH_ATTRIBUTES for n in src.node for a in n.attribute):
        return None
    nodes = list(src.node)
    made_by = {o: i for i, node in enumerate(nodes) for o in node.output if o}
    known = {v.name: v for v in [*src.value_info, *src.output, *src.input]}
    done: set[int] = set()
    parts: list[tuple[list[int], list[str], list[str], list[str]]] = []  # kept, fetch, carried, takes
    for group in groups:
        fetch = fetch_names(graph, group)
        need, kept = set(fetch), []
        for idx in range(len(nodes) - 1, -1, -1):
            if idx not in done and any(o in need for o in nodes[idx].output):
                kept.append(idx)
                need.update(i for i in nodes[idx].input if i)
        earlier = {t for t in need if made_by.get(t, -1) in done}
        parts.append(
            (kept[::-1], [t for t in fetch if t not in earlier], [t for t in fetch if t in earlier], sorted(earlier))
        )
        done.update(kept)
    read_at = {t: s for s, (_, _, carried, takes) in enumerate(parts) for t in [*carried, *takes]}  # last reader
    if any(t not in known for t in read_at):
        return None
    owner = {i: s for s, (kept, *_) in enumerate(parts) for i in kept}
    segments = []
    for s, (kept, fetch, carried, takes) in enumerate(parts):
        gives = sorted(t for t, last in read_at.items() if last > s and owner[made_by[t]] == s)
        drops = sorted(t for t, last in read_at.items() if last == s)
        outputs = list(dict.fromkeys([*fetch, *gives]))
        segments.append(
            Segment(
                subgraph(graph, [nodes[i] for i in kept], [known[t] for t in outputs], [known[t] for t in takes]),
                tuple(fetch),
                tuple(carried),
                tuple(takes),
                tuple(gives),
                tuple(drops),
                len(kept),
            )
        )
    return segments


def carry_bytes(graph: Any, segments: Sequence[Segment]) -> int:
    """The most bytes of carried tensors one feed holds at once along ``segments`` (from the static
    shapes; a tensor of unknown size counts as the largest known)."""
    sizes = tensor_bytes(graph)
    unknown = max(sizes.values(), default=0)
    held = peak = 0
    for seg in segments:
        held += sum(sizes.get(t, unknown) for t in seg.gives)
        peak = max(peak, held)
        held -= sum(sizes.get(t, unknown) for t in seg.drops)
    return peak


# Free disk a spilled carry leaves beside the model, past its own bytes.
DISK_MARGIN = 1 << 30


@dataclass(frozen=True)
class Chain:
    """``chain``'s segments and where their carry stays: ``spill`` True, on disk beside the model
    (one file a tensor and feed, read back when a later graph reads it), where the carry of every
    feed exceeds the cap in memory."""

    segments: list[Segment]
    spill: bool


def chained(
    graph: Any, groups: Sequence[Sequence[str]], feeds: int, cap: int, folder: Path | None = None
) -> Chain | None:
    """``chain``'s segments where there is more than one group and the carry of ``feeds`` feeds
    fits ``cap`` bytes in memory, or else (``folder`` given) the free disk of ``folder`` with
    DISK_MARGIN to spare; None otherwise (each group runs from the graph inputs). Sana-600M: 13.6 MB
    a call, 64 calls, 0.87 GB against a cap of 0.47 GB: spilled."""
    if len(groups) <= 1:
        return None
    segments = chain(graph, groups)
    if segments is None:
        return None
    total = carry_bytes(graph, segments) * feeds
    if total <= cap:
        return Chain(segments, spill=False)
    if folder is not None and shutil.disk_usage(folder).free >= total + DISK_MARGIN:
        return Chain(segments, spill=True)
    return None


def chain_forwards(
    graph: Any, groups: Sequence[Sequence[str]], feeds: int, cap: int, folder: Path | None = None
) -> float | None:
    """One pass of ``grouped_runs`` over a feed in forwards of the whole graph, where it chains
    (its graphs' nodes over the graph's); None where it does not."""
    plan = chained(graph, groups, feeds, cap, folder)
    if plan is None:
        return None
    return sum(s.nodes for s in plan.segments) / max(len(graph.graph.node), 1)


class _Carry:
    """Each feed's carried tensors, in memory or (``folder``) spilled one file each."""

    def __init__(self, folder: Path | None):
        self.folder = folder
        self.kept: list[dict[str, Any]] = []
        self.ids: dict[str, int] = {}  # tensor names may hold '/': files are numbered

    def put(self, i: int, name: str, value: np.ndarray) -> None:
        while len(self.kept) <= i:
            self.kept.append({})
        if self.folder is None:
            self.kept[i][name] = value
            return
        path = self.folder / f"{i}-{self.ids.setdefault(name, len(self.ids))}.npy"
        np.save(path, value)
        self.kept[i][name] = path

    def get(self, i: int, name: str) -> np.ndarray:
        value = self.kept[i][name]
        return np.load(value) if isinstance(value, Path) else value

    def drop(self, i: int, name: str) -> None:
        value = self.kept[i].pop(name, None) if i < len(self.kept) else None
        if isinstance(value, Path):
            value.unlink(missing_ok=True)


def grouped_runs(
    model_path: Path,
    graph: Any,
    groups: Sequence[Sequence[str]],
    feeds: Callable[[], Iterable[Mapping[str, np.ndarray]]],
    count: int | None,
    cap: int,
    threads: int = 0,
) -> Iterator[tuple[int, int, Mapping[str, np.ndarray], dict[str, np.ndarray]]]:
    """(group, feed index, the feed, {tensor: value}) for each of ``groups``' tensors of ``graph``
    (weightless; ``model_path``'s weights) that a session fetches (graph inputs are the caller's to
    read from the feed), group by group, each over every feed of ``feeds()`` (called once a group;
    ``count`` feeds at most; None: counted with one more ``feeds()`` where it matters, more than one
    group); one unoptimized session at a time. Chained where the carry fits ``cap`` in memory or the
    disk beside the model (``chained``), else each group from the graph inputs
    (``taps.outputs_only``)."""
    if count is None and len(groups) > 1:
        count = sum(1 for _ in feeds())
    plan = chained(graph, groups, count or 0, cap, model_path.parent)
    with contextlib.ExitStack() as stack:
        folder = None
        if plan is not None and plan.spill:
            folder = Path(
                stack.enter_context(tempfile.TemporaryDirectory(prefix="edgekit-carry-", dir=model_path.parent))
            )
        yield from _runs(
            model_path, graph, groups, feeds, None if plan is None else plan.segments, _Carry(folder), threads
        )


def _runs(
    model_path: Path,
    graph: Any,
    groups: Sequence[Sequence[str]],
    feeds: Callable[[], Iterable[Mapping[str, np.ndarray]]],
    segments: Sequence[Segment] | None,
    carry: _Carry,
    threads: int,
) -> Iterator[tuple[int, int, Mapping[str, np.ndarray], dict[str, np.ndarray]]]:
    """``grouped_runs``' loop: ``segments`` None, each group from the graph inputs."""
    inputs = {v.name for v in graph.graph.input}
    for g, group in enumerate(groups):
        seg = segments[g] if segments is not None else None
        names = fetch_names(graph, group) if seg is None else list(dict.fromkeys([*seg.fetch, *seg.gives]))
        if not names:  # nothing to run (ORT would return every output): carried or graph inputs only
            for i, feed in enumerate(feeds()):
                yield g, i, feed, _values(seg, carry, i, {})
                _pass_on(seg, carry, i, {})
            continue
        sub = outputs_only(graph, group) if seg is None else seg.graph
        with tapped_session(model_path, sub, threads, optimize=False, in_order=False) as session:
            made = {o.name for o in session.get_outputs()}
            names = [t for t in names if t in made]  # a tensor of no declared type is no output
            for i, feed in enumerate(feeds()):
                run_feed = {k: v for k, v in feed.items() if k in inputs}
                if seg is not None:
                    run_feed.update((t, carry.get(i, t)) for t in seg.takes)
                out = dict(zip(names, session.run(names, run_feed)))
                yield g, i, feed, _values(seg, carry, i, out)
                _pass_on(seg, carry, i, out)


def _values(seg: Segment | None, carry: _Carry, i: int, out: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """The group's fetched tensors of feed ``i``: those its graph made, then those carried."""
    if seg is None:
        return out
    values = {t: out[t] for t in seg.fetch if t in out}
    values.update((t, carry.get(i, t)) for t in seg.carried)
    return values


def _pass_on(seg: Segment | None, carry: _Carry, i: int, out: dict[str, np.ndarray]) -> None:
    """Feed ``i``'s carry after ``seg``: what it gives kept, what no later graph reads dropped."""
    if seg is None:
        return
    for t in seg.gives:
        carry.put(i, t, out[t])
    for t in seg.drops:
        carry.drop(i, t)
