"""How the cpu/trt profile opens its INT8 candidates on ORT: as deployed for the budget, and
spinning inside runs only where sessions are timed side by side (TIMED_SPIN, quantize/speed.py),
and the fallback form's two models timed there and weighed."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

from edgekit.quantize.cpu.fallback import FallbackProfile
from edgekit.quantize.cpu.search import BudgetOutcome

pytest.importorskip("onnxruntime")


class _Plan:
    """A stand-in ``GraphPlan``: ``flops`` per node name (every node a weighted op)."""

    def __init__(self, flops: dict[str, int]):
        self.flops = flops
        self.nodes = [SimpleNamespace(name=n, label=f"L-{n}") for n in flops]

    def matmul_flops(self, names=None, ops=()):
        return sum(f for n, f in self.flops.items() if names is None or n in names)


def _profile(threads: int = 1) -> FallbackProfile:
    profile = FallbackProfile.__new__(FallbackProfile)  # only budget_runtime is used: it reads run.cfg
    profile.run = SimpleNamespace(cfg=SimpleNamespace(runtime="ort", threads=threads))
    return profile


@pytest.mark.parametrize(
    ("kwargs", "between", "arena"),
    [
        ({}, True, False),  # one graph, as `edgekit run` opens it
        ({"spin": False}, False, False),  # timed beside another session: no spin left after a run
        ({"bucket": True}, False, True),  # bucket sessions take turns: one arena, no spin after a run
        ({"spin": False, "bucket": True}, False, True),
    ],
)
def test_candidate_sessions_spin_inside_runs_and_between_them_only_alone(tiny_model, kwargs, between, arena):
    with _profile().budget_runtime(tiny_model, **kwargs) as rt:
        assert rt.options.allow_spinning  # a run's own parallel sections never pay a wake-up
        assert rt.options.spin_between_runs is between
        assert rt.options.shared_arena is arena
        assert rt.options.intra_op_threads == 1


@pytest.mark.slow
def test_quantize_times_int8_against_fp32_with_spin_inside_runs_only(masked, monkeypatch):
    from edgekit.quantize import QuantizeConfig, quantize_bundle, speed, stage
    from edgekit.runtimes.ort import OrtOptions, OrtRuntime

    fp32_options = []

    spies = []

    class Spy(OrtRuntime):
        def __init__(self, path, options=OrtOptions()):
            fp32_options.append(options)
            self.calls = 0
            spies.append(self)
            super().__init__(path, options)

        def run(self, feeds):
            self.calls += 1
            return super().run(feeds)

    candidates = []
    real = FallbackProfile.budget_runtime
    monkeypatch.setattr(stage, "OrtRuntime", Spy)
    monkeypatch.setattr(speed, "OrtRuntime", Spy)
    monkeypatch.setattr(
        FallbackProfile, "budget_runtime", lambda self, model, **kw: (candidates.append(kw), real(self, model, **kw))[1]
    )
    s = quantize_bundle(masked, QuantizeConfig(calib_samples=4, eval_samples=4, threads=1))
    assert s["speed"]["measured"]
    # how it was timed is recorded in the manifest: samples, spread, loads, cores, CPU class, verdict
    from edgekit.bundle import Bundle
    from edgekit.vocabulary import SPEED_VERDICTS

    recorded = Bundle.load(masked).quantization.speed
    assert recorded.verdict in SPEED_VERDICTS and recorded.timing["rounds"] >= 1
    # SPEED_ROUNDS samples each, or MIN_SAMPLES where the difference was already clear after them
    # (``probes.speed.measure_round``: which one depends on this host's speed and load)
    from edgekit.probes.speed import MIN_SAMPLES

    counts = {len(t["samples_ms"]) for t in recorded.timing["timings"].values()}
    assert len(counts) == 1 and counts <= {MIN_SAMPLES, speed.SPEED_ROUNDS}
    assert all(t["cores"] >= 1 for t in recorded.timing["timings"].values())
    timed = [o for o in fp32_options if not o.spin_between_runs]
    assert len(timed) == 1 and timed[0].allow_spinning  # the FP32 side of the INT8-vs-FP32 timing
    # its warm-up is one recorded call, not a whole decode: then the timed decodes, each K calls
    from edgekit.quantize.scratch import calls_per_decode

    b = Bundle.load(masked)
    per_decode = calls_per_decode(b.kind, b.meta, b.decode_defaults, {})
    (spy,) = [x for x in spies if not x.options.spin_between_runs]
    timed_calls = spy.calls - 1  # a busy host may time more rounds: whole decodes all the same
    assert per_decode > 1 and timed_calls % per_decode == 0
    assert timed_calls >= len(recorded.timing["timings"]["fp32"]["samples_ms"]) * per_decode
    assert candidates[-1] == {"spin": False, "bucket": False}  # its INT8 side, opened last


def _one_matmul(path, weight_only: bool):
    """x float[1, 64] -> MatMul(W[64, 64]) -> y: W in FP32, or INT8 per-channel behind a DequantizeLinear."""
    import numpy as np
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    w = np.random.default_rng(0).standard_normal((64, 64)).astype(np.float32)
    if weight_only:
        scale = (np.abs(w).max(axis=0) / 127).astype(np.float32)
        inits = [
            numpy_helper.from_array(np.round(w / scale).astype(np.int8), "w_q"),
            numpy_helper.from_array(scale, "w_scale"),
        ]
        nodes = [helper.make_node("DequantizeLinear", ["w_q", "w_scale"], ["w"], axis=1)]
    else:
        inits, nodes = [numpy_helper.from_array(w, "w")], []
    graph = helper.make_graph(
        [*nodes, helper.make_node("MatMul", ["x", "w"], ["y"], name="fc")],
        "one_matmul",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 64])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 64])],
        inits,
    )
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(path))
    return path


@pytest.mark.parametrize("runtime", ["ort", "openvino"])
def test_the_fallback_form_is_timed_on_the_runtime_that_decodes_the_budget(runtime, tmp_path):
    """OpenVINO runs weight-only layers as int8 kernels (activations quantized on the fly) and ORT
    as f32 GEMMs that dequantize their weight: which form is faster is the budget runtime's answer."""
    opened = []

    class Stand:
        def __init__(self, model):
            self.model = model

        def run(self, feed):
            return {}

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            return None

    profile = FallbackProfile.__new__(FallbackProfile)
    profile.run = SimpleNamespace(
        cfg=SimpleNamespace(runtime=runtime, threads=1, max_fallback=None),
        traj=SimpleNamespace(feeds=[{"x": 0}]),
        plan=_Plan({"n0": 10, "n1": 90}),
        warn=lambda line: None,
        say=lambda line: None,
        judge=lambda metrics: (True, ["ok"]),
    )
    fp, wo = _one_matmul(tmp_path / "fp.onnx", weight_only=False), _one_matmul(tmp_path / "wo.onnx", weight_only=True)
    profile.build = lambda nodes, weight_only_fallback=None: wo
    profile.measure = lambda model: {}
    profile.budget_runtime = lambda model, spin=True, bucket=False: opened.append((model, spin, bucket)) or Stand(model)
    outcome = BudgetOutcome(True, {}, [], ["n1"], fallback=[{"node": "n0"}])
    form = profile.choose_fallback_form(fp, outcome)
    assert opened == [(fp, False, False), (wo, False, False)]  # side by side: no spin after a run
    assert form["measured_on"] == f"{runtime} (this host)" and form["chosen"] in ("float", "weight-only")
    # each form's weights, counted from its graph: [64, 64] f32, against [64, 64] int8 + 64 f32 scales
    assert form["weight_bytes"] == {"float": 64 * 64 * 4, "weight-only": 64 * 64 + 64 * 4}


