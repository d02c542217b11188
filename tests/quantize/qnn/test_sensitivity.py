"""The qnn profile's promotion ranking: each tensor's effect on the outputs alone at 8 bit (one
gated graph answers for every tensor), the tensors onnxruntime's QNN quantizer puts at 16 bit
with each promotion (checked against what it writes), and the order that trades the two."""

from __future__ import annotations

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")

from onnx import TensorProto, helper, numpy_helper  # noqa: E402

from edgekit.quantize.calibrate import calibration_reader  # noqa: E402
from edgekit.quantize.qnn.graph import (  # noqa: E402
    GraphFacts,
    activation_bits,
    activation_tensors,
    promotion_ties,
    quantize_qnn_model,
)
from edgekit.quantize.qnn.sensitivity import (  # noqa: E402
    RANK_FORWARDS,
    RANK_MIN_CALLS,
    bucket_promotion_order,
    gated_graph,
    output_sensitivity,
    output_sensitivity_per_graph,
    predicted_count,
    predicted_gains_db,
    promotion_order,
    ranking_calls,
    ranking_workers,
    step_weights,
)

D = 8


def _graph(path):
    """x[1,D] -> MatMul(W) -> h -> Split(3) -> a, b, c; y = Sigmoid(a)*100 + Sigmoid(b)*0.01 + c.

    Sigmoid(a) and Sigmoid(b) have the same range and the same own 8-bit error; the outputs see
    s_a's 10,000x larger."""
    rng = np.random.default_rng(0)
    w = rng.standard_normal((D, 3 * D)).astype(np.float32)
    big, small = np.full((1,), 100.0, np.float32), np.full((1,), 0.01, np.float32)
    nodes = [
        helper.make_node("MatMul", ["x", "W"], ["h"], name="fc"),
        helper.make_node("Split", ["h"], ["a", "b", "c"], name="chunks", axis=1, num_outputs=3),
        helper.make_node("Sigmoid", ["a"], ["s_a"], name="sig_a"),
        helper.make_node("Sigmoid", ["b"], ["s_b"], name="sig_b"),
        helper.make_node("Mul", ["s_a", "big"], ["m_a"], name="gain_a"),
        helper.make_node("Mul", ["s_b", "small"], ["m_b"], name="gain_b"),
        helper.make_node("Add", ["m_a", "m_b"], ["ab"], name="sum_ab"),
        helper.make_node("Add", ["ab", "c"], ["y"], name="sum"),
    ]
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, D])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, D])],
        [numpy_helper.from_array(w, "W"), numpy_helper.from_array(big, "big"), numpy_helper.from_array(small, "small")],
    )
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)]), str(path))
    return path


def _feeds(n=8, seed=0):
    rng = np.random.default_rng(seed)
    return [{"x": rng.standard_normal((1, D)).astype(np.float32)} for _ in range(n)]


