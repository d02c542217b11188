"""`edgekit lint --target <snapdragon>` lints by compiling for the HTP with CPU fallback off: one
finding per refused node, with the fix."""

from __future__ import annotations

from edgekit.lint import has_errors, lint_onnx

TARGET = "snapdragon-8-gen-2"


def test_every_refused_node_is_a_finding_with_the_fix(qnn_graphs):
    findings = lint_onnx(qnn_graphs["cpu_int8"], TARGET, artifact="int8")
    refused = [f for f in findings if f.rule == "npu-refused"]
    assert refused and has_errors(findings)
    assert all(len(f.nodes) == 1 and f.nodes[0] in f.message and "--profile qnn" in f.hint for f in refused)
    assert all("HTP v73" in f.message for f in refused)


def test_a_full_integer_model_compiles_with_every_node_on_the_npu(qnn_graphs):
    findings = lint_onnx(qnn_graphs["qdq"], TARGET, artifact="int8")
    assert not has_errors(findings)
    assert [f.rule for f in findings if f.rule.startswith("npu")] == ["npu-compile"]


def test_the_fp32_model_is_compiled_as_fp16(qnn_graphs):
    findings = lint_onnx(qnn_graphs["fp32"], TARGET, artifact="fp32")
    assert any(f.rule == "npu-compile" and "fp16" in f.message for f in findings)