@pytest.mark.parametrize(("max_fallback", "chosen", "extra"), [(None, "weight-only", ["n2"]), (1, "float", [])])
def test_the_fallback_form_adds_the_search_s_next_ranked_layer_weight_only(
    tmp_path, monkeypatch, max_fallback, chosen, extra
):
    """Weight-only misses the budget with the search's set; with its next ranked layer it holds
    (stand-in budget and timing: a tie, and smaller): the form keeps it, unless --max-fallback is
    already spent by the search."""
    from edgekit.quantize.cpu import form as forms
    from tests.quantize.cpu.test_form import _decision

    built = {}

    def build(nodes, weight_only_fallback=None):
        assert weight_only_fallback is True  # every candidate of the form is weight-only
        path = tmp_path / f"wo-{len(built)}.onnx"
        built[path] = list(nodes)
        return _one_matmul(path, weight_only=True)

    said = []
    profile = FallbackProfile.__new__(FallbackProfile)
    profile.run = SimpleNamespace(
        cfg=SimpleNamespace(runtime="openvino", threads=1, max_fallback=max_fallback),
        traj=SimpleNamespace(feeds=[{"x": 0}]),
        plan=_Plan({"n0": 25, "n1": 25, "n2": 25, "n3": 25}),
        warn=lambda line: None,
        say=said.append,
        judge=lambda metrics: (metrics["holds"], []),
    )
    profile.build = build
    profile.measure = lambda model: {"holds": "n2" not in built[model]}
    timed = []

    class Stand:
        def __enter__(self):
            return self

        def __exit__(self, *exc):
            return None

    profile.budget_runtime = lambda model, spin=True, bucket=False: Stand()
    monkeypatch.setattr(forms, "time_forms", lambda fp, wo, feed, say: timed.append(1) or _decision((0.3,), [99]))
    fp = _one_matmul(tmp_path / "fp.onnx", weight_only=False)
    outcome = BudgetOutcome(True, {}, [], ["n1", "n2", "n3"], fallback=[{"node": "n0"}], next_up=["n2", "n3"])
    form = profile.choose_fallback_form(fp, outcome)
    assert form["chosen"] == chosen and [f["node"] for f in outcome.fallback] == ["n0", *extra]
    assert outcome.quantized == [n for n in ["n1", "n2", "n3"] if n not in extra]
    if extra:
        assert list(built.values()) == [["n1", "n2", "n3"], ["n1", "n3"]] and len(timed) == 2
        assert form["model"] == list(built)[1] and form["wider"]["tried"][0]["labels"] == ["L-n2"]
        assert any("trying weight-only with 1 more: L-n2" in line for line in said)
    else:
        assert len(built) == 1 and "wider" not in form and "missed the budget" in form["why"]