@pytest.fixture(scope="module")
def graphs(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("sens")
    fp32 = _graph(tmp / "fp32.onnx")
    qdq = quantize_qnn_model(fp32, tmp / "q8.onnx", calibration_reader(_feeds()), facts=GraphFacts.read(fp32))
    return {"fp32": fp32, "q8": qdq, "tmp": tmp}


def _run(model, feed, gates=None):
    """One forward on the CPU EP with basic optimization: every Q/DQ as written (ORT's QDQ fusions
    would run the host's int8 kernels instead)."""
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_BASIC
    session = ort.InferenceSession(
        model.SerializeToString() if hasattr(model, "SerializeToString") else str(model),
        options,
        providers=["CPUExecutionProvider"],
    )
    return session.run(None, {**feed, **(gates or {})})[0]


def test_the_gated_graph_is_the_float_graph_with_gates_off_and_the_qdq_graph_with_them_on(graphs):
    acts = activation_tensors(graphs["q8"])
    model, gates = gated_graph(graphs["q8"], graphs["fp32"], [*acts, "W"])
    assert set(gates) == {*acts, "W"}  # every activation (graph input and output too) and the weight
    feed = _feeds(1, seed=5)[0]
    off = {g: np.zeros(1, np.float32) for g in gates.values()}
    on = {g: np.ones(1, np.float32) for g in gates.values()}
    np.testing.assert_allclose(_run(model, feed, off), _run(graphs["fp32"], feed), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(_run(model, feed, on), _run(graphs["q8"], feed), rtol=1e-5, atol=1e-5)
    assert not np.allclose(
        _run(graphs["q8"], feed), _run(graphs["fp32"], feed), rtol=1e-4, atol=1e-4
    )  # 8 bit is visible


def test_output_sensitivity_sees_what_the_network_does_with_a_tensors_error(graphs):
    # Every activation is a candidate, as in the qnn profile: the reference is float throughout
    # (a quantized activation downstream of s_b would round its error away).
    acts = activation_tensors(graphs["q8"])
    sens = output_sensitivity(graphs["fp32"], [(graphs["q8"], _feeds(6, seed=1))], [*acts, "W"])
    snr = sens.snr_db()
    assert set(snr) == {*acts, "W"}
    # Same range, same own error; the outputs see s_a's 10,000x larger: 80 dB apart.
    assert snr["s_b"] - snr["s_a"] > 60, snr
    assert snr["s_a"] < snr["W"] and np.isfinite(snr["y"]), snr
    assert sens.predicted_snr_db(["s_a", "s_b"]) < sens.predicted_snr_db(["s_b"])  # noise adds
    assert set(output_sensitivity(graphs["fp32"], [(graphs["q8"], [])], ["s_a"]).noise) == set()  # no feeds, no claim
    # Per step bucket: one Sensitivity per graph, which sum to the whole.
    parts = output_sensitivity_per_graph(
        graphs["fp32"],
        [(graphs["q8"], _feeds(6, seed=1)[:2]), (graphs["q8"], []), (graphs["q8"], _feeds(6, seed=1)[2:])],
        ["s_a", "s_b"],
    )
    assert len(parts) == 3 and parts[1].noise == {} and parts[1].signal == 0
    whole = output_sensitivity(graphs["fp32"], [(graphs["q8"], _feeds(6, seed=1))], ["s_a", "s_b"])
    for t in ("s_a", "s_b"):
        assert parts[0].noise[t] + parts[2].noise[t] == pytest.approx(whole.noise[t], rel=1e-9)


def test_promotion_ties_are_what_the_qnn_quantizer_writes(graphs):
    """For every candidate, the activations at 16 bit in the graph onnxruntime writes with it alone
    promoted are the ties predicted: a Split's outputs go together, a consumer's output follows its
    input, a MatMul weight takes its activation input (A16W16)."""
    fp32, acts = graphs["fp32"], activation_tensors(graphs["q8"])
    facts = GraphFacts.read(fp32)
    ties = promotion_ties(fp32, acts, facts)
    assert {"a", "b", "c"} <= ties["b"] and "s_b" in ties["b"]  # the Split's outputs, and b's consumer
    assert "x" in ties["W"] and "h" in ties["W"]
    for i, candidate in enumerate(["b", "ab", "W"]):
        q = quantize_qnn_model(
            fp32, graphs["tmp"] / f"p{i}.onnx", calibration_reader(_feeds()), [candidate], facts=facts
        )
        wide = {t for t, bits in activation_bits(q, acts).items() if bits == 16}
        assert wide == set(ties[candidate]) & set(acts), (candidate, wide, ties[candidate])


def test_sessions_sharing_the_candidates_rank_as_one_session_does(graphs):
    acts = activation_tensors(graphs["q8"])
    feeds = [(graphs["q8"], _feeds(3, seed=2))]
    one = output_sensitivity_per_graph(graphs["fp32"], feeds, [*acts, "W"], threads=1)[0]
    done: list[int] = []
    three = output_sensitivity_per_graph(
        graphs["fp32"], feeds, [*acts, "W"], threads=1, workers=3, each_feed=done.append
    )
    assert done == [1, 2, 3]  # progress after each recorded call
    three = three[0]
    assert set(three.noise) == set(one.noise) == {*acts, "W"}  # every candidate, once
    assert three.signal == pytest.approx(one.signal, rel=1e-12)
    for t, n in one.noise.items():
        assert three.noise[t] == pytest.approx(n, rel=1e-9, abs=1e-30), t


def test_the_price_of_one_forward_is_told_once_before_the_candidates_run(graphs):
    acts = activation_tensors(graphs["q8"])
    told: list[tuple[float, int]] = []
    done: list[int] = []
    output_sensitivity_per_graph(
        graphs["fp32"],
        [(graphs["q8"], _feeds(3, seed=2))],
        [*acts, "W"],
        each_feed=done.append,
        first_forward=lambda s: told.append((s, len(done))),
    )
    assert len(told) == 1 and told[0][0] > 0 and told[0][1] == 0  # before the first call's candidates
    assert done == [1, 2, 3]


def test_a_graph_with_many_candidates_ranks_on_fewer_calls():
    assert ranking_calls(281, wanted=16, available=500) == 16  # the flow demo's ranking is unchanged
    assert ranking_calls(436, wanted=16, available=500) == RANK_FORWARDS // 437 < 16
    assert ranking_calls(100_000, wanted=16, available=500) == RANK_MIN_CALLS  # never fewer
    assert ranking_calls(436, wanted=16, available=1) == 1  # never more than were recorded
    assert ranking_calls(10, wanted=4, available=500) == 4  # nor more than asked for
    for n in (1, 50, 281, 436, 2000, 10**6):
        calls = ranking_calls(n, 16, 10**6)
        assert (n + 1) * calls <= RANK_FORWARDS or calls == RANK_MIN_CALLS


def test_a_small_model_is_ranked_by_one_single_threaded_session_per_core():
    assert ranking_workers(6 << 20, threads=0, cores=2) == (2, 1)
    assert ranking_workers(6 << 20, threads=0, cores=16) == (4, 1)
    assert ranking_workers(6 << 20, threads=3, cores=16) == (1, 3)  # the user's thread count stands
    assert ranking_workers(1 << 30, threads=0, cores=16) == (1, 0)  # a large model: one copy of its weights
    assert ranking_workers(6 << 20, threads=0, cores=1) == (1, 0) and ranking_workers(6 << 20, 0, None) == (1, 0)


def test_the_order_removes_the_most_noise_per_activation_put_at_16_bit():
    acts = ["a", "b", "c", "d", "e"]
    ties = {
        "a": frozenset({"a", "b", "c"}),  # noisy, but three activations
        "b": frozenset({"a", "b", "c"}),
        "c": frozenset({"a", "b", "c"}),
        "d": frozenset({"d"}),  # alone
        "e": frozenset({"e"}),  # no effect on the outputs
        "W": frozenset({"W", "d"}),  # a weight whose input is d: free once d is at 16 bit
    }
    noise = {"a": 3.0, "b": 3.0, "c": 0.0, "d": 2.5, "e": 0.0, "W": 0.5}
    # W: its own 0.5 and d's 2.5 for one activation; then d costs nothing more; a: 6.0 / 3, and b
    # and c come free with it; e removes no noise: last.
    assert promotion_order(noise, ties, acts) == ["W", "d", "a", "b", "c", "e"]
    assert promotion_order(noise, ties, acts, start=["d"])[0] == "W"  # what the rule put at 16 bit counts


def test_by_step_bucket_a_tensor_goes_to_16_bit_where_its_weighted_noise_is():
    acts = ["a", "b", "c"]
    ties = {"a": frozenset({"a"}), "b": frozenset({"b"}), "c": frozenset({"b", "c"})}
    # Bucket 0: a is noisy; bucket 1: b is. Same share of the calls, bucket 1 weighs 4x.
    noise = [{"a": 4.0, "b": 0.1, "c": 0.0}, {"a": 0.2, "b": 3.0, "c": 0.9}]
    order = bucket_promotion_order(noise, [1.0, 4.0], [0.5, 0.5], ties, acts)
    # Weighted noise per activation-call: (1, b) 4 * 3.0 / 0.5 = 24; (0, a) 4.0 / 0.5 = 8; then
    # (1, c) 4 * 0.9 / 0.5 = 7.2 for the one activation it adds (b is at 16 bit there already).
    assert order[:3] == [(1, "b"), (0, "a"), (1, "c")]
    assert sorted(order) == sorted((b, t) for b in range(2) for t in ties)  # each (bucket, tensor) once
    # An activation costs its bucket's share of the calls: the same noise in a bucket of few calls goes first.
    even = bucket_promotion_order([{"a": 1.0}, {"a": 1.0}], [1.0, 1.0], [0.9, 0.1], {"a": frozenset({"a"})}, ["a"])
    assert even[0] == (1, "a")
    # What is at 16 bit by rule is so in every bucket.
    assert (1, "b") not in bucket_promotion_order(noise, [1.0, 4.0], [0.5, 0.5], ties, acts, start=["b"])


def test_a_flow_steps_weight_is_its_step_size_squared():
    t = [0.0, 0.25, 0.25, 0.75]  # a decode's calls (two at one t: a repeated recording)
    assert step_weights("flow", t) == pytest.approx([0.0625, 0.25, 0.25, 0.0625])
    assert step_weights("masked", t) == [1.0] * 4 and step_weights("ar", [3.0]) == [1.0]


def test_the_predicted_gain_is_the_noise_the_promotions_take_off_in_db():
    ties = {"a": frozenset({"a"}), "b": frozenset({"b", "c"}), "c": frozenset({"c"}), "d": frozenset({"d"})}
    noise = {"a": 9.0, "b": 0.6, "c": 0.3, "d": 0.1}
    gains = predicted_gains_db([noise], [1.0], ties, ["a", "b", "c", "d"])
    # 10 in all; a leaves 1 (10 dB), b takes c along and leaves 0.1 (20 dB), c adds nothing, d leaves none.
    assert gains[:4] == pytest.approx([0.0, 10.0, 20.0, 20.0]) and gains[4] == float("inf")
    assert predicted_count(gains, 15.0) == 2 and predicted_count(gains, 0.0) == 1
    assert predicted_count(gains[:3], 30.0) == 2  # none reaches it: the whole order
    # What is at 16 bit already (the rule's set) is not counted as noise to take off.
    assert predicted_gains_db([noise], [1.0], ties, ["b"], start=["a"]) == pytest.approx([0.0, 10.0])


def test_by_step_bucket_the_predicted_gain_weighs_each_buckets_noise():
    ties = {"a": frozenset({"a"})}
    # Bucket 1 weighs 3x: 1 + 3 * 3 = 10 in all; (1, a) leaves 1: 10 dB; a in every bucket: none left.
    gains = predicted_gains_db([{"a": 1.0}, {"a": 3.0}], [1.0, 3.0], ties, [(1, "a"), (0, "a")])
    assert gains[:2] == pytest.approx([0.0, 10.0]) and gains[2] == float("inf")
    assert predicted_gains_db([{"a": 1.0}, {"a": 3.0}], [1.0, 3.0], ties, ["a"])[1] == float("inf")
