"""The budget search's sensitivity measurement: qdq_loss_debug's numbers in bounded memory."""

from __future__ import annotations

import contextlib

import pytest

from edgekit.quantize.config import QuantizeConfig
from tests.quantize.conftest import build_tiny_model, tiny_feeds

NAIVE_OPS = ("MatMul", "Gemm", "Conv", "LayerNormalization", "Softmax", "Sin", "Cos")


def _naive_qdq(tmp_path, n_feeds: int):
    """The tiny flow block with everything INT8 (attention core, LayerNorm, Softmax, the time
    sinusoid), calibrated on ``n_feeds`` feeds: (float model, QDQ model, plan, INT8 nodes, feeds)."""
    from edgekit.quantize import graph as qgraph
    from edgekit.quantize.calibrate import calibration_reader
    from edgekit.quantize.cpu import ptq
    from edgekit.quantize.cpu.select import select_nodes

    model = build_tiny_model(tmp_path / "tiny.onnx", seed=3)
    cfg = QuantizeConfig(op_types=NAIVE_OPS, float_attention_core=False, float_time_embedding=False)
    plan = qgraph.analyse_graph(model, time_input="t")
    chosen, _ = select_nodes(plan, cfg)
    calib = tiny_feeds(n_feeds, seed=1)
    qdq = tmp_path / "int8.onnx"
    ptq.quantize_model(
        model, qdq, calibration_reader(calib), chosen, cfg, plan, calibration_cache=tmp_path / "cache.json"
    )
    return model, qdq, plan, chosen, calib


class _Recorded:
    """A session whose runs' fetched names are recorded."""

    def __init__(self, session, fetched):
        self._session, self._fetched = session, fetched

    def run(self, names, feed):
        self._fetched.append(list(names))
        return self._session.run(names, feed)

    def __getattr__(self, name):
        return getattr(self._session, name)


def _watch_runs(monkeypatch):
    """(each run's fetched names, the most sessions open at once) of the tapped sessions the
    sensitivity's grouped runs open."""
    from edgekit.quantize import segments

    fetched: list[list[str]] = []
    open_sessions, most = [0], [0]
    real_tapped = segments.tapped_session

    @contextlib.contextmanager
    def counted(*args, **kwargs):
        with real_tapped(*args, **kwargs) as session:
            open_sessions[0] += 1
            most[0] = max(most[0], open_sessions[0])
            try:
                yield _Recorded(session, fetched)
            finally:
                open_sessions[0] -= 1

    monkeypatch.setattr(segments, "tapped_session", counted)
    return fetched, most


def test_node_sensitivity_streams_feeds_and_equals_qdq_loss_debug_over_all_of_them(tmp_path, monkeypatch):
    """Per-feed sums give qdq_loss_debug's numbers over the concatenated feeds; the QDQ graph it
    runs saves activations only (no dequantized weight: the whole model again per feed)."""
    pytest.importorskip("onnxruntime")
    dbg = pytest.importorskip("onnxruntime.quantization.qdq_loss_debug")
    from edgekit.quantize.calibrate import calibration_reader
    from edgekit.quantize.cpu import sensitivity

    model, qdq, plan, chosen, calib = _naive_qdq(tmp_path, 8)
    fetched, most = _watch_runs(monkeypatch)
    nodes = {k: plan.by_name()[k] for k in chosen}
    scores = sensitivity.node_sensitivity(model, qdq, calib[:4], nodes)
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
    from edgekit.quantize.cpu import sensitivity
    from edgekit.quantize.memory import tensor_bytes
    from edgekit.quantize.taps import graph_without_weights

    model, qdq, plan, chosen, calib = _naive_qdq(tmp_path, 4)
    nodes = {k: plan.by_name()[k] for k in chosen}
    whole = sensitivity.node_sensitivity(model, qdq, calib[:2], nodes)
    sizes = tensor_bytes(graph_without_weights(model)) | tensor_bytes(graph_without_weights(qdq))
    cap = 3 * max(sizes.values())
    fetched, _ = _watch_runs(monkeypatch)
    from edgekit.quantize import segments

    chains: list = []
    real_chained = segments.chained
    monkeypatch.setattr(segments, "chained", lambda *a: chains.append(real_chained(*a)) or chains[-1])
    grouped = sensitivity.node_sensitivity(model, qdq, calib[:2], nodes, fetch_bytes=cap)
    assert len(chains) == 2 and all(c is not None for c in chains)  # both graphs' groups ran as chains
    assert len(fetched) > 4  # more than one run per graph and feed
    for names in fetched:
        assert sum(sizes[n] for n in names) <= 2 * cap, names  # its group, and what later graphs read (<= cap)
    q_runs = [names for names in fetched if any(n.endswith("_DequantizeLinear_Output") for n in names)]
    assert len(q_runs) > 2  # the QDQ graph's runs split too
    inputs = {v.name for v in graph_without_weights(qdq).graph.input}  # read from the feed, never fetched
    for names in q_runs:  # an activation and its DQ copy are fetched in one run
        copies = [n for n in names if n.endswith("_DequantizeLinear_Output")]
        assert all(sensitivity._activation_of(n) in {*names, *inputs} for n in copies), names
    assert grouped.keys() == whole.keys()
    for name, score in whole.items():
        for k, v in score.items():
            assert grouped[name][k] == pytest.approx(v, abs=1e-6), (name, k)


