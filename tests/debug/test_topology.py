"""Where ``debug`` says the error enters when no op crosses the threshold: the op that adds the
most, measured alone, not the one the output-minus-input estimate blames for passing its
inputs' noise on amplified."""

from __future__ import annotations

import math

from edgekit.debug.topology import RECHECK_MOST, Op, Topology, locate

THRESHOLD = 20.0


def attention_core() -> Topology:
    """x -> q = Gemm(x), k = Gemm(x) (quantized in the candidate) -> s = MatMul(q, k) (float) -> y."""
    ops = (
        Op("q_proj", "Gemm", "attn.to_q", ("x", "wq"), ("q",)),
        Op("k_proj", "Gemm", "attn.to_k", ("x", "wk"), ("k",)),
        Op("qk", "MatMul", "attn", ("q", "k"), ("s",)),
        Op("act", "Relu", "attn.act", ("s",), ("y",)),
    )
    return Topology(ops, frozenset({"x", "wq", "wk"}), ("q", "k", "s", "y"))


# Two steps: the candidate's q and k carry 33-34 dB, their float product 29.3 dB (noise adds up).
PER_STEP = [{"q": 33.0, "k": 34.0, "s": 29.3, "y": 29.3}, {"q": 33.5, "k": 34.5, "s": 29.8, "y": 29.8}]


class Judge:
    """A stand-in ``local``: each op's own noise as a measurement alone would give it (a float op
    adds none); records the questions and the prefetches."""

    def __init__(self, own: dict[str, float]):
        self.own, self.asked, self.prefetched = own, [], []

    def __call__(self, step: int, op: Op, tensor: str) -> float | None:
        self.asked.append((step, op.name))
        return self.own.get(op.name)

    def prefetch(self, step, asked) -> None:
        self.prefetched.append((step, sorted(op.name for op, _ in asked)))


def test_the_estimate_alone_blames_the_float_product():
    entry = locate(attention_core(), PER_STEP, THRESHOLD)
    assert entry is not None and not entry.crossed
    assert (entry.step, entry.op.name) == (0, "qk")  # 10^-2.93 - 10^-3.30: "31.7 dB added" by a float op
    assert math.isclose(entry.own_db, 31.7, abs_tol=0.1)


def test_measured_alone_the_quantized_projection_adds_the_most():
    judge = Judge({"q_proj": 33.2, "k_proj": 34.1, "qk": math.inf, "act": math.inf})
    entry = locate(attention_core(), PER_STEP, THRESHOLD, judge, judge.prefetch)
    assert entry is not None and not entry.crossed
    assert (entry.step, entry.op.name, entry.own_db) == (0, "q_proj", 33.2)
    # Every op of both steps is among the lowest output SQNRs here (8 <= RECHECK_MOST), each
    # asked once, and each step's values captured once before its questions.
    assert 8 <= RECHECK_MOST and sorted(judge.asked) == sorted(
        (s, n) for s in (0, 1) for n in ("q_proj", "k_proj", "qk", "act")
    )
    assert judge.prefetched == [(0, ["act", "k_proj", "q_proj", "qk"]), (1, ["act", "k_proj", "q_proj", "qk"])]


def test_an_op_that_crosses_when_measured_alone_is_the_entry():
    judge = Judge({"q_proj": 33.2, "k_proj": 15.0, "qk": math.inf, "act": math.inf})
    entry = locate(attention_core(), PER_STEP, THRESHOLD, judge, judge.prefetch)
    assert entry is not None and entry.crossed and (entry.step, entry.op.name, entry.own_db) == (0, "k_proj", 15.0)


def test_nothing_measurable_alone_keeps_the_estimate():
    judge = Judge({})
    entry = locate(attention_core(), PER_STEP, THRESHOLD, judge, judge.prefetch)
    assert entry is not None and (entry.step, entry.op.name) == (0, "qk")


def test_an_op_measured_alone_gives_way_to_the_estimates_of_those_that_could_not_be():
    """Only the float product's region was captured whole on the candidate (the projections'
    inputs are renamed in its graph): measured alone it adds float rounding, so the entry is
    the projection the estimate ranks next, not the product with its measured 138 dB."""
    judge = Judge({"qk": 138.7, "act": math.inf})
    entry = locate(attention_core(), PER_STEP, THRESHOLD, judge, judge.prefetch)
    assert entry is not None and not entry.crossed and (entry.step, entry.op.name, entry.own_db) == (0, "q_proj", 33.0)


def test_only_the_lowest_output_sqnrs_are_measured_again():
    """More ops than RECHECK_MOST: the ones asked are those of lowest output SQNR, and the entry is
    one of them, measured alone (the others' estimates, their whole output noise, stay out)."""
    n = RECHECK_MOST + 5
    ops = tuple(Op(f"g{i}", "Gemm", f"m{i}", ("x", f"w{i}"), (f"t{i}",)) for i in range(n))
    topo = Topology(ops, frozenset({"x", *(f"w{i}" for i in range(n))}), tuple(f"t{i}" for i in range(n)))
    measured = {f"t{i}": 40.0 - i * 0.5 for i in range(n)}  # the later, the worse
    judge = Judge({f"g{i}": 45.0 for i in range(n)})
    entry = locate(topo, [measured], THRESHOLD, judge, judge.prefetch)
    assert {name for _, name in judge.asked} == {f"g{i}" for i in range(n - RECHECK_MOST, n)}
    assert entry is not None and entry.own_db == 45.0 and entry.op.name in {f"g{i}" for i in range(n - RECHECK_MOST, n)}


def test_where_the_candidate_names_its_quantized_ops_only_those_are_asked():
    """The estimate ranks the float product and its activation first; the projections, the ops
    the candidate quantizes, are the ones measured and named."""
    judge = Judge({"q_proj": 36.0, "k_proj": 34.1, "qk": 138.7, "act": math.inf})
    entry = locate(attention_core(), PER_STEP, THRESHOLD, judge, judge.prefetch, quantized={"q_proj", "k_proj"})
    assert {name for _, name in judge.asked} == {"q_proj", "k_proj"}
    assert entry is not None and (entry.op.name, entry.own_db) == ("k_proj", 34.1)


def test_quantized_ops_are_those_whose_candidate_node_reads_a_dequantized_input():
    """Named as the reference names them, through the suffix a pre-processing pass adds."""
    from onnx import TensorProto, helper

    from edgekit.debug.qdq import quantized_ops

    scale = helper.make_tensor("s", TensorProto.FLOAT, [], [0.1])
    zero = helper.make_tensor("z", TensorProto.UINT8, [], [128])
    nodes = [
        helper.make_node("QuantizeLinear", ["x", "s", "z"], ["xq"], name="x_q"),
        helper.make_node("DequantizeLinear", ["xq", "s", "z"], ["xd"], name="x_dq"),
        helper.make_node("Gemm", ["xd", "w"], ["q"], name="q_proj/MatMulAddFusion"),
        helper.make_node("MatMul", ["x", "w"], ["k"], name="k_proj"),
        helper.make_node("MatMul", ["xd", "k"], ["s2"], name="qk_matmul"),
    ]
    graph = helper.make_graph(nodes, "g", [], [], [scale, zero])
    model = helper.make_model(graph)
    assert quantized_ops(model, ["q_proj", "k_proj", "qk", "x_q"]) == {"q_proj", "qk"}
