"""Fetch groups run as a chain of graphs (``quantize/segments.py``): each graph runs only what no
earlier one ran, the values are the whole graph's to the bit, and a carry over the cap runs every
group from the graph inputs instead."""

from __future__ import annotations

import contextlib

import numpy as np
import pytest

from edgekit.quantize import segments, taps
from edgekit.quantize.config import WEIGHTED_OPS
from edgekit.quantize.memory import tensor_bytes
from tests.quantize.conftest import tiny_feeds

pytest.importorskip("onnxruntime")
onnx = pytest.importorskip("onnx")

OPS = (*WEIGHTED_OPS, "LayerNormalization", "Softmax", "Add", "Mul")


def _one_tensor_groups(model):
    """The tiny model's tensors of ``OPS`` (graph inputs left out), one a group, in graph order."""
    graph = taps.graph_without_weights(model)
    inputs = {v.name for v in graph.graph.input}
    tensors = [t for t in taps.calibrated_tensors(graph, OPS) if t not in inputs]
    return graph, [[t] for t in taps.in_graph_order(graph, tensors)]


def _whole(model, graph, tensors, feeds):
    """Every tensor of ``tensors`` from one unoptimized graph that outputs them all."""
    with taps.tapped_session(model, taps.outputs_only(graph, tensors), optimize=False, in_order=False) as s:
        return [dict(zip(tensors, s.run(list(tensors), feed))) for feed in feeds]


@contextlib.contextmanager
def _sessions(monkeypatch):
    """The graphs ``grouped_runs`` opens, as they are opened."""
    opened: list = []
    real = segments.tapped_session

    def recording(path, graph, *args, **kwargs):
        opened.append(graph)
        return real(path, graph, *args, **kwargs)

    monkeypatch.setattr(segments, "tapped_session", recording)
    yield opened


def test_a_chain_runs_each_node_once_and_gives_the_whole_graphs_values_to_the_bit(tiny_model, monkeypatch):
    graph, groups = _one_tensor_groups(tiny_model)
    feeds = tiny_feeds(3)
    chain = segments.chain(graph, groups)
    assert chain is not None and len(chain) == len(groups) > 4
    ran = [n.name for s in chain for n in s.graph.graph.node]
    assert len(ran) == len(set(ran))  # no node runs in two graphs
    assert any(s.takes for s in chain)  # later graphs start from what earlier ones made
    whole = _whole(tiny_model, graph, [t for g in groups for t in g], feeds)
    with _sessions(monkeypatch) as opened:
        got = list(segments.grouped_runs(tiny_model, graph, groups, lambda: feeds, len(feeds), cap=1 << 30))
    assert len(opened) == len(groups)
    assert sum(len(g.graph.node) for g in opened) == len(ran)  # one pass over the nodes a feed, not one per group
    assert [(g, i) for g, i, _, _ in got] == [(g, i) for g in range(len(groups)) for i in range(len(feeds))]
    for g, i, feed, values in got:
        assert feed is feeds[i]
        assert values.keys() == set(groups[g])
        for t, v in values.items():
            np.testing.assert_array_equal(v, whole[i][t], err_msg=t)  # bit for bit


