"""The cpu and trt profiles' budget search: the fallback loop and the sensitivity ranking."""

from __future__ import annotations

import numpy as np
import pytest

from edgekit.evaluate import snr_db
from edgekit.quantize.config import QuantizeConfig
from edgekit.quantize.cpu.search import fallback_until_within_budget, rank_by_sensitivity
from tests.quantize.conftest import build_tiny_model, tiny_feeds


def test_fallback_loop_with_fakes_moves_most_sensitive_first_until_met():
    built = []

    def build(nodes):
        built.append(list(nodes))
        return f"model{len(built)}"

    def measure(model):  # each of a, b costs 0.02 of agreement; c costs nothing
        nodes = built[-1]
        return {"lockstep_token_agreement": 1.0 - 0.02 * sum(n in nodes for n in ("a", "b"))}

    def sensitivity(model, nodes):
        return {"a": {"added_sqnr_db": 20.0}, "b": {"added_sqnr_db": 25.0}, "c": {"added_sqnr_db": 50.0}}

    model, out = fallback_until_within_budget(
        ["c", "b", "a"], {"lockstep_token_agreement": 0.99}, build, measure, sensitivity
    )
    assert out.passed and out.quantized == ["c"]
    assert [f["node"] for f in out.fallback] == ["a", "b"]
    assert out.fallback[0]["reason"].startswith("budget fallback #1") and "20.0 dB" in out.fallback[0]["reason"]
    assert [h["lockstep_token_agreement"] for h in out.history] == pytest.approx([0.96, 0.98, 1.0])
    assert model == "model3"
    assert out.next_up == ["c"]  # what the loop would have moved next: the fallback form's candidates
    _, capped = fallback_until_within_budget(
        ["c", "b", "a"], {"lockstep_token_agreement": 0.99}, build, measure, sensitivity, max_fallback=1
    )
    assert not capped.passed and len(capped.fallback) == 1 and capped.next_up == ["b", "c"]
    ranked: list[str] = []
    _, none = fallback_until_within_budget(
        ["c", "b", "a"],
        {"lockstep_token_agreement": 0.99},
        build,
        measure,
        lambda m, n: ranked.append(m) or sensitivity(m, n),
        max_fallback=0,
    )
    assert not none.passed and none.fallback == [] and ranked == []  # nothing to move: nothing ranked
    _, off = fallback_until_within_budget(
        ["c", "b", "a"], {"lockstep_token_agreement": 0.99}, build, measure, sensitivity, enabled=False
    )
    assert not off.passed and off.fallback == [] and len(off.history) == 1


def test_with_patience_the_search_stops_when_fallbacks_stop_improving_the_worst_margin():
    # aMUSEd-256's recorded history (random weights, budget 0.99): a better margin once, then
    # three fallbacks no better than it.
    # By the number of fallbacks: 5 or more hold the budget.
    agreements = [0.98530, 0.98554, 0.98470, 0.98482, 0.98482, 0.99500, 0.99500, 0.99500, 0.99500]
    nodes = [f"n{i}" for i in range(8)]
    built: list[list[str]] = []

    def build(kept):
        built.append(list(kept))
        return f"model{len(built)}"

    def measure(model):
        return {"lockstep_token_agreement": agreements[len(nodes) - len(built[-1])]}

    def sensitivity(model, kept):
        return {n: {"added_sqnr_db": 10.0 + i} for i, n in enumerate(kept)}

    budget = {"lockstep_token_agreement": 0.99}
    _, out = fallback_until_within_budget(nodes, budget, build, measure, sensitivity, patience=3)
    assert not out.passed and len(out.fallback) == 4 and len(out.history) == 5
    assert out.stopped and "3 fallbacks in a row" in out.stopped and "--max-fallback" in out.stopped
    assert out.next_up == nodes[4:]
    # Without patience (a small model, or the user's own --max-fallback) the search goes on: 8
    # fallbacks hold the budget, then the bisection finds that 5 do and 4 do not.
    built.clear()
    _, on = fallback_until_within_budget(nodes, budget, build, measure, sensitivity)
    assert on.passed and len(on.fallback) == 5 and on.stopped is None
    assert [h["fallback"] for h in on.history] == [0, 1, 2, 3, 4, 8, 6, 5]
    # Progress resets the count: a new best at the third fallback keeps the search going.
    agreements[3] = 0.98600
    built.clear()
    _, reset = fallback_until_within_budget(nodes, budget, build, measure, sensitivity, patience=3)
    assert reset.passed and len(reset.fallback) == 5


def test_rank_by_sensitivity_lowest_added_sqnr_first():
    assert rank_by_sensitivity({"x": {"added_sqnr_db": 40.0}, "y": {"added_sqnr_db": 12.0}}) == ["y", "x"]


def test_nodes_measured_alone_rank_first_and_the_screened_out_after_them():
    scores = {
        "a": {"added_sqnr_db": 30.0, "isolated_output_sqnr_db": 25.0},
        "b": {"added_sqnr_db": 10.0, "isolated_output_sqnr_db": 35.0},
        "c": {"added_sqnr_db": 45.0},
        "d": {"added_sqnr_db": 40.0},
    }
    assert rank_by_sensitivity(scores) == ["a", "b", "d", "c"]


