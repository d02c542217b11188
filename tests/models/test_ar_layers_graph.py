"""What makes the "layers" AR step fast, asserted on its graphs (never on time): no node copies a
cache input (no Gather of a layer's slice, no Concat with the token's key, no Split), and once ONNX
Runtime has optimized it as edgekit's runtime opens it, every cache input is read in place by a
MatMul (ORT fuses the transpose of q @ Kc^T into a FusedMatMul)."""

from __future__ import annotations

import pytest

pytest.importorskip("torch")
onnx = pytest.importorskip("onnx")

from tests.tiny_models import tiny_ar_spec  # noqa: E402

COPIES = {"Concat", "Gather", "Split", "Slice", "Expand", "Tile"}


@pytest.fixture(scope="module")
def graphs(tmp_path_factory):
    """{form: (exported fp32 graph, ORT's optimized graph)} of the tiny AR (three layers)."""
    import torch

    from edgekit.export.to_bundle import export_bundle
    from edgekit.runtimes.ort import OrtOptions, OrtRuntime

    root = tmp_path_factory.mktemp("ar-layers-graph")
    out = {}
    for form in ("layers", "loop"):
        with torch.random.fork_rng():
            torch.manual_seed(0)
            spec = tiny_ar_spec(batch=2, cache=form, depth=3)
        bundle = export_bundle(spec, root / form, source="tiny-ar")
        optimized = root / f"{form}-ort.onnx"
        with OrtRuntime(bundle.path_of("fp32"), OrtOptions(optimized_model_path=str(optimized))):
            pass
        out[form] = (onnx.load(str(bundle.path_of("fp32"))), onnx.load(str(optimized)))
    return out


def consumers(graph, names):
    """{input name: [op types of the nodes that read it]}."""
    return {name: [n.op_type for n in graph.node if name in n.input] for name in names}


def cache_inputs(graph):
    return [i.name for i in graph.input if "_cache" in i.name]


def test_no_node_of_the_layers_graph_copies_a_cache_input(graphs):
    exported, _ = graphs["layers"]
    reads = consumers(exported.graph, cache_inputs(exported.graph))
    assert sorted(reads) == sorted(f"{kv}_cache_{i}" for i in range(3) for kv in "kv")
    for name, ops in reads.items():
        assert ops and not COPIES & set(ops), (name, ops)
    # The token's own key and value are joined only as (B, nh, 1, Lmax + 1) scores: no Concat
    # in the graph reaches Lmax slots of head_dim values.
    assert all(op in ("MatMul", "Transpose") for ops in reads.values() for op in ops), reads


def test_ort_reads_every_layer_cache_in_place(graphs):
    _, optimized = graphs["layers"]
    reads = consumers(optimized.graph, cache_inputs(optimized.graph))
    assert len(reads) == 6
    for name, ops in reads.items():
        assert ops and set(ops) <= {"MatMul", "FusedMatMul"}, (name, ops)


def test_the_stacked_loop_form_copies_its_caches(graphs):
    """The check above sees copies where they are: the "loop" form's stacked caches are read
    through Gather (a layer's slice) and joined to the token's key by Concat."""
    exported, optimized = graphs["loop"]
    reads = consumers(exported.graph, ["k_cache", "v_cache"])
    assert all(COPIES & set(ops) for ops in reads.values()), reads
    assert any(n.op_type == "Concat" for n in optimized.graph.node)
