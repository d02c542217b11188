"""The qnn profile's graph rules that the HTP backend asks for: a Tanh's input promoted to 16 bit
takes the Tanh's output along, so the 16-to-8-bit convert comes after the Tanh's consumers and
never between the Tanh and them (the flow demo's GELU: the HTP backend computed that graph 9 dB
below its QDQ simulation)."""

from __future__ import annotations

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")

from onnx import TensorProto, helper, numpy_helper  # noqa: E402

from edgekit.quantize.calibrate import calibration_reader  # noqa: E402
from edgekit.quantize.qnn.graph import (  # noqa: E402
    GraphFacts,
    activation_bits,
    activation_tensors,
    promotion_ties,
    quantize_qnn_model,
    with_tanh_outputs,
)

D = 16


def _gelu(path):
    """x[1,4,D] -> MatMul(W) -> h; inner = 0.8 * h -> Tanh -> th; y = h * 0.5 * (1 + th) (the GELU's tail)."""
    rng = np.random.default_rng(0)
    nodes = [
        helper.make_node("MatMul", ["x", "W"], ["h"], name="fc"),
        helper.make_node("Mul", ["h", "k"], ["inner"], name="scale"),
        helper.make_node("Tanh", ["inner"], ["th"], name="tanh"),
        helper.make_node("Add", ["th", "one"], ["th1"], name="plus_one"),
        helper.make_node("Mul", ["half", "th1"], ["g"], name="half"),
        helper.make_node("Mul", ["h", "g"], ["y"], name="gate"),
    ]
    consts = {
        "W": rng.standard_normal((D, D)).astype(np.float32),
        "k": np.array(0.8, np.float32),
        "one": np.array(1.0, np.float32),
        "half": np.array(0.5, np.float32),
    }
    graph = helper.make_graph(
        nodes,
        "gelu",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4, D])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, D])],
        [numpy_helper.from_array(v, n) for n, v in consts.items()],
    )
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)]), str(path))
    return path


def _dq_bits(path):
    """{tensor a DequantizeLinear writes: 8 or 16}, converts included (what each consumer reads)."""
    model = onnx.load(str(path))
    inits = {i.name: i for i in model.graph.initializer}
    wide = (TensorProto.UINT16, TensorProto.INT16)
    return {
        n.output[0]: 16 if inits[n.input[2]].data_type in wide else 8
        for n in model.graph.node
        if n.op_type == "DequantizeLinear" and len(n.input) > 2 and n.input[2] in inits
    }


def _consumers_read(path, op_name):
    model = onnx.load(str(path))
    bits = _dq_bits(path)
    node = next(n for n in model.graph.node if n.name == op_name or n.name.startswith(op_name))
    return [bits.get(i) for i in node.input if i in bits]


@pytest.fixture(scope="module")
def gelu(tmp_path_factory):
    root = tmp_path_factory.mktemp("qnn-tanh")
    fp32 = _gelu(root / "fp32.onnx")
    rng = np.random.default_rng(1)
    feeds = [{"x": rng.standard_normal((1, 4, D)).astype(np.float32)} for _ in range(4)]
    return root, fp32, calibration_reader(feeds)


def test_a_tanhs_input_at_16_bit_takes_its_output_and_its_consumers_along(gelu):
    root, fp32, cal = gelu
    facts = GraphFacts.read(fp32)
    assert facts.tanh_outputs == {"inner": "th"}
    assert with_tanh_outputs(["h", "inner"], facts) == ["h", "inner", "th"]
    q = quantize_qnn_model(fp32, root / "inner16.onnx", cal, ["inner"], facts=facts)
    acts = activation_tensors(q)
    bits = activation_bits(q, acts)
    assert bits["inner"] == 16 and bits["th"] == 16 and bits["th1"] == 16, bits
    # The Tanh's consumer reads its output at 16 bit: no 16-to-8 convert between them.
    assert _consumers_read(q, "plus_one")[0] == 16
    # The ties the ranking costs a promotion by are what the quantizer wrote.
    ties = promotion_ties(fp32, acts, facts)
    assert {"inner", "th", "th1"} <= ties["inner"]
    assert {t for t, b in bits.items() if b == 16} == set(ties["inner"])


def test_each_tensors_kind_is_its_producing_op_and_the_ops_that_read_it(gelu):
    kinds = GraphFacts.read(gelu[1]).kinds
    assert kinds["h"] == ("MatMul", ("Mul", "Mul")) and kinds["inner"] == ("Mul", ("Tanh",))
    assert kinds["x"] == ("input", ("MatMul",)) and kinds["W"] == ("initializer", ("MatMul",))
    assert kinds["y"] == ("Mul", ())  # a graph output nothing reads


def test_without_the_rule_the_tanh_output_would_be_converted_back_before_its_consumer(gelu):
    """What the rule prevents, as ORT's quantizer writes it when only the input is named."""
    root, fp32, cal = gelu
    facts = GraphFacts(
        *(getattr(GraphFacts.read(fp32), f) for f in ("matmul_weights", "gather_tables", "two_d", "floats"))
    )
    assert facts.tanh_outputs == {}
    q = quantize_qnn_model(fp32, root / "norule.onnx", cal, ["inner"], facts=facts)
    bits = activation_bits(q, activation_tensors(q))
    assert bits["inner"] == 16 and bits["th1"] == 8
    assert _consumers_read(q, "plus_one")[0] == 8  # the Tanh's output, converted to 8 bit
