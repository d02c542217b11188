"""The names a quantized node is known by outside edgekit (issue #44, point 4): the FP32 graph's
node(s) each prepared node came from and its torch module, recorded in the manifest and accepted
wherever quantize takes a layer's name (``--exclude``, ``--overrides``, what ``debug --fix`` writes)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from edgekit.bundle import MANIFEST, Bundle
from edgekit.cli import app
from edgekit.errors import EXIT_USAGE, UsageError
from edgekit.quantize import QuantizeConfig
from edgekit.quantize.cpu.select import select_nodes
from edgekit.quantize.graph import analyse_graph
from edgekit.quantize.names import Lineage, labels_of, torchscript_module, trace_origins

onnx = pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")
from onnx import helper, numpy_helper  # noqa: E402

runner = CliRunner()
FAST = ["--calib-samples", "2", "--eval-samples", "2"]
LOOSE = ["--budget", "lockstep_token_agreement=0", "--budget", "event_accuracy_drop=1", "--budget", "check_margin=-100"]
WEIGHTED = ("MatMul", "Gemm", "Conv")


def invoke(*args):
    return runner.invoke(app, [str(a) for a in args], catch_exceptions=False)


def fp32_graph(bundle: Path):
    return onnx.load(str(Bundle.load(bundle).path_of("fp32")), load_external_data=False).graph


@pytest.fixture(scope="module")
def prepared(tiny_bundles, tmp_path_factory) -> tuple[Path, Path]:
    """(the tiny masked model's fp32 graph, the graph quant_pre_process makes of it)."""
    from edgekit.quantize.cpu.ptq import prepare_model

    fp32 = Bundle.load(tiny_bundles["masked"]).path_of("fp32")
    out, skipped, _ = prepare_model(fp32, tmp_path_factory.mktemp("prepared") / "prepared.onnx")
    assert skipped is None
    return fp32, out


def test_every_prepared_weighted_node_maps_to_the_fp32_nodes_that_hold_its_weights(prepared):
    fp32_path, prep_path = prepared
    fp32, prep = onnx.load(str(fp32_path)).graph, onnx.load(str(prep_path)).graph
    lineage = Lineage.read(fp32_path, prep_path)
    fp32_by_name = {n.name: n for n in fp32.node}
    fused = [n for n in prep.node if n.name not in fp32_by_name and n.op_type in WEIGHTED]
    assert fused, "quant_pre_process renamed no weighted node: nothing here would test the tracing"
    for node in (n for n in prep.node if n.op_type in WEIGHTED):
        origin = lineage.origin(node.name)
        assert origin and all(o in fp32_by_name for o in origin), (node.name, origin)
        # The weight (and bias) tensors are read by exactly those FP32 nodes.
        consts = {i for i in node.input[1:] if i}
        readers = {n.name for n in fp32.node if consts & set(n.input)}
        assert readers == set(origin), (node.name, origin, readers)
    # A Linear's MatMul + bias Add, fused into one Gemm: both FP32 nodes, one torch module.
    gemm = next(n for n in fused if n.op_type == "Gemm")
    ops = [fp32_by_name[o].op_type for o in lineage.origin(gemm.name)]
    assert ops == ["MatMul", "Add"], ops
    assert lineage.module(gemm.name) in {"blocks.0.attn.qkv", "blocks.0.attn.proj", "blocks.0.mlp.fc", "head"} | {
        "blocks.0.mlp.out"
    }


def test_the_tracing_rules_in_order():
    """Same name; a constant only that node read; a surviving output name; a name prefix up to a
    separator (qnn's ``<gemm>_matmul``) -- and a constant several nodes share says nothing."""

    def graph(nodes, inits=()):
        return helper.make_graph(nodes, "g", [], [], [numpy_helper.from_array(a, n) for n, a in inits])

    import numpy as np

    w = np.ones((2, 2), np.float32)
    fp32 = graph(
        [
            helper.make_node("MatMul", ["x", "W"], ["y"], name="mm"),
            helper.make_node("Add", ["y", "b"], ["z"], name="bias"),
            helper.make_node("Reshape", ["z", "shape"], ["r1"], name="r1"),
            helper.make_node("Reshape", ["r1", "shape"], ["r2"], name="r2"),
            helper.make_node("Gemm", ["r2", "G"], ["out"], name="gemm"),
        ],
        [("W", w), ("b", w[0]), ("shape", np.array([2, 2])), ("G", w)],
    )
    prepared = graph(
        [
            helper.make_node("Gemm", ["x", "W", "b"], ["t0"], name="mm/MatMulAddFusion"),  # by its constants
            helper.make_node("Reshape", ["t0", "shape"], ["z"], name="new_reshape"),  # by its output name
            helper.make_node("Reshape", ["z", "shape"], ["t1"], name="r1"),  # by its name
            helper.make_node("Reshape", ["t1", "shape"], ["t2"], name="other"),  # shared constant: nothing
            helper.make_node("MatMul", ["t2", "G_matmul"], ["t3"], name="gemm_matmul"),  # by its name's prefix
        ]
    )
    origins = trace_origins(fp32, prepared)
    assert origins == {
        "mm/MatMulAddFusion": ("mm", "bias"),
        "new_reshape": ("bias",),
        "r1": ("r1",),
        "other": (),
        "gemm_matmul": ("gemm",),
    }


def test_torch_module_from_name_scopes_or_torchscript_names(tiny_bundles):
    labels = labels_of(fp32_graph(tiny_bundles["masked"]))
    assert {"head", "blocks.0.attn.qkv", "blocks.0.mlp.fc"} <= set(labels.values())
    assert torchscript_module("/encoder/layers.0/attn/q_proj/MatMul") == "encoder.layers.0.attn.q_proj"
    assert torchscript_module("/MatMul") is None and torchscript_module("node_MatMul_2") is None
    node = helper.make_node("MatMul", ["a", "b"], ["c"], name="/blocks.1/mlp/fc/MatMul")
    assert labels_of(helper.make_graph([node], "g", [], [])) == {"/blocks.1/mlp/fc/MatMul": "blocks.1.mlp.fc"}


def _plan(prepared):
    fp32_path, prep_path = prepared
    return analyse_graph(prep_path, lineage=Lineage.read(fp32_path, prep_path))


def test_a_layer_is_named_by_its_prepared_node_its_fp32_nodes_or_its_module(prepared):
    plan = _plan(prepared)
    gemm = next(n for n in plan.nodes if n.op_type == "Gemm" and n.module == "head")
    matmul, add = gemm.origin
    for name in (gemm.name, matmul, add, "head"):
        _, floated = select_nodes(plan, QuantizeConfig(overrides=({"node": name, "action": "float"},)))
        assert {n for n, why in floated.items() if why.startswith("override float")} == {gemm.name}, name
    # A module covers every node under it: blocks.0.mlp is its two Linears.
    _, floated = select_nodes(plan, QuantizeConfig(overrides=({"node": "blocks.0.mlp", "action": "float"},)))
    overridden = {n for n, why in floated.items() if why.startswith("override")}
    assert {plan.by_name()[n].module for n in overridden} == {"blocks.0.mlp.fc", "blocks.0.mlp.out"}


def test_a_name_that_matches_nothing_is_one_line_with_the_closest_name(prepared):
    plan = _plan(prepared)
    with pytest.raises(UsageError) as info:
        select_nodes(plan, QuantizeConfig(overrides=({"node": "blocks.0.mlp.fcc", "action": "float"},)))
    text = str(info.value)
    assert "'blocks.0.mlp.fcc'" in text and "matches no node" in text and "did you mean 'blocks.0.mlp.fc'?" in text
    assert "\n" not in text
    with pytest.raises(
        UsageError, match=r"--exclude 'node_MatMul_500' matches no node .*did you mean 'node_MatMul_50'"
    ):
        select_nodes(plan, QuantizeConfig(exclude=("node_MatMul_500",)))


def test_the_manifest_maps_the_fallback_to_fp32_nodes_and_the_torch_module(tiny_fallback_bundle, tiny_specs):
    q = Bundle.load(tiny_fallback_bundle).quantization
    doc = q.as_recorded
    (fallback,) = doc["fallback"]
    graph = fp32_graph(tiny_fallback_bundle)
    names = {n.name: n for n in graph.node}
    assert fallback["fp32_nodes"] and all(n in names for n in fallback["fp32_nodes"]), fallback
    assert fallback["node"] not in names  # the prepared graph's fused name, which the FP32 graph lacks
    assert any(names[n].op_type in WEIGHTED for n in fallback["fp32_nodes"])
    assert fallback["module"] in dict(tiny_specs["masked"].module.named_modules())  # a real torch module
    assert fallback["module"] == labels_of(graph)[fallback["fp32_nodes"][0]]
    budget = [f for f in q.float_nodes if f.source == "budget"]
    assert [(f.node, f.fp32_nodes, f.module) for f in budget] == [
        (fallback["node"], tuple(fallback["fp32_nodes"]), fallback["module"])
    ]


def test_overrides_by_each_kind_of_name_and_a_bad_one(tiny_fallback_bundle, tmp_path):
    """One file names a layer by its FP32 bias Add, one by its torch module, one by the prepared
    graph's fused name: all three are floated. A misspelt name is one line, exit 2, nothing written."""
    import shutil

    path = Path(shutil.copytree(tiny_fallback_bundle, tmp_path / "b"))
    fp32 = fp32_graph(path)
    add_of_fc = next(
        n.name for n in fp32.node if n.op_type == "Add" and labels_of(fp32).get(n.name) == "blocks.0.mlp.fc"
    )
    fallback = Bundle.load(path).quantization.as_recorded["fallback"][0]
    items = [
        {"node": add_of_fc, "action": "float"},
        {"node": "blocks.0.attn.proj", "action": "float"},
        {"node": fallback["node"], "action": "weight-only"},
    ]
    overrides = tmp_path / "overrides.json"
    overrides.write_text(json.dumps({"schema": "edgekit.quantize-overrides/1", "overrides": items}))
    r = invoke("quantize", path, *FAST, "--no-fallback", *LOOSE, "--overrides", overrides, "--json")
    assert r.exit_code == 0, r.output
    rows = {f["module"]: f for f in json.loads(r.stdout)["selection"]["float"] if f["source"] == "override"}
    assert set(rows) == {"blocks.0.mlp.fc", "blocks.0.attn.proj", fallback["module"]}, rows
    assert add_of_fc in rows["blocks.0.mlp.fc"]["fp32_nodes"] and rows["blocks.0.mlp.fc"]["precision"] == "float"
    assert rows[fallback["module"]]["precision"] == "weight-only"

    before = {p.name: p.read_bytes() for p in path.iterdir()}
    overrides.write_text(
        json.dumps(
            {
                "schema": "edgekit.quantize-overrides/1",
                "overrides": [{"node": "blocks.0.attn.projj", "action": "float"}],
            }
        )
    )
    r = runner.invoke(app, ["quantize", str(path), *FAST, "--overrides", str(overrides)])
    assert r.exit_code == EXIT_USAGE, r.output
    last = r.stderr.strip().splitlines()[-1]  # the lines before it are progress
    assert last.startswith("error:") and "'blocks.0.attn.projj'" in last, r.stderr
    assert "did you mean 'blocks.0.attn.proj'?" in last
    assert "Traceback" not in r.output
    assert {p.name: p.read_bytes() for p in path.iterdir()} == before  # nothing written
    assert (path / MANIFEST).is_file()