@pytest.mark.slow  # quantizes the masked demo (under a minute)
def test_quantize_keeps_weight_only_with_one_more_fallback_where_that_holds_the_budget(quant_bundles, monkeypatch):
    """End to end on the masked demo, with the budget's verdicts and the form's timing standing in
    (deterministic on any host; the graphs, the candidates and the record are real): the search
    stops at one FP32 fallback, weight-only with it misses the budget, with the next ranked layer
    it holds and ties with FP32-S: the int8 model has both layers weight-only, and the manifest's
    fallback list names both."""
    import onnx

    from edgekit.bundle import Bundle
    from edgekit.quantize import QuantizeConfig, quantize_bundle
    from edgekit.quantize.config import BUDGET_RULES
    from edgekit.quantize.cpu import form as forms
    from tests.quantize.cpu.test_form import _decision

    built: dict[str, tuple[int, bool]] = {}
    real_build, real_measure = FallbackProfile.build, FallbackProfile.measure

    def build(self, nodes, weight_only_fallback=None):
        path = real_build(self, nodes, weight_only_fallback)
        built[str(path)] = (len(self.selected) - len(nodes), bool(weight_only_fallback))
        return path

    def measure(self, model, watch=None):  # FP32 fallbacks hold the budget from one on, weight-only ones from two
        metrics = real_measure(self, model)
        out, wo = built.get(str(model), (0, False))
        holds = out >= (2 if wo else 1)
        for key, limit in self.run.budget.items():
            op = BUDGET_RULES[key][0]
            metrics[key] = limit if holds else limit + (-1.0 if op == ">=" else 1.0)
        return metrics

    monkeypatch.setattr(FallbackProfile, "build", build)
    monkeypatch.setattr(FallbackProfile, "measure", measure)
    monkeypatch.setattr(forms, "time_forms", lambda fp, wo, feed, say: _decision((0.3,), [99]))
    said = []
    s = quantize_bundle(quant_bundles["masked"], QuantizeConfig(calib_samples=2, eval_samples=2), progress=said.append)
    form = s["fallback_form"]
    assert s["passed"] and form["chosen"] == "weight-only" and form["budget"] == "missed", form
    assert [(t["budget"], len(t["extra"])) for t in form["wider"]["tried"]] == [("met", 1)]
    names = [f["node"] for f in s["fallback"]]
    assert len(names) == 2 and "added by the fallback form" in s["fallback"][1]["reason"]
    assert {r["node"] for r in s["selection"]["weight_only"]} >= set(names)
    assert not set(names) & {r["node"] for r in s["selection"]["int8"]}
    assert any("trying weight-only with 1 more" in line for line in said)
    assert "more candidates may follow for the fallbacks' form" in " ".join(said)
    # the bundle says the same: its manifest's fallbacks, and both layers weight-only in the int8 graph
    bundle = Bundle.load(quant_bundles["masked"])
    assert [f["node"] for f in bundle.manifest["quantization"]["fallback"]] == names
    model = onnx.load(str(bundle.path_of("int8")))
    producer = {o: n for n in model.graph.node for o in n.output}
    for node in (n for n in model.graph.node if n.name in names):
        assert producer[node.input[1]].op_type == "DequantizeLinear", node.name  # an int8 weight
        act = producer.get(node.input[0])
        assert act is None or act.op_type != "DequantizeLinear", node.name  # a float activation


