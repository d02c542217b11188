"""``edgekit inspect --float-set``: edgekit's float set as another quantizer's exclusion list
(issue #44, point 4), and proof that onnxruntime, given it, leaves exactly those nodes float."""

from __future__ import annotations

import json
import shutil
import typing
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from edgekit.bundle import MANIFEST, Bundle
from edgekit.cli import app
from edgekit.errors import EXIT_ERROR, EXIT_USAGE
from edgekit.inspect import FLOAT_SET_FORMATS

onnx = pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")
runner = CliRunner()
WEIGHTED = ("MatMul", "Gemm", "Conv")


def float_set(bundle: Path, fmt: str) -> dict:
    r = runner.invoke(app, ["inspect", str(bundle), "--float-set", fmt])
    assert r.exit_code == 0, r.output
    return json.loads(r.stdout)  # one document, without --json too


def test_the_cli_offers_every_format():
    from edgekit.cli.inspect import inspect

    hint = typing.get_type_hints(inspect, include_extras=True)["float_set"]
    literal = typing.get_args(typing.get_args(hint)[0])[0]
    assert typing.get_args(literal) == FLOAT_SET_FORMATS


def test_nncf_and_ort_name_the_fp32_nodes_of_every_float_layer(tiny_fallback_bundle):
    bundle = Bundle.load(tiny_fallback_bundle)
    rows = bundle.quantization.float_nodes
    graph = onnx.load(str(bundle.path_of("fp32")), load_external_data=False).graph
    order = [n.name for n in graph.node]
    expected = [n for n in order if any(n in (r.fp32_nodes or ()) for r in rows)]
    assert {r.source for r in rows} >= {"budget", "rule"} and expected
    assert float_set(tiny_fallback_bundle, "nncf") == {"names": expected}
    assert float_set(tiny_fallback_bundle, "ort") == {"nodes_to_exclude": expected}
    # After quant_pre_process: the names edgekit's own run gave ORT.
    assert float_set(tiny_fallback_bundle, "ort-prepared") == {"nodes_to_exclude": [r.node for r in rows]}


def test_ort_quantize_static_given_the_list_leaves_exactly_those_nodes_float(tiny_fallback_bundle, tmp_path):
    from onnxruntime.quantization import CalibrationDataReader, QuantFormat, quantize_static

    bundle = Bundle.load(tiny_fallback_bundle)
    excluded = float_set(tiny_fallback_bundle, "ort")["nodes_to_exclude"]
    rng = np.random.default_rng(0)
    feeds = [
        {
            n: rng.integers(0, int(s.high or 2), s.shape).astype(s.dtype)
            if s.dtype == "int64"
            else rng.standard_normal(s.shape).astype(s.dtype)
            for n, s in bundle.inputs.items()
        }
        for _ in range(2)
    ]

    class Reader(CalibrationDataReader):
        def __init__(self):
            self.it = iter(feeds)

        def get_next(self):
            return next(self.it, None)

    out = tmp_path / "int8.onnx"
    quantize_static(
        str(bundle.path_of("fp32")),
        str(out),
        Reader(),
        quant_format=QuantFormat.QDQ,
        op_types_to_quantize=list(WEIGHTED),
        nodes_to_exclude=excluded,
    )
    fp32 = onnx.load(str(bundle.path_of("fp32"))).graph
    consts = {i.name for i in fp32.initializer}
    weighted = {n.name for n in fp32.node if n.op_type in WEIGHTED}
    q = onnx.load(str(out)).graph
    dq_out = {o for n in q.node if n.op_type == "DequantizeLinear" for o in n.output}
    quantized = {n.name for n in q.node if n.name in weighted and any(i in dq_out for i in n.input)}
    with_weights = {n.name for n in fp32.node if n.op_type in WEIGHTED and any(i in consts for i in n.input[1:])}
    assert set(excluded) & weighted, "the float set names no weighted node: this test would prove nothing"
    assert quantized == with_weights - set(excluded), (quantized, excluded)
    assert not {n.name for n in q.node if n.name in excluded and any(i in dq_out for i in n.input)}


def test_openvino_names_are_the_ops_openvino_makes_of_those_nodes(tiny_fallback_bundle):
    ov = pytest.importorskip("openvino")
    bundle = Bundle.load(tiny_fallback_bundle)
    names = float_set(tiny_fallback_bundle, "openvino")["names"]
    model = ov.Core().read_model(str(bundle.path_of("fp32")))
    made = {op.get_friendly_name(): op.get_type_name() for op in model.get_ordered_ops()}
    assert names and all(n in made for n in names), [n for n in names if n not in made]
    onnx_names = float_set(tiny_fallback_bundle, "nncf")["names"]
    # Every excluded ONNX MatMul is an OpenVINO MatMul of the same name.
    graph = onnx.load(str(bundle.path_of("fp32")), load_external_data=False).graph
    matmuls = [n.name for n in graph.node if n.op_type == "MatMul" and n.name in onnx_names]
    assert matmuls and all(made.get(n) == "MatMul" for n in matmuls) and set(matmuls) <= set(names)


def test_inspect_shows_the_float_layers_by_fp32_node_and_module(tiny_fallback_bundle):
    r = runner.invoke(app, ["inspect", str(tiny_fallback_bundle)], env={"COLUMNS": "200"})
    assert r.exit_code == 0, r.output
    fallback = Bundle.load(tiny_fallback_bundle).quantization.as_recorded["fallback"][0]
    assert "kept float by quantize" in r.stdout
    line = next(x for x in r.stdout.splitlines() if fallback["fp32_nodes"][0] in x)
    assert fallback["module"] in line and "budget" in line


def test_an_older_summary_or_none_is_one_line(tiny_fallback_bundle, tmp_path):
    old = Path(shutil.copytree(tiny_fallback_bundle, tmp_path / "old"))
    manifest = json.loads((old / MANIFEST).read_text())
    for row in manifest["quantization"]["selection"]["float"]:
        del row["fp32_nodes"], row["module"]
    (old / MANIFEST).write_text(json.dumps(manifest))
    assert runner.invoke(app, ["inspect", str(old)]).exit_code == 0  # an older bundle still loads and shows
    r = runner.invoke(app, ["inspect", str(old), "--float-set", "nncf"])
    assert r.exit_code == EXIT_ERROR and r.stdout == ""
    assert r.stderr.count("\n") == 1 and "did not record the FP32 graph's names" in r.stderr
    assert float_set(old, "ort-prepared")["nodes_to_exclude"]  # the prepared names were always recorded
    manifest["quantization"] = None  # a bundle never quantized
    (old / MANIFEST).write_text(json.dumps(manifest))
    r = runner.invoke(app, ["inspect", str(old), "--float-set", "ort"])
    assert r.exit_code == EXIT_USAGE and "no quantization summary" in r.stderr and "edgekit quantize" in r.stderr
