"""`edgekit check` of a model whose weights live in a side file (issue #42, item 2), under
protobuf's limit scaled down to the masked demo (tests/external_data.py): its ONNX Runtime and
OpenVINO variants against the torch module pass like the embedded twin's (int8 needs `quantize`,
whose external data is another change)."""

import json
from contextlib import nullcontext

import pytest
from typer.testing import CliRunner

from edgekit.cli import app
from tests.external_data import scaled_limit


@pytest.mark.parametrize("reference, candidate", [("torch:fp32", "ort:fp32"), ("ort:fp32", "openvino:fp32")])
def test_fp32_variants_agree(external_bundles, reference, candidate):
    pytest.importorskip("openvino" if "openvino" in candidate else "torch")
    docs = {}
    for which in ("external", "embedded"):
        with scaled_limit() if which == "external" else nullcontext():
            r = CliRunner().invoke(
                app,
                [
                    "check",
                    str(external_bundles[which]),
                    "--reference",
                    reference,
                    "--candidate",
                    candidate,
                    "--n",
                    "2",
                    "--json",
                ],
            )
        assert r.exit_code == 0, r.output
        docs[which] = json.loads(r.stdout)
    assert docs["external"]["passed"] is True
    assert docs["external"]["metrics"] == docs["embedded"]["metrics"]  # the same weights, the same numbers