@pytest.mark.parametrize(("max_fallback", "fallbacks"), [(None, 3), (5, 5)])
def test_a_large_models_search_stops_when_fallbacks_stop_helping_unless_the_user_bounds_it(
    quant_bundles, monkeypatch, max_fallback, fallbacks
):
    """The masked demo standing in for a model over LARGE_BYTES, the budget's verdicts standing in
    for an out-of-reach budget (every candidate equally short): the search stops after
    PATIENCE_LARGE fallbacks and says why, in the summary and the progress; with --max-fallback
    the user's bound holds instead."""
    from edgekit.quantize import QuantizeConfig, quantize_bundle
    from edgekit.quantize.config import BUDGET_RULES
    from edgekit.quantize.cpu import fallback, sensitivity
    from edgekit.quantize.cpu import form as forms
    from tests.quantize.cpu.test_form import _decision

    real_measure = FallbackProfile.measure

    def measure(self, model, watch=None):
        metrics = real_measure(self, model, watch)
        for key, limit in self.run.budget.items():
            metrics[key] = limit + (-0.01 if BUDGET_RULES[key][0] == ">=" else 0.01)
        return metrics

    monkeypatch.setattr(fallback, "LARGE_BYTES", 0)
    monkeypatch.setattr(sensitivity, "RACE_MARGIN_DB", 1e-9)
    monkeypatch.setattr(FallbackProfile, "measure", measure)
    monkeypatch.setattr(forms, "time_forms", lambda fp, wo, feed, say: _decision((0.3,), [99]))
    said: list[str] = []
    cfg = QuantizeConfig(calib_samples=2, eval_samples=2, max_fallback=max_fallback)
    s = quantize_bundle(quant_bundles["masked"], cfg, progress=said.append)
    assert not s["passed"]
    assert len(s["budget"]["history"]) == fallbacks + 1
    # Its one-node models raced (sensitivity.RACE_FEEDS feeds first; with no margin here, only a
    # node that is the lowest so far runs the rest): the worst on every feed, others on two.
    alone = {n: v for n, v in s["sensitivity"].items() if "isolated_feeds" in v}
    worst = min(alone, key=lambda n: alone[n]["isolated_output_sqnr_db"])
    every = alone[worst]["isolated_feeds"]
    assert every > 2 and {v["isolated_feeds"] for v in alone.values()} == {2, every}
    stopped = s["budget"].get("search_stopped")
    if max_fallback is None:
        assert stopped and "3 fallbacks in a row" in stopped
        assert any(line.startswith("search stopped:") for line in said)
    else:
        assert stopped is None


