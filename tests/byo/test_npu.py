"""A bring-your-own model on the Hexagon NPU through the CLI (issue #16 item 7): the README's
flow example quantized with the qnn profile for a Snapdragon target (budget, check's gate
included, measured on the HTP backend), compiled into a context binary, checked on HTP
arithmetic with default arguments, and loaded by `run --target` without compiling."""

from __future__ import annotations

import pytest

from tests.byo.conftest import EXAMPLE, invoke, invoke_json

pytestmark = pytest.mark.slow  # the HTP backend is emulated: ~10 s
TARGET = "snapdragon-8-gen-3"


def test_the_flow_example_goes_through_the_npu_path(tmp_path):
    pytest.importorskip("onnxruntime_qnn")
    bundle = tmp_path / "mine-npu"
    r = invoke("export", f"{EXAMPLE}:make_model", "-o", bundle, "--batch", "1")
    assert r.exit_code == 0, r.output
    q = invoke_json("quantize", bundle, "--target", TARGET)
    assert q["profile"] == "qnn" and q["passed"] and q["measured"]["check_margin"] >= 0
    assert q["budget"]["measured_on"].startswith("qnn HTP backend") and (
        q["qnn"]["htp_arch"],
        q["qnn"]["soc_model"],
    ) == (75, 57)
    b = invoke_json("build", bundle, "--target", TARGET, "--precision", "int8")
    assert b["engine"]["format"] == "epcontext"
    c = invoke_json("check", bundle, "--candidate", "qnn:int8", "--reference", "ort:fp32", "--target", TARGET)
    assert c["passed"]
    for metric, value in q["measured"]["check_metrics"].items():  # the gate quantize decided on
        assert c["metrics"][metric] == pytest.approx(value, rel=1e-9, abs=1e-12), metric
    run = invoke_json("run", bundle, "--target", TARGET, "--precision", "int8", "--cond", "speaker=0.5")
    assert run["session"]["precompiled"] is True
