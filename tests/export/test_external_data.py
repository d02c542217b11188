"""Export of a model whose weights live in a side file (issue #42, item 2): the masked demo
exported under protobuf's limit scaled down to it (tests/external_data.py), so the in-memory
serializations that failed a 2.25 GiB model here fail it too."""

import json
import shutil

import numpy as np
import pytest
from typer.testing import CliRunner

from edgekit.bundle import Bundle
from edgekit.cli import app
from tests.external_data import LIMIT, assert_weights_outside, inline_tensor_bytes, scaled_limit

onnx = pytest.importorskip("onnx")
runner = CliRunner()


def test_the_scaled_limit_fails_what_fails_at_2_gb(external_bundles, protobuf_limit):
    """The guard is real: the whole model in memory cannot be shape-inferred, checked or saved
    inline (the 2.25 GiB model's EncodeError in export's check_graph), its graph alone can."""
    from google.protobuf.message import EncodeError

    path = Bundle.load(external_bundles["external"]).path_of("fp32")
    whole = onnx.load(str(path))  # weights loaded: 3.3 MB > the limit
    assert inline_tensor_bytes(whole) > LIMIT
    with pytest.raises(EncodeError, match="Failed to serialize proto"):
        onnx.shape_inference.infer_shapes(whole)
    with pytest.raises(EncodeError):
        onnx.save(whole, str(path.with_name("copy.onnx")))
    graph = onnx.load(str(path), load_external_data=False)
    assert onnx.shape_inference.infer_shapes(graph).graph.output[0].name == "logits"


def test_weights_are_written_beside_the_graph_listed_and_hashed(external_bundles):
    bundle = Bundle.load(external_bundles["external"])  # verifies every hash, side files included
    art = bundle.manifest["artifacts"]["fp32"]
    (side,) = art["side_files"]
    path = bundle.root / side["path"]
    assert side["path"].startswith("fp32-") and side["path"].endswith(".onnx.data")
    assert path.stat().st_size == side["bytes"] > 3_000_000  # the demo's 3.3 MB of weights
    assert assert_weights_outside(bundle.path_of("fp32")) == {side["path"]}
    assert art["config"]["external_data"] is True and art["config"]["external_data_mb"] == 0
    assert bundle.manifest["verification"]["fp32"]["passed"]  # verified against torch like any export
    onnx.checker.check_model(str(bundle.path_of("fp32")), full_check=True)


def test_the_graph_and_weights_are_the_embedded_twins(external_bundles):
    ext, emb = (Bundle.load(external_bundles[k]) for k in ("external", "embedded"))
    assert "side_files" not in emb.manifest["artifacts"]["fp32"]  # 3.3 MB: under the 64 MiB default
    a = onnx.load(str(ext.path_of("fp32")))
    b = onnx.load(str(emb.path_of("fp32")))
    assert [n.op_type for n in a.graph.node] == [n.op_type for n in b.graph.node]
    weights = {i.name: onnx.numpy_helper.to_array(i) for i in b.graph.initializer}
    assert len(a.graph.initializer) == len(weights)
    for init in a.graph.initializer:
        np.testing.assert_array_equal(onnx.numpy_helper.to_array(init), weights[init.name])


def test_inspect_lists_the_side_file(external_bundles):
    r = runner.invoke(app, ["inspect", str(external_bundles["external"]), "--json"])
    assert r.exit_code == 0, r.output
    (side,) = json.loads(r.stdout)["artifacts"]["fp32"]["side_files"]
    assert set(side) == {"path", "sha256", "bytes"}


def test_fused_graph_carries_its_own_side_file(external_bundles, tmp_path, protobuf_limit):
    from edgekit.export.fused import fused_bundle

    root = shutil.copytree(external_bundles["external"], tmp_path / "ext")
    fused_bundle(root, "step")
    bundle = Bundle.load(root)  # the fused graph's side file is hashed too
    art = bundle.manifest["artifacts"]["fused-step"]
    (side,) = art["side_files"]
    assert side["path"].startswith("fused-step-") and not side["path"].startswith(".")
    assert assert_weights_outside(bundle.path_of("fused-step")) == {side["path"]}
    assert not [p for p in root.iterdir() if p.name.startswith(".staging")]


def test_a_bad_threshold_is_one_line_before_any_file(tmp_path, monkeypatch):
    monkeypatch.setenv("EDGEKIT_EXTERNAL_DATA_MB", "lots")
    r = runner.invoke(app, ["export", "masked-demo", "-o", str(tmp_path / "b")])
    assert r.exit_code == 2, r.output
    assert "EDGEKIT_EXTERNAL_DATA_MB='lots' is not a number of MiB" in r.stderr and "Traceback" not in r.output
    assert r.stderr.count("error:") == 1
    assert not (tmp_path / "b").exists()


def test_the_threshold_decides_per_model(tiny_specs, tmp_path, monkeypatch):
    """Over the threshold: a side file; under it: one file (the tiny model's weights are 12.6 kB)."""
    from edgekit.export.to_bundle import export_bundle

    monkeypatch.setenv("EDGEKIT_EXTERNAL_DATA_MB", str(16 / 1024))  # 16 kB
    under = export_bundle(tiny_specs["masked"], tmp_path / "under", source="tiny")
    assert "side_files" not in under.manifest["artifacts"]["fp32"]
    monkeypatch.setenv("EDGEKIT_EXTERNAL_DATA_MB", str(8 / 1024))  # 8 kB
    over = export_bundle(tiny_specs["masked"], tmp_path / "over", source="tiny")
    assert len(over.manifest["artifacts"]["fp32"]["side_files"]) == 1
    with scaled_limit():  # the knob the tests use: 0
        assert (
            len(
                export_bundle(tiny_specs["masked"], tmp_path / "zero", source="tiny").manifest["artifacts"]["fp32"][
                    "side_files"
                ]
            )
            == 1
        )


def test_the_export_line_counts_the_weights_beside_the_graph(external_bundles, capsys):
    # A 90 M-parameter export said "wrote fp32-….onnx (0.6 MB)": the graph alone, its 352 MB of
    # weights unmentioned.
    from edgekit.export.render import print_verification
    from edgekit.output import Output

    for key in ("external", "embedded"):
        bundle = Bundle.load(external_bundles[key])
        print_verification(Output(), bundle)
        line = " ".join(capsys.readouterr().out.split())  # rich wraps long lines
        art = bundle.manifest["artifacts"]["fp32"]
        if key == "external":
            (side,) = art["side_files"]
            assert f"graph + {side['bytes'] / 1e6:.1f} MB of weights in {side['path']}" in line, line
        else:
            assert f"({art['bytes'] / 1e6:.1f} MB), manifest" in line and "weights in" not in line, line