def test_groups_keep_order_and_the_cap_and_a_key_together():
    from edgekit.quantize.cpu.sensitivity import _activation_of
    from edgekit.quantize.taps import fetch_groups as _groups

    sizes = {"a": 4, "a_DequantizeLinear_Output": 4, "b": 4, "c": 10, "d": 1}
    fetch = ["a", "a_DequantizeLinear_Output", "b", "c", "d"]
    assert _groups(fetch, sizes, 8, key=_activation_of) == [["a", "a_DequantizeLinear_Output"], ["b"], ["c"], ["d"]]
    assert _groups(fetch, sizes, 100, key=_activation_of) == [fetch]
    assert _groups(["x", "y"], {"y": 5}, 5) == [["x"], ["y"]]  # unknown shape: the largest known
    assert _groups([], sizes, 8) == [[]]


def test_rows_of_small_magnitude_show_in_the_per_row_sqnr_not_the_whole_tensor_s():
    """A caption's prompt rows at unit scale and its padding rows at 0.05, quantized with one
    per-tensor step (as an INT8 activation is): the whole tensor's SQNR is the prompt's, the mean
    row's is the padding's. An all-zero reference row carries no signal and is left out."""
    import numpy as np

    from edgekit.quantize.cpu.sensitivity import _add, _add_both, _db, _row_db

    rng = np.random.default_rng(0)
    ref = np.concatenate([rng.standard_normal((1, 20, 64)), 0.05 * rng.standard_normal((1, 80, 64))], axis=1)
    step = (ref.max() - ref.min()) / 255
    cand = np.round(ref / step) * step
    whole, rows = {}, {}
    _add_both(whole, rows, "t", ref, cand, per_row=True)
    assert rows["t"][1] == 100
    assert _db(whole["t"]) > 30.0 and _row_db(rows["t"]) < 20.0
    alone = [0.0, 0.0]
    _add(alone, ref, cand)
    assert whole["t"] == pytest.approx(alone, rel=1e-12)  # the rows' powers summed: the whole tensor's
    padded = np.concatenate([ref, np.zeros((1, 5, 64))], axis=1)
    more: dict = {}
    _add_both({}, more, "t", padded, np.concatenate([cand, np.full((1, 5, 64), step)], axis=1), per_row=True)
    assert more["t"] == pytest.approx(rows["t"])  # the zero rows are not counted
    same: dict = {}
    _add_both({}, same, "t", ref, ref, per_row=True)
    assert _row_db(same["t"]) == float("inf")
    flat: dict = {}
    _add_both(flat, same, "v", ref.ravel(), cand.ravel(), per_row=True)  # one axis: no rows to score
    assert "v" not in same and flat["v"] == pytest.approx(alone, rel=1e-12)


def test_matmul_and_gemm_tensors_are_also_scored_per_row(tmp_path):
    """``row_*`` keys for the ops whose last axis is a row's features, from the same runs: the
    row-mean SQNR of the node's output equals the one computed from ORT's own activations."""
    pytest.importorskip("onnxruntime")
    dbg = pytest.importorskip("onnxruntime.quantization.qdq_loss_debug")
    import numpy as np
    import onnx

    from edgekit.quantize.calibrate import calibration_reader
    from edgekit.quantize.cpu import sensitivity

    model, qdq, plan, chosen, calib = _naive_qdq(tmp_path, 4)
    nodes = {k: plan.by_name()[k] for k in chosen}
    scores = sensitivity.node_sensitivity(model, qdq, calib[:2], nodes)
    assert scores
    for name, score in scores.items():
        assert ("row_output_sqnr_db" in score) == (nodes[name].op_type in sensitivity.ROW_OPS), name
        assert ("row_tensor_sqnr_db" in score) == (nodes[name].op_type in sensitivity.ROW_OPS), name
    aug_f, aug_q = tmp_path / "f.onnx", tmp_path / "q.onnx"
    dbg.modify_model_output_intermediate_tensors(str(model), str(aug_f), op_types_for_saving=["MatMul"])
    dbg.modify_model_output_intermediate_tensors(
        str(qdq), str(aug_q), op_types_for_saving=["MatMul", "QuantizeLinear", "DequantizeLinear"]
    )
    f_acts = dbg.collect_activations(str(aug_f), calibration_reader(calib[:2]))
    q_acts = dbg.collect_activations(str(aug_q), calibration_reader(calib[:2]))
    matched = dbg.create_activation_matching(q_acts, f_acts)
    graph = onnx.load(str(model)).graph
    proj = {n.name: n for n in graph.node}["proj"]
    y = proj.output[0]
    features = {i.name: i.dims[-1] for i in graph.initializer}[proj.input[1]]  # the activations come flat
    got = matched[y]["post_qdq"] if y in matched else q_acts[y]
    ratios = []
    for ref, cand in zip(f_acts[y], got):
        r = np.asarray(ref, np.float64).reshape(-1, features)
        d = r - np.asarray(cand, np.float64).reshape(r.shape)
        ratios += list((d * d).sum(1) / (r * r).sum(1))
    assert scores["proj"]["row_output_sqnr_db"] == pytest.approx(-10 * np.log10(np.mean(ratios)), abs=1e-3)


