"""The cpu and trt profiles' budget search: the fallback loop and the sensitivity ranking."""

from __future__ import annotations

import contextlib

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
    _, capped = fallback_until_within_budget(
        ["c", "b", "a"], {"lockstep_token_agreement": 0.99}, build, measure, sensitivity, max_fallback=1
    )
    assert not capped.passed and len(capped.fallback) == 1
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

    nodes = [f"n{i}" for i in range(60)]
    scores = {n: {"added_sqnr_db": 60.0 - i} for i, n in enumerate(nodes)}  # the later, the noisier
    assert screen(scores, nodes[:SCREEN_NODES], weight_bytes=1 << 20) == nodes[:SCREEN_NODES]  # the demos: all alone
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
    from edgekit.quantize.cpu.search import isolated_output_sqnr, node_sensitivity
    from edgekit.quantize.cpu.select import select_nodes

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
        return {k: scores.get(k, {}) | {"isolated_output_sqnr_db": alone[k]} for k in nodes}

    _, out = fallback_until_within_budget(chosen, {"snr_db": 30.0}, build, measure, sensitivity)
    assert out.history[0]["snr_db"] < 30.0 and not out.history[0]["passed"]  # made to fail first
    assert out.passed and out.metrics["snr_db"] >= 30.0
    fell = [f["node"] for f in out.fallback]
    assert set(fell[:2]) == {"sin", "cos"}, fell  # the sinusoid of 1000·t is what 8 bits break
    assert len(fell) <= 3, fell  # the ranking found it, not a sweep over everything
    assert out.ranking["sin"]["isolated_output_sqnr_db"] < 25 < 30 < out.ranking["ln"]["isolated_output_sqnr_db"]
    assert set(out.quantized) == set(chosen) - set(fell)
    assert all(f["reason"].startswith("budget fallback #") for f in out.fallback)


def test_node_sensitivity_streams_feeds_and_equals_qdq_loss_debug_over_all_of_them(tmp_path, monkeypatch):
    """Per-feed sums give qdq_loss_debug's numbers over the concatenated feeds; the QDQ graph it
    runs saves activations only (no dequantized weight: the whole model again per feed)."""
    pytest.importorskip("onnxruntime")
    dbg = pytest.importorskip("onnxruntime.quantization.qdq_loss_debug")
    from edgekit.quantize import graph as qgraph
    from edgekit.quantize.calibrate import calibration_reader
    from edgekit.quantize.cpu import ptq, search
    from edgekit.quantize.cpu.select import select_nodes

    model = build_tiny_model(tmp_path / "tiny.onnx", seed=3)
    cfg = QuantizeConfig(op_types=NAIVE_OPS, float_attention_core=False, float_time_embedding=False)
    plan = qgraph.analyse_graph(model, time_input="t")
    chosen, _ = select_nodes(plan, cfg)
    calib = tiny_feeds(8, seed=1)
    qdq = tmp_path / "int8.onnx"
    ptq.quantize_model(
        model, qdq, calibration_reader(calib), chosen, cfg, plan, calibration_cache=tmp_path / "cache.json"
    )
    fetched: list[list[str]] = []
    real_run = search._run
    monkeypatch.setattr(search, "_run", lambda s, names, f: fetched.append(list(names)) or real_run(s, names, f))
    open_sessions, most = [0], [0]
    real_tapped = search.tapped_session

    @contextlib.contextmanager
    def counted(*args, **kwargs):
        with real_tapped(*args, **kwargs) as session:
            open_sessions[0] += 1
            most[0] = max(most[0], open_sessions[0])
            try:
                yield session
            finally:
                open_sessions[0] -= 1

    monkeypatch.setattr(search, "tapped_session", counted)
    nodes = {k: plan.by_name()[k] for k in chosen}
    scores = search.node_sensitivity(model, qdq, calib[:4], nodes)
    assert len(fetched) == 8  # two sessions, one run each per feed
    assert most[0] == 1  # the float session is gone before the QDQ one opens: never the model twice
    import onnx

    inits = {i.name for i in onnx.load(str(qdq)).graph.initializer}
    weights = {
        n.output[0] for n in onnx.load(str(qdq)).graph.node if n.op_type == "DequantizeLinear" and n.input[0] in inits
    }
    assert weights and not weights & set(fetched[-1])  # no dequantized weight is fetched
    # ORT's own path, every feed collected at once
    aug_f, aug_q = tmp_path / "f.onnx", tmp_path / "q.onnx"
    dbg.modify_model_output_intermediate_tensors(
        str(model), str(aug_f), op_types_for_saving=sorted({n.op_type for n in nodes.values()})
    )
    dbg.modify_model_output_intermediate_tensors(
        str(qdq),
        str(aug_q),
        op_types_for_saving=[*sorted({n.op_type for n in nodes.values()}), "QuantizeLinear", "DequantizeLinear"],
    )
    f_acts = dbg.collect_activations(str(aug_f), calibration_reader(calib[:4]))
    q_acts = dbg.collect_activations(str(aug_q), calibration_reader(calib[:4]))
    matched = dbg.create_activation_matching(q_acts, f_acts)
    graph = {n.name: n for n in onnx.load(str(model)).graph.node}
    for name in ("proj", "qk", "time_mlp"):
        y = graph[name].output[0]
        expected = float(
            dbg.compute_signal_to_quantization_noice_ratio(
                f_acts[y], matched[y]["post_qdq"] if y in matched else q_acts[y]
            )
        )
        assert scores[name]["output_sqnr_db"] == pytest.approx(expected, abs=1e-3)


