"""Graphs tapped for their activations (``quantize/taps.py``): where the taps run, and what they reduce."""

from __future__ import annotations

import numpy as np
import pytest

from edgekit.quantize import taps
from edgekit.quantize.config import WEIGHTED_OPS
from tests.quantize.conftest import tiny_feeds

pytest.importorskip("onnxruntime")
onnx = pytest.importorskip("onnx")


def test_each_tap_runs_right_after_the_node_that_makes_its_tensor(tiny_model):
    """Taps at the end of the graph keep every tapped tensor of a call alive until the call ends;
    placed after their producer (and run in graph order: ``tapped_session``) each is freed early."""
    graph = taps.graph_without_weights(tiny_model)
    tensors = taps.calibrated_tensors(graph, (*WEIGHTED_OPS, "LayerNormalization"))
    taps.add_min_max_taps(graph, tensors)
    nodes = list(graph.graph.node)
    made_at = {o: i for i, n in enumerate(nodes) for o in n.output if not n.name.startswith("edgekit_range")}
    for i, node in enumerate(nodes):
        if node.name.startswith("edgekit_range"):
            tensor = node.input[0]
            between = nodes[made_at[tensor] + 1 : i] if tensor in made_at else nodes[:i]
            assert all(n.name.startswith("edgekit_range") for n in between), (tensor, [n.name for n in between])
    assert sum(n.name.startswith("edgekit_range") for n in nodes) == 2 * len(tensors)
    onnx.checker.check_model(graph)  # still topologically sorted


def test_a_magnitude_tap_reduces_the_smallest_absolute_value(tiny_model, tmp_path):
    """min, max and min |x| per tensor in turn, computed by the graph as numpy computes them."""
    graph = taps.graph_without_weights(tiny_model)
    names = ["x"]
    outputs = taps.add_min_max_taps(graph, names, magnitude=True)
    assert outputs == ["edgekit_range_min_0", "edgekit_range_max_0", "edgekit_range_absmin_0"]
    feed = tiny_feeds(1)[0]
    with taps.tapped_session(tiny_model, graph, optimize=False) as session:
        lo, hi, absmin = session.run(outputs, feed)
    x = feed["x"]
    assert (lo, hi, absmin) == (x.min(), x.max(), np.abs(x).min())
    assert taps.add_min_max_taps(taps.graph_without_weights(tiny_model), names) == outputs[:2]


def test_tail_taps_take_each_tensors_largest_magnitudes_after_the_range_taps(tiny_model):
    """``tails``: a TopK of the |x| the magnitude tap makes, the k largest |x| of the call, in the
    tensors' order after every range tap; a tensor without a k has none, and no ``magnitude`` none."""
    graph = taps.graph_without_weights(tiny_model)
    names = ["x", "h", "q"]
    outputs = taps.add_min_max_taps(graph, names, magnitude=True, tails={"x": 5, "q": 3})
    assert outputs[9:] == ["edgekit_range_tail_0", "edgekit_range_tail_2"]
    onnx.checker.check_model(graph)
    feed = tiny_feeds(1)[0]
    with taps.tapped_session(tiny_model, graph, optimize=False) as session:
        values = dict(zip(outputs, session.run(outputs, feed)))
    np.testing.assert_array_equal(np.sort(values["edgekit_range_tail_0"]), np.sort(np.abs(feed["x"]).ravel())[-5:])
    q_top = values["edgekit_range_tail_2"]  # q is no output: its largest |x| is its range's end
    assert q_top.shape == (3,) and q_top.max() == max(-values["edgekit_range_min_2"], values["edgekit_range_max_2"])
    assert len(taps.add_min_max_taps(taps.graph_without_weights(tiny_model), names, tails={"x": 5})) == 6


def test_fetch_names_leave_the_graph_alone_and_read_its_inputs_from_the_feeds(tiny_model):
    """The names a tapped session fetches, found without making them outputs; adding them as
    outputs then fetches the same names and reads graph inputs from the feed."""
    graph = taps.graph_without_weights(tiny_model)
    tensors = taps.calibrated_tensors(graph, WEIGHTED_OPS)
    before = [o.name for o in graph.graph.output]
    names = taps.fetch_names(graph, ["x", *tensors])
    assert [o.name for o in graph.graph.output] == before
    assert "x" not in names and names == [t for t in tensors if t != "x"]
    assert taps.add_tensor_outputs(graph, ["x", *tensors]) == names
    assert [o.name for o in graph.graph.output] == before + [n for n in names if n not in before]


@pytest.mark.parametrize("groups", [1, 2, 3, 5])
def test_group_progress_counts_one_graph_over_every_call_whatever_the_grouping(groups):
    """Each group runs every call: progress ends at one pass's worth, never goes back, and starts
    from what came before."""
    calls = 7
    seen = [taps.group_progress(10, g, groups, calls, i) for g in range(groups) for i in range(calls)]
    assert seen == sorted(seen) and seen[-1] == 10 + calls and seen[0] >= 10


def test_a_group_s_graph_runs_only_the_nodes_its_tensors_need_and_computes_them_alike(tiny_model):
    """Groups in graph order: the first layers' group runs the first layers only (outputs: the group
    alone; no initializer nothing reads), and each tensor's values are the whole graph's."""
    graph = taps.graph_without_weights(tiny_model)
    tensors = taps.in_graph_order(graph, taps.calibrated_tensors(graph, WEIGHTED_OPS))
    made_by = {o: i for i, n in enumerate(graph.graph.node) for o in n.output}
    assert [made_by.get(t, -1) for t in tensors] == sorted(made_by.get(t, -1) for t in tensors)
    first = [t for t in tensors if t in made_by][:1]
    pruned = taps.outputs_only(graph, first)
    assert [o.name for o in pruned.graph.output] == first
    assert len(pruned.graph.node) == made_by[first[0]] + 1 < len(graph.graph.node)
    assert [n.name for n in taps.needed_nodes(graph, first)] == [n.name for n in pruned.graph.node]
    used = {i for n in pruned.graph.node for i in n.input}
    assert all(i.name in used for i in pruned.graph.initializer)
    assert [i.name for i in pruned.graph.input] == [i.name for i in graph.graph.input]
    whole = taps.outputs_only(graph, [])  # nothing to fetch: the graph as it was, its own outputs
    assert len(whole.graph.node) == len(graph.graph.node) and whole.graph.output == graph.graph.output
    feed = tiny_feeds(1)[0]
    everything = taps.outputs_only(graph, tensors)
    with taps.tapped_session(tiny_model, pruned, optimize=False) as s:
        (alone,) = s.run(first, feed)
    with taps.tapped_session(tiny_model, everything, optimize=False) as s:
        (within,) = s.run(first, feed)
    np.testing.assert_array_equal(alone, within)
