"""Lint for the Intel targets: OpenVINO's frontend converts the graph (or names what it cannot),
and the device's plugin says which ops it runs where the device is here."""

from __future__ import annotations

import sys

import pytest
from onnx import TensorProto, helper

from edgekit.lint import lint_onnx

pytest.importorskip("openvino")


def _relu(write_onnx, op="Relu", domain=""):
    io = lambda n: helper.make_tensor_value_info(n, TensorProto.FLOAT, [2, 4])  # noqa: E731
    return write_onnx(
        f"{op}.onnx",
        [helper.make_node(op, ["x"], ["y"], domain=domain or None)],
        [io("x")],
        [io("y")],
        check=not domain,
    )


def test_cpu_plugin_runs_every_op_so_there_is_nothing_to_say(write_onnx):
    assert [f for f in lint_onnx(_relu(write_onnx), "intel-cpu") if f.rule == "unsupported-op"] == []


def test_an_op_openvino_cannot_convert_is_an_error(write_onnx):
    findings = [
        f for f in lint_onnx(_relu(write_onnx, "Frobnicate", "com.example"), "intel-cpu") if f.rule == "unsupported-op"
    ]
    assert findings[0].severity == "error" and "cannot convert the graph" in findings[0].message


def test_without_the_device_it_says_what_only_the_device_can_tell(write_onnx):
    from edgekit.runtimes.openvino import available_devices

    if "NPU" in available_devices():
        pytest.skip("this host has an Intel NPU")
    (finding,) = [f for f in lint_onnx(_relu(write_onnx), "intel-npu") if f.rule == "unsupported-op"]
    assert finding.severity == "info" and "converts every op (1 OpenVINO ops)" in finding.message
    assert "known only where the NPU is" in finding.message


def test_without_openvino_lint_says_it_did_not_check(write_onnx, monkeypatch):
    monkeypatch.setitem(sys.modules, "openvino", None)
    (finding,) = [f for f in lint_onnx(_relu(write_onnx), "intel-cpu") if f.rule == "unsupported-op"]
    assert finding.severity == "info" and "not checked" in finding.message and "edgekit[openvino]" in finding.hint
