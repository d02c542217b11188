"""Deployability lint: clean on the demo bundles, and each rule fires on a graph made to break it."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from edgekit.lint import LINT_SCHEMA, has_errors, lint_bundle, lint_onnx, lint_report
from edgekit.lint.findings import Finding
from edgekit.targets import list_targets, load_target

TRT = "nvidia-gpu"


def rules(findings, severity="error"):
    return sorted({f.rule for f in findings if f.severity == severity})


def one(findings, rule):
    found = [f for f in findings if f.rule == rule]
    assert len(found) == 1, [f.to_json() for f in findings]
    return found[0]


@pytest.mark.parametrize("kind", ["masked", "flow", "ar"])
def test_demo_bundles_deploy_to_every_target(demo_bundles, kind):
    for target in list_targets():
        findings = lint_bundle(demo_bundles[kind], target)
        errors = [f for f in findings if f.severity == "error"]
        if target.name in ("jetson-xavier", "jetson-orin-nano-jp60", "jetson-agx-orin-jp60"):
            # TensorRT 8.5 (JetPack 5) and 8.6 (JetPack 6.0) parse opsets <= 17; the demo exports 18.
            assert [(f.rule, f.artifact) for f in errors] == [("opset", "fp32")]
            assert "--opset 17" in errors[0].hint and "TensorRT 8." in errors[0].message
        else:
            assert errors == [], (target.name, [f.to_json() for f in errors])
        if target.name in ("cpu", "nvidia-gpu", "rpi5", "arm64-cpu", "jetson-orin-nano", "jetson-agx-orin"):
            assert [f.rule for f in findings] == ["precision"]  # only: no int8 model yet
            assert "edgekit quantize" in findings[0].hint


def test_nnapi_coverage_comes_from_onnxruntimes_checker(demo_bundles):
    findings = lint_bundle(demo_bundles["masked"], "android-arm64")
    warning = next(f for f in findings if f.rule == "ep-coverage" and f.severity == "warning")
    assert "NNAPI cannot run LayerNormalization" in warning.message  # not in ORT's nnapi_supported_ops.md
    info = next(f for f in findings if f.rule == "ep-coverage" and f.severity == "info")
    assert "QNNExecutionProvider, XnnpackExecutionProvider coverage cannot be checked offline" in info.message


def test_crafted_bad_graph_is_refused_for_tensorrt(bad_graph):
    findings = lint_onnx(bad_graph, TRT)
    assert has_errors(findings)
    assert rules(findings) == ["qdq", "random-op", "static-shapes", "topk"]
    assert "draw_noise" in one(findings, "random-op").nodes
    static = one(findings, "static-shapes")
    assert "input 'x' ['batch', 16]" in static.message and "make_dynamic_shape_fixed --dim_param batch" in static.hint
    assert one(findings, "topk").nodes == ("topk_dynamic",)
    qdq = [f for f in findings if f.rule == "qdq"]  # uint8, and asymmetric (zero point 128)
    assert [f.message.split(" (")[0] for f in qdq] == [
        "2 Q/DQ node(s) have uint8 zero points",
        "2 Q/DQ node(s) have non-zero zero points",
    ]
    assert all(set(f.nodes) == {"quant", "dequant"} and "--profile trt" in f.hint for f in qdq)
    assert {f.severity for f in findings} == {"error"}


def test_crafted_bad_graph_on_cpu_skips_tensorrt_rules(bad_graph):
    findings = lint_onnx(bad_graph, "cpu")
    assert rules(findings) == ["random-op", "static-shapes", "topk"]  # uint8 QDQ is fine on ORT CPU


def test_clean_graph_is_clean_everywhere_but_nnapi_and_absent_device_notes(clean_graph):
    for target in list_targets():
        findings = lint_onnx(clean_graph, target)
        assert not has_errors(findings), target.name
        if target.lint.supported_ops == "openvino" and target.openvino.device != "CPU":
            # an Intel GPU/NPU target off its device: a note that only the device can tell op support
            assert all(f.severity == "info" for f in findings), (target.name, [f.to_json() for f in findings])
        elif target.lint.supported_ops == "qnn":
            # a Snapdragon target: lint compiles for the HTP backend here and notes that it did
            assert [f.rule for f in findings] == ["npu-compile"] and findings[0].severity == "info", target.name
        elif target.lint.supported_ops != "nnapi":
            assert findings == [], (target.name, [f.to_json() for f in findings])


def _topk_graph(write_onnx, k: int, sorted_: int = 1):
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 5000])
    outs = [
        helper.make_tensor_value_info("v", TensorProto.FLOAT, [2, k]),
        helper.make_tensor_value_info("i", TensorProto.INT64, [2, k]),
    ]
    node = helper.make_node("TopK", ["x", "k"], ["v", "i"], name="topk", axis=-1, sorted=sorted_)
    return write_onnx(
        f"topk{k}_{sorted_}.onnx", [node], [x], outs, [numpy_helper.from_array(np.array([k], dtype=np.int64), "k")]
    )


def test_topk_k_limit_and_sorted_for_tensorrt(write_onnx):
    assert lint_onnx(_topk_graph(write_onnx, 3839), TRT) == []
    big = one(lint_onnx(_topk_graph(write_onnx, 3840), TRT), "topk")  # TensorRT requires K < 3840
    assert "TopK K = 3840 exceeds 3839" in big.message and big.severity == "error"
    assert lint_onnx(_topk_graph(write_onnx, 3841), "cpu") == []  # ORT has no such limit
    unsorted = one(lint_onnx(_topk_graph(write_onnx, 10, sorted_=0), TRT), "topk")
    assert "sorted=0" in unsorted.message


def _qdq_graph(write_onnx, zp: np.ndarray, with_zp: bool = True):
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [4])
    args = ["x", "s", "zp"] if with_zp else ["x", "s"]
    nodes = [
        helper.make_node("QuantizeLinear", args, ["q"], name="q"),
        helper.make_node("DequantizeLinear", ["q", "s", "zp"] if with_zp else ["q", "s"], ["y"], name="dq"),
    ]
    inits = [numpy_helper.from_array(np.array(0.1, np.float32), "s")] + (
        [numpy_helper.from_array(zp, "zp")] if with_zp else []
    )
    return write_onnx(f"qdq_{zp.dtype}_{int(zp)}_{with_zp}.onnx", nodes, [x], [y], inits)


def test_qdq_rules_for_tensorrt(write_onnx):
    assert lint_onnx(_qdq_graph(write_onnx, np.array(0, np.int8)), TRT) == []
    nonzero = one(lint_onnx(_qdq_graph(write_onnx, np.array(3, np.int8)), TRT), "qdq")
    assert "non-zero zero points" in nonzero.message and nonzero.severity == "error"
    unsigned = lint_onnx(_qdq_graph(write_onnx, np.array(0, np.uint8)), TRT)
    assert rules(unsigned) == ["qdq"] and "uint8 zero points" in unsigned[0].message
    missing = one(lint_onnx(_qdq_graph(write_onnx, np.array(0, np.uint8), with_zp=False), TRT), "qdq")
    assert missing.severity == "warning" and "means uint8" in missing.message


def test_ops_tensorrt_cannot_parse(write_onnx):
    a = helper.make_tensor_value_info("a", TensorProto.FLOAT, [2, 2])
    det = write_onnx(
        "det.onnx",
        [helper.make_node("Det", ["a"], ["d"], name="det")],
        [a],
        [helper.make_tensor_value_info("d", TensorProto.FLOAT, [])],
    )
    found = one(lint_onnx(det, TRT), "unsupported-op")
    assert found.severity == "error" and "TensorRT does not support Det" in found.message
    assert lint_onnx(det, "cpu") == []
    contrib = write_onnx(
        "contrib.onnx",
        [helper.make_node("FusedMatMul", ["a", "a"], ["m"], name="fm", domain="com.microsoft")],
        [a],
        [helper.make_tensor_value_info("m", TensorProto.FLOAT, [2, 2])],
        check=False,
    )
    assert "no com.microsoft:FusedMatMul" in one(lint_onnx(contrib, TRT), "unsupported-op").message


def test_data_dependent_shapes(write_onnx):
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [8])
    path = write_onnx(
        "nonzero.onnx",
        [helper.make_node("NonZero", ["x"], ["nz"], name="nz")],
        [x],
        [helper.make_tensor_value_info("nz", TensorProto.INT64, [1, None])],
    )
    findings = lint_onnx(path, "cpu")
    assert rules(findings) == ["data-dependent-shape", "static-shapes"]
    assert one(findings, "data-dependent-shape").nodes == ("nz",)


def test_opset_and_memory_budget_from_a_user_target(tmp_path, clean_graph, write_onnx):
    toml = tmp_path / "tiny.toml"
    toml.write_text('runtimes = ["ort"]\nprecisions = ["fp32"]\n[lint]\nopset_max = 16\nmemory_budget_mb = 1\n')
    opset = one(lint_onnx(clean_graph, toml), "opset")
    assert "opset 17 is outside the range target tiny reads (7..16)" in opset.message and "--opset 16" in opset.hint
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 1000])
    for cols, severity in ((160, "warning"), (320, "error")):  # 0.64 MB and 1.28 MB of weights vs 1 MB
        w = numpy_helper.from_array(np.zeros((1000, cols), np.float32), "w")
        y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, cols])
        path = write_onnx(f"big{cols}.onnx", [helper.make_node("MatMul", ["x", "w"], ["y"])], [x], [y], [w], opset=16)
        mem = one(lint_onnx(path, toml), "memory")
        assert mem.severity == severity, mem.message


def test_lint_report_document(demo_bundles):
    doc = lint_report(demo_bundles["flow"], "jetson-xavier")
    assert doc["schema"] == LINT_SCHEMA and doc["target"] == "jetson-xavier"
    # The opset error, and (Xavier runs int8 now: weakly typed Q/DQ with the INT8 flag) no int8 model yet.
    assert doc["passed"] is False and doc["counts"] == {"error": 1, "warning": 0, "info": 1}
    assert doc["findings"][0]["rule"] == "opset" and "--opset 17" in doc["findings"][0]["hint"]
    assert doc["findings"][1]["rule"] == "precision"
    assert lint_report(demo_bundles["flow"], load_target("cpu"))["passed"] is True


def test_collapsed_refusals_count_ops_from_the_findings_not_their_wording():
    """The count comes from each finding's op and backend: a message worded otherwise (a
    rank refusal, another backend's phrasing) does not change it."""
    from edgekit.lint.stage import collapse_refusals

    refusals = [
        Finding("error", "npu-refused", "int8", f"worded freely {i}", hint="fix", nodes=(f"n{i}",), op=op, by="HTP v75")
        for i, op in enumerate(["DequantizeLinear", "MatMul", "DequantizeLinear", "Reshape", "DequantizeLinear"])
    ]
    other = Finding("warning", "qdq", "int8", "kept")
    (kept, one) = collapse_refusals([*refusals, other], "cpu")
    assert kept is other
    assert (
        one.message == "HTP v75 refused 5 nodes of this cpu-profile int8 model (DequantizeLinear x3, MatMul, Reshape)"
    )
    assert one.nodes == ("n0", "n1", "n2", "n3", "n4") and one.by == "HTP v75" and one.hint == "fix"
    assert collapse_refusals(refusals[:1], "cpu") == refusals[:1]  # one refusal stays as it is