def test_the_screen_keeps_every_node_of_a_small_model_and_the_noisiest_of_a_large_one():
    from edgekit.quantize.cpu.search import LARGE_BYTES, SCREEN_LARGE, SCREEN_NODES, screen

    nodes = [f"n{i}" for i in range(SCREEN_NODES + 20)]
    scores = {n: {"added_sqnr_db": 200.0 - i} for i, n in enumerate(nodes)}  # the later, the noisier
    assert screen(scores, nodes[:SCREEN_NODES], weight_bytes=1 << 20) == nodes[:SCREEN_NODES]  # the demos: all alone
    # matcha's decoder: 65 weighted nodes, 44.6 MB; a cut at 40 by this figure left out the layer
    # whose float form the budget needed (its screen figure is no guide), so all are measured
    assert screen(scores, nodes[:65], weight_bytes=45 << 20) == nodes[:65]
    assert screen(scores, nodes, weight_bytes=1 << 20) == nodes[::-1][:SCREEN_NODES]
    big = screen({k: v for k, v in scores.items() if k != "n3"}, nodes, weight_bytes=LARGE_BYTES + 1)
    assert len(big) == SCREEN_LARGE and big[0] == "n3"  # a node the pass did not score counts as noisiest
    assert big[1:] == nodes[::-1][: SCREEN_LARGE - 1]


NAIVE_OPS = ("MatMul", "Gemm", "Conv", "LayerNormalization", "Softmax", "Sin", "Cos")


def test_naive_quantization_fails_first_then_falls_back_within_budget(tmp_path):
    """Everything INT8 (attention core, LayerNorm, Softmax, the sinusoid of 1000·t, the time MLP):
    8 bits cannot resolve 1000·t radians, so the output is ruined; the loop must find and float
    the culprits with ORT's qdq_loss_debug and end within a 30 dB budget."""
    ort = pytest.importorskip("onnxruntime")
    from edgekit.quantize import graph as qgraph
    from edgekit.quantize.calibrate import calibration_reader
    from edgekit.quantize.cpu import ptq
    from edgekit.quantize.cpu.select import select_nodes
    from edgekit.quantize.cpu.sensitivity import isolated_output_sqnr, node_sensitivity

    model = build_tiny_model(tmp_path / "tiny.onnx", seed=3)
    cfg = QuantizeConfig(op_types=NAIVE_OPS, float_attention_core=False, float_time_embedding=False)
    plan = qgraph.analyse_graph(model, time_input="t")
    chosen, floated = select_nodes(plan, cfg)
    assert {"sin", "cos", "time_mlp", "qk", "av", "ln", "softmax"} <= set(chosen) and not floated
    calib, held_out = tiny_feeds(16, seed=1), tiny_feeds(8, seed=2)
    reader = calibration_reader(calib)
    ref = ort.InferenceSession(str(model), providers=["CPUExecutionProvider"])
    expected = np.concatenate([ref.run(None, f)[0] for f in held_out])
    n = iter(range(100))

    def build(nodes):
        out = tmp_path / f"int8-{next(n)}.onnx"
        ptq.quantize_model(model, out, reader, nodes, cfg, plan, calibration_cache=tmp_path / "cache.json")
        return out

    def measure(path):
        sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
        return {"snr_db": snr_db(expected, np.concatenate([sess.run(None, f)[0] for f in held_out]))}

    def sensitivity(path, nodes):  # as the stage ranks: qdq_loss_debug + one layer at a time
        scores = node_sensitivity(model, path, calib[:4], {k: plan.by_name()[k] for k in nodes})
        alone = isolated_output_sqnr(model, build, nodes, calib[:4], "y")
        return {k: scores.get(k, {}) | alone[k] for k in nodes}

    _, out = fallback_until_within_budget(chosen, {"snr_db": 30.0}, build, measure, sensitivity)
    assert out.history[0]["snr_db"] < 30.0 and not out.history[0]["passed"]  # made to fail first
    assert out.passed and out.metrics["snr_db"] >= 30.0
    fell = [f["node"] for f in out.fallback]
    assert set(fell[:2]) == {"sin", "cos"}, fell  # the sinusoid of 1000·t is what 8 bits break
    assert len(fell) <= 3, fell  # the ranking found it, not a sweep over everything
    assert out.ranking["sin"]["isolated_output_sqnr_db"] < 25 < 30 < out.ranking["ln"]["isolated_output_sqnr_db"]
    assert set(out.quantized) == set(chosen) - set(fell)
    assert all(f["reason"].startswith("budget fallback #") for f in out.fallback)


