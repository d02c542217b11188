"""`edgekit debug` of a model whose weights live in a side file (issue #42, item 2), under
protobuf's limit scaled down to the masked demo (tests/external_data.py): its tapped copies and
cut regions read the graph without its weights and find those beside them. (An int8 candidate
needs `quantize`, whose external data is another change: fp32 variants here.)"""

import json

import pytest
from typer.testing import CliRunner

from edgekit.cli import app
from tests.external_data import scaled_limit


def test_debug_takes_an_external_data_bundle_apart(external_bundles):
    pytest.importorskip("openvino")
    with scaled_limit():
        r = CliRunner().invoke(
            app,
            [
                "debug",
                str(external_bundles["external"]),
                "--candidate",
                "openvino:fp32",
                "--reference",
                "ort:fp32",
                "--json",
            ],
        )
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)
    assert doc["passed"] is True and "blocks." in doc["summary"]