def test_a_carry_over_the_cap_spills_to_disk_and_gives_the_same_values(tiny_model, monkeypatch, tmp_path):
    """Over the cap in memory, the carry goes to files beside the model, read back as later graphs
    read them and removed after: the same values, nothing left behind."""
    import shutil

    model = tmp_path / "tiny.onnx"
    shutil.copy(tiny_model, model)
    graph, groups = _one_tensor_groups(model)
    feeds = tiny_feeds(3)
    per_feed = segments.carry_bytes(graph, segments.chain(graph, groups))
    assert per_feed > 0
    fits = segments.chained(graph, groups, len(feeds), per_feed * len(feeds))
    assert fits is not None and not fits.spill
    assert segments.chained(graph, groups, len(feeds), per_feed * len(feeds) - 1) is None  # no folder: no spill
    over = segments.chained(graph, groups, len(feeds), per_feed, tmp_path)
    assert over is not None and over.spill
    whole = _whole(model, graph, [t for g in groups for t in g], feeds)
    saved: list = []
    real_save = np.save
    monkeypatch.setattr(segments.np, "save", lambda path, value: (saved.append(path), real_save(path, value))[1])
    with _sessions(monkeypatch) as opened:
        got = list(segments.grouped_runs(model, graph, groups, lambda: feeds, len(feeds), cap=per_feed))
    assert saved and all(p.parent.parent == tmp_path for p in saved)  # spilled beside the model
    assert sorted(p.name for p in tmp_path.iterdir()) == ["tiny.onnx"]  # and removed after
    assert sum(len(g.graph.node) for g in opened) == sum(len(s.graph.graph.node) for s in over.segments)
    for _g, i, _, values in got:
        for t, v in values.items():
            np.testing.assert_array_equal(v, whole[i][t], err_msg=t)


def test_a_carry_neither_memory_nor_disk_holds_runs_every_group_from_the_graph_inputs(tiny_model, monkeypatch):
    graph, groups = _one_tensor_groups(tiny_model)
    feeds = tiny_feeds(3)
    per_feed = segments.carry_bytes(graph, segments.chain(graph, groups))
    monkeypatch.setattr(segments, "DISK_MARGIN", 1 << 62)
    assert segments.chained(graph, groups, len(feeds), per_feed, tiny_model.parent) is None
    whole = _whole(tiny_model, graph, [t for g in groups for t in g], feeds)
    with _sessions(monkeypatch) as opened:
        got = list(segments.grouped_runs(tiny_model, graph, groups, lambda: feeds, len(feeds), cap=per_feed))
    for g, sub in enumerate(opened):  # each group's own graph, from the graph inputs
        assert [o.name for o in sub.graph.output] == groups[g]
        assert {v.name for v in sub.graph.input} == {v.name for v in graph.graph.input}
    for _g, i, _, values in got:
        for t, v in values.items():
            np.testing.assert_array_equal(v, whole[i][t], err_msg=t)


def test_carry_bytes_count_what_is_alive_between_graphs():
    """One tensor made by the first graph and read by the third is carried over the second too; a
    dropped one is not."""

    class _Seg:
        def __init__(self, gives, drops):
            self.gives, self.drops = gives, drops

    graph = onnx.helper.make_model(
        onnx.helper.make_graph(
            [],
            "g",
            [onnx.helper.make_tensor_value_info(n, onnx.TensorProto.FLOAT, [s]) for n, s in (("a", 10), ("b", 100))],
            [],
        )
    )
    chain = [_Seg(["a"], []), _Seg(["b"], ["b"]), _Seg([], ["a"])]
    assert segments.carry_bytes(graph, chain) == 4 * (10 + 100)
    assert segments.carry_bytes(graph, [_Seg(["a"], ["a"]), _Seg(["b"], [])]) == 4 * 100


def test_a_graph_with_a_subgraph_is_not_chained(tiny_model):
    graph, groups = _one_tensor_groups(tiny_model)
    then = onnx.helper.make_graph(
        [], "then", [], [onnx.helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, None)]
    )
    graph.graph.node.append(onnx.helper.make_node("If", ["cond"], ["out"], then_branch=then, else_branch=then))
    assert segments.chain(graph, groups) is None
    assert segments.chained(graph, groups, 1, 1 << 30) is None


def test_one_group_is_not_chained(tiny_model):
    graph, groups = _one_tensor_groups(tiny_model)
    assert segments.chained(graph, [[t for g in groups for t in g]], 1, 1 << 30) is None
    assert segments.chain_forwards(graph, [[t for g in groups for t in g]], 1, 1 << 30) is None
    forwards = segments.chain_forwards(graph, groups, 1, 1 << 30)
    assert forwards is not None and 0 < forwards <= 1.0
    assert tensor_bytes(graph)  # the sizes the carry is priced from
