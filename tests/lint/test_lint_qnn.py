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


def test_a_refusal_for_a_tensor_over_five_dimensions_says_the_rank_and_its_fix(tmp_path):
    """A DiT's unpatchify ([B, h, w, p, p, C] -> [B, C, h*p, w*p]) goes through rank 6, which the
    HTP refuses without a reason in its log (at batch 2 here: some 6-D tensors with a leading 1
    it folds and compiles): the finding names the rank and the rewrite."""
    import numpy as np
    import onnx
    from onnx import TensorProto, helper

    b, h, w, p, c = 2, 8, 8, 2, 16
    shape6 = [b, h, w, p, p, c]
    nodes = [
        helper.make_node("Relu", ["x"], ["r"], name="pre"),
        helper.make_node("Reshape", ["r", "s6"], ["six"], name="unpatchify_reshape"),
        helper.make_node("Transpose", ["six"], ["perm"], name="unpatchify_transpose", perm=[0, 5, 1, 3, 2, 4]),
        helper.make_node("Reshape", ["perm", "s4"], ["y"], name="to_image"),
    ]
    graph = helper.make_graph(
        nodes,
        "unpatchify",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [b, h * w, p * p * c])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [b, c, h * p, w * p])],
        [
            helper.make_tensor("s6", TensorProto.INT64, [6], shape6),
            helper.make_tensor("s4", TensorProto.INT64, [4], [b, c, h * p, w * p]),
        ],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    model.ir_version = 9
    model = onnx.shape_inference.infer_shapes(model)
    path = tmp_path / "unpatchify.onnx"
    onnx.save(model, path)
    findings = lint_onnx(path, TARGET, artifact="fp32")
    refused = {f.nodes[0]: f for f in findings if f.rule == "npu-refused"}
    assert {"unpatchify_reshape", "unpatchify_transpose"} <= set(refused), [f.message for f in findings]
    for name in ("unpatchify_reshape", "unpatchify_transpose"):
        assert "rank-6 tensor" in refused[name].message and "5 dimensions" in refused[name].message
        assert "rank <= 5" in refused[name].hint
    assert "pre" not in refused and np.all([f.severity == "error" for f in refused.values()])


def test_an_int8_model_of_another_profile_gets_one_refusal_line_not_one_per_node(qnn_graphs, tmp_path):
    # A cpu-profile model linted for a Snapdragon: its refusals follow from the profile (a 90 M
    # Llama gave 75 lines, one per DequantizeLinear), so they are counted in one finding beside
    # the profile's own error and its fix.
    import shutil

    from edgekit.bundle import Bundle
    from edgekit.lint import lint_bundle
    from edgekit.spec import TensorSpec

    io = TensorSpec((1, 4, 8), "float32", -1.0, 1.0)
    bundle = Bundle.new(
        tmp_path / "b",
        model={
            "name": "mlp",
            "kind": "flow",
            "source": "test",
            "ground_truth": None,
            "meta": {"channels": 8, "frames": 4},
        },
        inputs={"x": io},
        outputs={"y": io},
        decode_defaults={},
    )
    for name, graph in (("fp32", "fp32"), ("int8", "cpu_int8")):
        staged = bundle.staging_path(f"{name}.onnx")
        shutil.copyfile(qnn_graphs[graph], staged)
        bundle.add_artifact(
            name, staged, made_by="test", config={"profile": "cpu"} if name == "int8" else {}, suffix=".onnx"
        )
    bundle.save()
    per_node = [f for f in lint_onnx(qnn_graphs["cpu_int8"], TARGET, artifact="int8") if f.rule == "npu-refused"]
    assert len(per_node) == 2
    findings = [f for f in lint_bundle(bundle.root, TARGET) if f.artifact == "int8"]
    (refused,) = [f for f in findings if f.rule == "npu-refused"]
    assert refused.message.startswith(f"HTP v73 refused {len(per_node)} nodes of this cpu-profile int8 model (")
    assert "(DequantizeLinear x2)" in refused.message and len(refused.nodes) == len(per_node)
    assert "--profile qnn" in refused.hint
    assert any(f.rule == "qdq" and "quantized with profile 'cpu'" in f.message for f in findings)