def test_node_sensitivity_fetches_in_groups_under_the_cap_with_the_same_scores(tmp_path, monkeypatch):
    """A run's fetched tensors are alive together: with a cap, each graph run fetches at most that
    many bytes (an activation and its Q/DQ copies in one run), more runs answer, and the scores do
    not change."""
    pytest.importorskip("onnxruntime")
    from edgekit.quantize import graph as qgraph
    from edgekit.quantize.calibrate import calibration_reader
    from edgekit.quantize.calibrator import graph_without_weights
    from edgekit.quantize.cpu import ptq, search
    from edgekit.quantize.cpu.select import select_nodes

    model = build_tiny_model(tmp_path / "tiny.onnx", seed=3)
    cfg = QuantizeConfig(op_types=NAIVE_OPS, float_attention_core=False, float_time_embedding=False)
    plan = qgraph.analyse_graph(model, time_input="t")
    chosen, _ = select_nodes(plan, cfg)
    calib = tiny_feeds(4, seed=1)
    qdq = tmp_path / "int8.onnx"
    ptq.quantize_model(
        model, qdq, calibration_reader(calib), chosen, cfg, plan, calibration_cache=tmp_path / "cache.json"
    )
    nodes = {k: plan.by_name()[k] for k in chosen}
    whole = search.node_sensitivity(model, qdq, calib[:2], nodes)
    sizes = search._tensor_bytes(graph_without_weights(model)) | search._tensor_bytes(graph_without_weights(qdq))
    cap = 3 * max(sizes.values())
    fetched: list[list[str]] = []
    real_run = search._run
    monkeypatch.setattr(search, "_run", lambda s, names, f: fetched.append(list(names)) or real_run(s, names, f))
    grouped = search.node_sensitivity(model, qdq, calib[:2], nodes, fetch_bytes=cap)
    assert len(fetched) > 4  # more than one run per graph and feed
    for names in fetched:
        assert sum(sizes[n] for n in names) <= cap, names
    q_runs = [names for names in fetched if any(n.endswith("_DequantizeLinear_Output") for n in names)]
    assert len(q_runs) > 2  # the QDQ graph's runs split too
    inputs = {v.name for v in graph_without_weights(qdq).graph.input}  # read from the feed, never fetched
    for names in q_runs:  # an activation and its DQ copy are fetched in one run
        copies = [n for n in names if n.endswith("_DequantizeLinear_Output")]
        assert all(search._activation_of(n) in {*names, *inputs} for n in copies), names
    assert grouped.keys() == whole.keys()
    for name, score in whole.items():
        for k, v in score.items():
            assert grouped[name][k] == pytest.approx(v, abs=1e-6), (name, k)


def test_groups_keep_order_and_the_cap_and_a_key_together():
    from edgekit.quantize.cpu.search import _activation_of, _groups

    sizes = {"a": 4, "a_DequantizeLinear_Output": 4, "b": 4, "c": 10, "d": 1}
    fetch = ["a", "a_DequantizeLinear_Output", "b", "c", "d"]
    assert _groups(fetch, sizes, 8, key=_activation_of) == [["a", "a_DequantizeLinear_Output"], ["b"], ["c"], ["d"]]
    assert _groups(fetch, sizes, 100, key=_activation_of) == [fetch]
    assert _groups(["x", "y"], {"y": 5}, 5) == [["x"], ["y"]]  # unknown shape: the largest known
    assert _groups([], sizes, 8) == [[]]