def test_fallbacks_too_small_to_matter_keep_fp32_without_timing_or_decoding_weight_only(tmp_path):
    """A fallback with 0.3 % of the weighted FLOPs whose weight-only form saves well under 1 % of
    the weights (Sana-600M's caption projection): no session is opened, no candidate decoded, and
    the record says FP32 was kept untimed, and why."""
    profile = FallbackProfile.__new__(FallbackProfile)
    said = []
    profile.run = SimpleNamespace(
        cfg=SimpleNamespace(runtime="ort", threads=1, max_fallback=None),
        traj=SimpleNamespace(feeds=[{"x": 0}]),
        plan=_Plan({"n0": 3, "n1": 997}),
        say=said.append,
    )
    fp, wo = _one_matmul(tmp_path / "fp.onnx", weight_only=False), _one_matmul(tmp_path / "wo.onnx", weight_only=True)
    onnx = pytest.importorskip("onnx")
    for path in (fp, wo):  # each form: the small layer beside 4 MiB of other weights
        graph = onnx.load(str(path))
        graph.graph.initializer.append(onnx.numpy_helper.from_array(np.zeros(1 << 20, np.float32), "other"))
        onnx.save(graph, str(path))
    profile.build = lambda nodes, weight_only_fallback=None: wo
    profile.measure = lambda model: pytest.fail("weight-only decoded")
    profile.budget_runtime = lambda *a, **k: pytest.fail("a form timed")
    outcome = BudgetOutcome(True, {}, [], ["n1"], fallback=[{"node": "n0"}])
    form = profile.choose_fallback_form(fp, outcome)
    assert form["chosen"] == "float" and form["verdict"] == "not timed", form
    assert "0.3% of the weighted FLOPs" in form["why"] and "kept without timing" in form["why"]
    assert form["weight_bytes"]["float"] - form["weight_bytes"]["weight-only"] == 64 * 64 * 3 - 64 * 4
    assert said == [f"fallback form: {form['why']}"]


@pytest.mark.parametrize(
    ("share", "saved", "timed"),
    [(0.003, 0.002, False), (0.02, 0.002, True), (0.003, 0.05, True), (None, 0.0, True), (0.0099, 0.0099, False)],
)
def test_only_fallbacks_under_one_percent_of_flops_and_of_weights_skip_the_form(share, saved, timed):
    from edgekit.quantize.cpu.form import not_worth_timing

    sizes = {"float": 1_000_000, "weight-only": 1_000_000 - int(saved * 1_000_000)}
    assert (not_worth_timing(share, sizes) is None) is timed


@pytest.mark.parametrize("method, max_fallback, watched", [("minmax", None, True), ("minmax", 0, False)])
def test_a_named_methods_all_int8_candidate_stops_early_as_autos_do(
    tiny_bundles, tmp_path, monkeypatch, method, max_fallback, watched
):
    """With --method named, the all-INT8 candidate is judged with the early-stop watch too (a flow
    candidate that cannot reach the SNR budget stops after 4 rows, the search ranks next); with no
    search to follow (--max-fallback 0, --no-fallback) its metrics are the verdict: every row."""
    import shutil

    from edgekit.quantize import QuantizeConfig, quantize_bundle

    real_measure = FallbackProfile.measure
    watches: list = []
    judged: list = []

    def measure(self, model, watch=None):
        watches.append(watch)
        judged.append(real_measure(self, model, watch))
        return judged[-1]

    monkeypatch.setattr(FallbackProfile, "measure", measure)
    flow = shutil.copytree(tiny_bundles["flow"], tmp_path / "flow")
    out_of_reach = {"snr_db": 200.0}
    cfg = QuantizeConfig(method=method, calib_samples=2, eval_samples=6, max_fallback=max_fallback, budget=out_of_reach)
    s = quantize_bundle(flow, cfg)
    assert (watches[0] is not None) == watched
    assert judged[0].get("rows_judged", 6) == (4 if watched else 6)  # stopped after 4 of 6 rows
    assert not s["budget"]["history"][0]["passed"]
