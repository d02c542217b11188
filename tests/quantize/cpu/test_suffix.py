"""One node INT8 at a time, run from where the one-node graph differs from the float one
(``quantize.cpu.suffix``): the same output SQNR as the whole graph, fewer nodes run."""

from __future__ import annotations

import contextlib

import pytest

from edgekit.quantize.config import QuantizeConfig
from tests.quantize.conftest import build_tiny_model, tiny_feeds

NAIVE_OPS = ("MatMul", "Gemm", "Conv", "LayerNormalization", "Softmax", "Sin", "Cos")


@pytest.fixture
def one_node(tmp_path):
    """(float model, build(nodes) -> one-node QDQ model path, every INT8-able node, feeds): the tiny
    flow block with everything INT8-able."""
    from edgekit.quantize import graph as qgraph
    from edgekit.quantize.calibrate import calibration_reader
    from edgekit.quantize.cpu import ptq
    from edgekit.quantize.cpu.select import select_nodes

    model = build_tiny_model(tmp_path / "tiny.onnx", seed=3)
    cfg = QuantizeConfig(op_types=NAIVE_OPS, float_attention_core=False, float_time_embedding=False)
    plan = qgraph.analyse_graph(model, time_input="t")
    chosen, _ = select_nodes(plan, cfg)
    calib = tiny_feeds(8, seed=1)
    reader = calibration_reader(calib)
    made = iter(range(1000))

    def build(nodes):
        out = tmp_path / f"int8-{next(made)}.onnx"
        ptq.quantize_model(model, out, reader, nodes, cfg, plan, calibration_cache=tmp_path / "cache.json")
        return out

    return model, build, list(chosen), calib[:4]


def test_each_nodes_output_sqnr_from_its_suffix_is_the_whole_graphs(one_node, monkeypatch):
    from edgekit.quantize.cpu import sensitivity

    model, build, nodes, feeds = one_node
    graphs = []
    real = sensitivity.tapped_session

    @contextlib.contextmanager
    def seen(path, graph, *args, **kwargs):
        graphs.append(len(graph.graph.node))
        with real(path, graph, *args, **kwargs) as session:
            yield session

    monkeypatch.setattr(sensitivity, "tapped_session", seen)
    whole = sensitivity.isolated_output_sqnr(model, build, nodes, feeds, "y", suffixes=False)
    assert graphs == []  # whole graphs: plain sessions
    parts = sensitivity.isolated_output_sqnr(model, build, nodes, feeds, "y")
    assert len(graphs) == 1 + len(nodes)  # the float run fetching the boundary tensors, then each suffix
    for node in nodes:  # the same kernels on the same inputs: the same numbers (here to the bit)
        assert parts[node] == pytest.approx(whole[node], abs=1e-6), node
    assert whole["sin"] < 25 < whole["proj"]  # and they still tell the nodes apart


def test_a_suffix_runs_what_differs_and_what_reads_it_on_the_float_tensors_at_its_edge(one_node):
    import onnx

    from edgekit.quantize.cpu.suffix import downstream, suffix_of
    from edgekit.quantize.taps import graph_without_weights

    model, build, _, _ = one_node
    float_graph = graph_without_weights(model)
    takes = downstream(float_graph, "proj")
    # proj's input (the attention output, after its outlier scale), and the two time-embedding
    # branches the residual adds read after it
    assert takes == ("a2", "ea1", "eb1")
    one = onnx.load(str(build(["proj"])))
    part = suffix_of(float_graph, one, "y", takes)
    assert part is not None and part.takes == takes
    assert part.nodes < part.of == len(one.graph.node)
    ran = {n.name for n in part.graph.graph.node}
    assert "proj" in ran and not ran & {"ln", "q_proj", "k_proj", "qk", "softmax", "av", "sin", "cos"}
    assert {v.name for v in part.graph.graph.input} >= set(takes)
    # a boundary tensor the float run did not fetch: no suffix (the whole graph runs instead)
    assert suffix_of(float_graph, one, "y", takes[:-1]) is None
    # an unknown node, a subgraph-holding graph: no suffix either
    assert downstream(float_graph, "no-such-node") is None


def test_boundary_tensors_over_the_fetch_cap_mean_whole_graphs(one_node, monkeypatch):
    """The float tensors every suffix reads are held for every feed: where they pass the fetch
    cap, none is fetched and each one-node graph runs whole."""
    from edgekit.quantize.cpu import sensitivity

    model, build, nodes, feeds = one_node
    calls = []
    monkeypatch.setattr(sensitivity, "fetch_cap", lambda path: 0)
    monkeypatch.setattr(sensitivity, "tapped_session", lambda *a, **k: calls.append(a))
    out = sensitivity.isolated_output_sqnr(model, build, nodes[:3], feeds, "y")
    assert calls == [] and set(out) == set(nodes[:3])
