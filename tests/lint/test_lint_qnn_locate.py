"""A graph the HTP refuses as a whole, naming no node (it fails to finalize), is bisected over its
prefixes to the node whose joining breaks it (``edgekit.lint.qnn_locate``): compiled for real on
onnxruntime-qnn's HTP emulation, and with a stand-in compiler for the search itself."""

from __future__ import annotations

import math

import numpy as np
import pytest

from edgekit.lint import has_errors, lint_onnx
from edgekit.lint.qnn import whole_graph_refusal
from edgekit.lint.qnn_locate import locate, prefix_model
from edgekit.runtimes import qnn
from edgekit.targets import load_target

onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

D = 64


def rmsnorm_graph(path, square: str):
    """x [2, 1, D] -> transformers' LlamaRMSNorm (x * rsqrt(mean(x²) + eps) * w) -> a Linear.
    ``square``: "pow" (Pow(x, 2), as torch exports ``x.pow(2)``) or "mul" (x * x)."""
    rng = np.random.default_rng(0)
    sq = (
        helper.make_node("Pow", ["x", "two"], ["sq"], name="pow")
        if square == "pow"
        else helper.make_node("Mul", ["x", "x"], ["sq"], name="square")
    )
    nodes = [
        helper.make_node("Relu", ["x"], ["h"], name="pre"),
        sq,
        helper.make_node("ReduceMean", ["sq", "axes"], ["ms"], name="mean", keepdims=1),
        helper.make_node("Add", ["ms", "eps"], ["var"], name="add_eps"),
        helper.make_node("Sqrt", ["var"], ["rms"], name="sqrt"),
        helper.make_node("Reciprocal", ["rms"], ["inv"], name="rsqrt"),
        helper.make_node("Mul", ["x", "inv"], ["normed"], name="normalize"),
        helper.make_node("Mul", ["weight", "normed"], ["scaled"], name="input_layernorm_weight"),
        helper.make_node("MatMul", ["scaled", "proj"], ["y"], name="q_proj"),
    ]
    inits = [
        numpy_helper.from_array(np.array(2.0, np.float32), "two"),
        numpy_helper.from_array(np.array([-1], np.int64), "axes"),
        numpy_helper.from_array(np.array(1e-6, np.float32), "eps"),
        numpy_helper.from_array(rng.random(D).astype(np.float32), "weight"),
        numpy_helper.from_array(rng.standard_normal((D, D)).astype(np.float32), "proj"),
    ]
    graph = helper.make_graph(
        nodes,
        "llama_rmsnorm",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 1, D])],
        [
            helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 1, D]),
            helper.make_tensor_value_info("h", TensorProto.FLOAT, [2, 1, D]),
        ],
        inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    model.ir_version = 9
    onnx.save(model, str(path))
    return path


@pytest.mark.parametrize("target", ["snapdragon-8-gen-2", "snapdragon-8-gen-3"])
def test_a_graph_that_fails_to_finalize_names_the_node_that_breaks_it_and_the_rewrite(tmp_path, target):
    # transformers' Llama RMSNorm: every node passes the per-node check, the graph fails to
    # finalize (QNN_COMMON_ERROR_MEM_ALLOC) once the weight's Mul completes the pattern.
    pow_graph = rmsnorm_graph(tmp_path / "pow.onnx", "pow")
    findings = lint_onnx(pow_graph, target, artifact="fp32")
    (f,) = [f for f in findings if f.rule == "npu-compile"]
    assert f.severity == "error" and has_errors(findings)
    assert "could not compile fp32" in f.message and "Failed to finalize" in f.message
    assert "fails once node 'input_layernorm_weight' (Mul) joins it" in f.message
    assert "compiles up to node 7 of 9" in f.message
    assert f.nodes == ("input_layernorm_weight",)
    assert f.hint.startswith("an RMSNorm written with Pow(x, 2): compute the square as x * x")
    with pytest.raises(qnn.QnnCompileError) as failed:  # the error times its own compile
        with qnn.QnnRuntime(pow_graph, qnn.qnn_options_for(load_target(target), "fp16")):
            pass
    assert failed.value.seconds > 0 and not failed.value.findings
    # The rewrite the hint gives compiles, whole.
    fixed = lint_onnx(rmsnorm_graph(tmp_path / "mul.onnx", "mul"), target, artifact="fp32")
    assert not has_errors(fixed) and any("every node on the NPU" in f.message for f in fixed)


def _chain(path, n=40):
    nodes = [helper.make_node("Relu", [f"t{i}"], [f"t{i + 1}"], name=f"n{i}") for i in range(n)]
    graph = helper.make_graph(
        nodes,
        "chain",
        [helper.make_tensor_value_info("t0", TensorProto.FLOAT, [1, 4])],
        [helper.make_tensor_value_info(f"t{n}", TensorProto.FLOAT, [1, 4])],
    )
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)]), str(path))
    return path


def test_the_bisection_finds_the_first_breaking_node_in_log2_compiles(tmp_path):
    path = _chain(tmp_path / "chain.onnx")
    seen: list[int] = []

    def compiles(prefix):  # a stand-in backend: any graph holding node n23 fails
        names = [n.name for n in onnx.load(str(prefix)).graph.node]
        seen.append(len(names))
        return "n23" not in names

    found = locate(path, compiles)
    assert (found.node, found.op, found.index, found.nodes) == ("n23", "Relu", 24, 40)
    assert found.compiles == len(seen) <= math.ceil(math.log2(40))
    assert found.upstream == ("Relu",) * 8
    assert "fed by Relu" in found.hint()
    assert locate(path, lambda prefix: None) is None  # a probe that cannot tell: no guess


def test_a_prefix_outputs_every_tensor_it_makes_and_does_not_use(tmp_path):
    model = onnx.load(str(rmsnorm_graph(tmp_path / "g.onnx", "pow")))
    prefix = prefix_model(model, 3, {})  # pre, pow, mean
    assert [o.name for o in prefix.graph.output] == ["h", "ms"]
    assert [i.name for i in prefix.graph.input] == ["x"]
    assert sorted(w.name for w in prefix.graph.initializer) == ["axes", "two"]


def test_no_bisection_where_one_compile_is_slow(tmp_path):
    f = whole_graph_refusal("HTP v75", "fp32", "qnn: failed", _chain(tmp_path / "c.onnx"), None, 95.0)
    assert f.message == "HTP v75 could not compile fp32: qnn: failed (not bisected: one compile took 95 s)"
    assert f.nodes == ()


def test_the_failed_compile_says_how_long_it_took_and_lint_uses_that(tmp_path, monkeypatch):
    """The compile's own time (``QnnCompileError.seconds``, measured around the session) decides
    whether lint bisects; a slow failure is reported, not bisected."""
    from edgekit.lint import qnn as lint_qnn

    def slow_failure(*_args, **_kwargs):
        raise qnn.QnnCompileError("qnn: failed", hint="", findings=[], seconds=95.0)

    monkeypatch.setattr(lint_qnn.qnn_backend, "QnnRuntime", slow_failure)
    (f,) = lint_qnn.qnn_findings(_chain(tmp_path / "c.onnx"), load_target("snapdragon-8-gen-2"), "fp32")
    assert f.message.endswith("(not bisected: one compile took 95 s)")
