"""`edgekit profile` of a model whose weights live in a side file (issue #42, item 2), under
protobuf's limit scaled down to the masked demo (tests/external_data.py): it runs on ONNX Runtime
and OpenVINO, and the model bytes it reports are the graph's and its weights' (the side file was
missed when it was looked for as ``<model>.onnx.data``)."""

import json

import pytest
from typer.testing import CliRunner

from edgekit.bundle import Bundle
from edgekit.cli import app
from tests.external_data import scaled_limit


@pytest.mark.parametrize("runtime", ["ort", "openvino"])
def test_profile_reports_the_weights_file_it_loaded(external_bundles, runtime):
    pytest.importorskip("openvino" if runtime == "openvino" else "onnxruntime")
    art = Bundle.load(external_bundles["external"]).manifest["artifacts"]["fp32"]
    with scaled_limit():
        r = CliRunner().invoke(
            app,
            [
                "profile",
                str(external_bundles["external"]),
                "--runtime",
                runtime,
                "--iters",
                "1",
                "--warmup",
                "0",
                "--steps",
                "1",
                "--cond",
                "class_id=1",
                "--json",
            ],
        )
    assert r.exit_code == 0, r.output
    (variant,) = json.loads(r.stdout)["variants"]
    memory = variant["memory"]
    assert {p.rsplit("/", 1)[-1] for p in memory["model_files_bytes"]} == {art["path"], art["side_files"][0]["path"]}
    assert memory["model_bytes"] == art["bytes"] + art["side_files"][0]["bytes"]