def test_after_a_few_fallbacks_the_float_set_doubles_then_bisects_to_the_fewest_that_hold():
    # matcha-decoder's shape of problem: error spread evenly, the budget held by 44 of 65 layers.
    nodes = [f"n{i:02d}" for i in range(65)]
    need = 44
    built: list[list[str]] = []

    def build(kept):
        built.append(list(kept))
        return f"model{len(built)}"

    def measure(model):  # SNR climbs with every layer floated, most sensitive first
        floated = len(nodes) - len(built[-1])
        return {"snr_db": 25.0 + 5.0 * floated / need}

    def sensitivity(model, kept):
        return {n: {"isolated_output_sqnr_db": 30.0 + i / 10} for i, n in enumerate(kept)}

    messages: list[str] = []
    model, out = fallback_until_within_budget(
        nodes, {"snr_db": 30.0}, build, measure, sensitivity, progress=messages.append
    )
    assert out.passed and [f["node"] for f in out.fallback] == nodes[:need]
    assert out.quantized == nodes[need:] and out.next_up == nodes[need:]
    assert built[int(model.removeprefix("model")) - 1] == nodes[need:]  # the model returned is that candidate
    # 1, 2, 3, 4 one at a time; 8, 16, 32, 64 doubling; then 48, 40, 44, 42, 43: 13 candidates, not 44.
    assert [h["fallback"] for h in out.history] == [0, 1, 2, 3, 4, 8, 16, 32, 64, 48, 40, 44, 42, 43]
    assert out.metrics["snr_db"] == pytest.approx(30.0)
    assert any(m.startswith("fallbacks 5-8 -> float: the next 4 in the ranking (n04, n05, n06, ...)") for m in messages)
    assert messages[-1] == "fallbacks: 44 hold the budget, 43 do not"
    # --max-fallback bounds the doubling too: 10 at most, the last step 4 -> 8 -> 10.
    built.clear()
    _, capped = fallback_until_within_budget(nodes, {"snr_db": 30.0}, build, measure, sensitivity, max_fallback=10)
    assert not capped.passed and len(capped.fallback) == 10
    assert [h["fallback"] for h in capped.history] == [0, 1, 2, 3, 4, 8, 10]
    assert capped.next_up == nodes[10:]


def test_the_screen_adds_the_nodes_whose_rows_hide_noise_and_keeps_its_ranking():
    """A node quiet over its whole tensor but noisy per row (Sana's caption projection reading the
    null caption's near-zero states) is screened in beside the whole-tensor ranking's noisiest,
    which stay as they were; a node whose rows are alike adds nothing."""
    from edgekit.quantize.cpu.search import LARGE_BYTES, SCREEN_LARGE, screen

    nodes = [f"n{i}" for i in range(30)]
    scores = {n: {"added_sqnr_db": 60.0 - i, "row_added_sqnr_db": 59.0 - i} for i, n in enumerate(nodes)}
    before = screen(scores, nodes, weight_bytes=LARGE_BYTES + 1)
    assert before == nodes[::-1][:SCREEN_LARGE]  # rows alike: the whole-tensor ranking alone
    scores["n0"] |= {"row_added_sqnr_db": 150.0, "row_tensor_sqnr_db": 7.7}  # the quietest over the tensor
    assert screen(scores, nodes, weight_bytes=LARGE_BYTES + 1) == [*before, "n0"]
    del scores["n0"]["row_tensor_sqnr_db"]  # its rows add nothing: not screened in
    assert screen(scores, nodes, weight_bytes=LARGE_BYTES + 1) == before


def test_a_fallbacks_reason_says_when_its_figure_was_raced_on_part_of_the_feeds():
    from edgekit.quantize.cpu.search import ranked_why

    whole = {"isolated_output_sqnr_db": 26.9, "isolated_feeds": 4, "isolated_of": 4}
    assert ranked_why(whole) == "alone in INT8 it leaves 26.9 dB output SQNR"
    raced = whole | {"isolated_output_sqnr_db": 49.2, "isolated_feeds": 2}
    assert ranked_why(raced) == "alone in INT8 it leaves 49.2 dB output SQNR (raced: on 2 of 4 feeds)"
    assert ranked_why({"isolated_output_sqnr_db": 30.0}) == "alone in INT8 it leaves 30.0 dB output SQNR"
    assert ranked_why({"added_sqnr_db": 12.0}) == "adds noise at 12.0 dB SQNR"


def test_the_race_measures_the_noisiest_by_either_figure_first():
    """``noisiest_first``: by the lower of the whole-tensor added SQNR and the per-row figures
    (Sana-600M's caption projection, quiet over its tensor, loud per row, ahead of the convs);
    an unscored node counts as noisiest."""
    from edgekit.quantize.cpu.search import noisiest_first

    scores = {
        "conv": {"added_sqnr_db": 23.7},
        "caption": {"added_sqnr_db": 32.8, "row_added_sqnr_db": 150.0, "row_tensor_sqnr_db": 10.2},
        "quiet": {"added_sqnr_db": 40.0, "row_added_sqnr_db": 45.0},
    }
    assert noisiest_first(scores, ["quiet", "conv", "caption"]) == ["caption", "conv", "quiet"]
    assert noisiest_first(scores, ["conv", "unscored"]) == ["unscored", "conv"]