def _one_node_builder(tmp_path):
    """(float model, ``build(nodes)`` writing the tiny block's QDQ model with ``nodes`` INT8, the
    calibration feeds)."""
    from edgekit.quantize.calibrate import calibration_reader
    from edgekit.quantize.cpu import ptq

    model, _, plan, _, calib = _naive_qdq(tmp_path, 8)
    cfg = QuantizeConfig(op_types=NAIVE_OPS, float_attention_core=False, float_time_embedding=False)
    built: list = []

    def build(nodes):
        built.append(tmp_path / f"one-{len(built)}.onnx")
        ptq.quantize_model(
            model, built[-1], calibration_reader(calib), nodes, cfg, plan, calibration_cache=tmp_path / "c.json"
        )
        return built[-1]

    return model, build, calib


def test_one_node_at_a_time_is_the_output_sqnr_of_each_one_node_model_over_every_feed(tmp_path):
    """``isolated_output_sqnr``: each node's figure is qdq_loss_debug's SQNR of the network output
    of the model with only that node INT8 against the float model's, over every feed."""
    ort = pytest.importorskip("onnxruntime")
    from edgekit.quantize.cpu import sensitivity

    dbg = pytest.importorskip("onnxruntime.quantization.qdq_loss_debug")
    model, build, calib = _one_node_builder(tmp_path)
    alone = sensitivity.isolated_output_sqnr(model, build, ["sin", "qk"], calib[:4], "y")
    ref = ort.InferenceSession(str(model), providers=["CPUExecutionProvider"])
    reference = [ref.run(["y"], f)[0] for f in calib[:4]]
    for node in ("sin", "qk"):
        one = ort.InferenceSession(str(build([node])), providers=["CPUExecutionProvider"])
        got = [one.run(["y"], f)[0] for f in calib[:4]]
        expected = float(dbg.compute_signal_to_quantization_noice_ratio(reference, got))
        assert alone[node] == {"isolated_output_sqnr_db": expected, "isolated_feeds": 4, "isolated_of": 4}


@pytest.mark.parametrize("order", [("proj", "ln", "qk", "sin"), ("sin", "qk", "ln", "proj")])
def test_a_race_runs_every_feed_only_for_nodes_near_the_lowest_so_far(tmp_path, order):
    """``race``: the nodes in turn, each on RACE_FEEDS feeds spread over the loop (the first and
    the last), and on the rest in the same session only where its figure there is within
    RACE_MARGIN_DB of the lowest so far, its figure then the one over every feed; the worst always
    runs every feed, and a node left on two is 10 dB clear of the worst on them. Counted per node."""
    from edgekit.quantize.cpu import sensitivity

    model, build, calib = _one_node_builder(tmp_path)
    nodes = list(order)
    full = sensitivity.isolated_output_sqnr(model, build, nodes, calib[:4], "y")
    on_two = sensitivity.isolated_output_sqnr(model, build, nodes, [calib[0], calib[3]], "y")
    counted: list[int] = []
    raced = sensitivity.isolated_output_sqnr(model, build, nodes, calib[:4], "y", each=counted.append, race=True)
    assert counted == [1, 2, 3, 4]
    lowest, near = float("inf"), []
    for n in nodes:
        lowest = min(lowest, on_two[n]["isolated_output_sqnr_db"])
        if on_two[n]["isolated_output_sqnr_db"] < lowest + sensitivity.RACE_MARGIN_DB:
            near.append(n)
    assert 0 < len(near) < len(nodes), on_two  # the tiny block has both kinds in either order
    for n in nodes:
        assert raced[n] == (full[n] if n in near else on_two[n] | {"isolated_of": 4}), n
    worst = min(on_two, key=lambda n: on_two[n]["isolated_output_sqnr_db"])
    assert raced[worst]["isolated_feeds"] == 4
    for n in set(nodes) - set(near):
        assert on_two[n]["isolated_output_sqnr_db"] >= on_two[worst]["isolated_output_sqnr_db"] + 10
