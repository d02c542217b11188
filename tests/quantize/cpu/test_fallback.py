"""How the cpu/trt profile opens its INT8 candidates on ORT: as deployed for the budget, and
spinning inside runs only where sessions are timed side by side (TIMED_SPIN, quantize/stage.py);
and the form its budget fallbacks take (``_form``, on stand-in timings): weight-only, the smaller,
unless it is surely slower or misses the budget."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from edgekit.quantize.cpu.fallback import FallbackProfile

pytest.importorskip("onnxruntime")


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
    from edgekit.quantize import QuantizeConfig, quantize_bundle, stage
    from edgekit.runtimes.ort import OrtOptions, OrtRuntime

    fp32_options = []

    class Spy(OrtRuntime):
        def __init__(self, path, options=OrtOptions()):
            fp32_options.append(options)
            super().__init__(path, options)

    candidates = []
    real = FallbackProfile.budget_runtime
    monkeypatch.setattr(stage, "OrtRuntime", Spy)
    monkeypatch.setattr(
        FallbackProfile, "budget_runtime", lambda self, model, **kw: (candidates.append(kw), real(self, model, **kw))[1]
    )
    s = quantize_bundle(masked, QuantizeConfig(calib_samples=4, eval_samples=4, threads=1))
    assert s["speed"]["measured"]
    # how it was timed is recorded in the manifest: samples, spread, loads, cores, CPU class, verdict
    from edgekit.bundle import Bundle
    from edgekit.vocabulary import SPEED_VERDICTS

    speed = Bundle.load(masked).quantization.speed
    assert speed.verdict in SPEED_VERDICTS and speed.timing["rounds"] >= 1
    assert all(len(t["samples_ms"]) == stage.SPEED_ROUNDS and t["cores"] >= 1 for t in speed.timing["timings"].values())
    timed = [o for o in fp32_options if not o.spin_between_runs]
    assert len(timed) == 1 and timed[0].allow_spinning  # the FP32 side of the INT8-vs-FP32 timing
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


def _decision(loads, wo_ms):
    """Weight-only against float fallbacks on a stand-in host (float: 100 ms a forward)."""
    from edgekit.probes.speed import decide
    from tests.fakes.host import StandInHost

    host = StandInHost(loads=loads)
    fns = {"float": host.call("float", [100]), "weight-only": host.call("weight-only", wo_ms)}
    return decide(fns, 5, pair=lambda t: ("weight-only", "float"), warmup=0, probe=host.probe)


def _judged_profile(passes: bool = True):
    """A profile whose budget ``passes`` (or not) on whatever is measured; (profile, warnings, measured)."""
    warnings, measured = [], []
    profile = FallbackProfile.__new__(FallbackProfile)
    profile.run = SimpleNamespace(
        warn=warnings.append, judge=lambda metrics: (passes, ["ok" if passes else "snr_db 12.0 < 20"])
    )
    profile.measure = lambda model: measured.append(model) or {"snr_db": 40.0 if passes else 12.0}
    return profile, warnings, measured


SIZES = {"float": 44 << 20, "weight-only": 11 << 20}  # four [2816, 1024] fallbacks, FP32 and INT8


@pytest.mark.parametrize(
    "loads,wo_ms,chosen,why,warned",
    [
        # surely faster, by more than FORM_MARGIN: the speed win, measured against the budget, kept
        ((0.3,), [80], "weight-only", "ran faster here and kept the budget", None),
        # surely faster, by less than FORM_MARGIN: as fast, and smaller: measured, kept
        ((0.3,), [99], "weight-only", "as fast within 3% (weight-only 0.99x", None),
        # a busy host, timed again: the timing cannot tell, the smaller form is kept, said once
        ((3.1,), [80], "weight-only", "as fast within noise (load 3.1 on 2 cores", "kept weight-only fallbacks"),
        # the spread is wider than the difference: as fast within noise
        ((0.3,), [90, 110, 95, 105, 100], "weight-only", "as fast within noise (spread", "kept weight-only"),
        # surely slower: FP32 fallbacks, and the budget is not asked
        ((0.3,), [130], "float", "FP32 fallbacks ran faster here (weight-only 1.30x", None),
    ],
)
def test_the_fallback_form_is_weight_only_unless_surely_slower(loads, wo_ms, chosen, why, warned):
    decision = _decision(loads, wo_ms)
    profile, warnings, measured = _judged_profile()
    outcome = SimpleNamespace(metrics=None, checks=None)
    form = profile._form(decision, "wo.onnx", outcome, sizes=SIZES)
    assert form["chosen"] == chosen and form["verdict"] == decision.verdict and form["timing"]["timings"]
    assert why in form["why"] and form["weight_bytes"] == SIZES
    # the budget is asked of weight-only wherever it is kept, and never where it is surely slower
    assert measured == (["wo.onnx"] if chosen == "weight-only" else [])
    if chosen == "weight-only":
        assert form["model"] == "wo.onnx" and (outcome.metrics, outcome.checks) == ({"snr_db": 40.0}, ["ok"])
    else:
        assert "model" not in form and outcome.metrics is None
    if "as fast" in why:
        assert "33.0 MiB smaller; kept the budget" in form["why"]
    assert len(warnings) == (0 if warned is None else 1)
    if warned:
        assert "within noise after 3 rounds" in warnings[0] and warned in warnings[0] and "\n" not in warnings[0]


@pytest.mark.parametrize(
    "loads,wo_ms,warned",
    [
        ((3.1,), [80], True),  # within noise (a busy host)
        ((0.3,), [90, 110, 95, 105, 100], True),  # within noise (the spread)
        ((0.3,), [99], False),  # faster by less than FORM_MARGIN
        ((0.3,), [80], False),  # surely faster: the speed win needs the budget too
    ],
)
def test_a_weight_only_form_that_misses_the_budget_leaves_the_fallbacks_fp32(loads, wo_ms, warned):
    decision = _decision(loads, wo_ms)
    profile, warnings, measured = _judged_profile(passes=False)
    outcome = SimpleNamespace(metrics={"snr_db": 30.0}, checks=["fp32 fallbacks ok"])
    form = profile._form(decision, "wo.onnx", outcome, sizes=SIZES)
    assert form["chosen"] == "float" and "model" not in form and measured == ["wo.onnx"]
    assert "missed the budget" in form["why"]
    assert (outcome.metrics, outcome.checks) == ({"snr_db": 30.0}, ["fp32 fallbacks ok"])  # the FP32 form's
    assert len(warnings) == (1 if warned else 0)
    if warned:
        assert warnings[0].endswith("kept FP32 fallbacks (weight-only missed the budget)")


def test_a_tie_with_nothing_to_save_keeps_the_fp32_fallbacks_unmeasured():
    profile, warnings, measured = _judged_profile()
    outcome = SimpleNamespace(metrics=None, checks=None)
    form = profile._form(_decision((0.3,), [99]), "wo.onnx", outcome, sizes={"float": 1000, "weight-only": 1000})
    assert form["chosen"] == "float" and measured == [] and "no smaller" in form["why"]


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
        cfg=SimpleNamespace(runtime=runtime, threads=1),
        traj=SimpleNamespace(feeds=[{"x": 0}]),
        warn=lambda line: None,
        say=lambda line: None,
        judge=lambda metrics: (True, ["ok"]),
    )
    fp, wo = _one_matmul(tmp_path / "fp.onnx", weight_only=False), _one_matmul(tmp_path / "wo.onnx", weight_only=True)
    profile.build = lambda nodes, weight_only_fallback=None: wo
    profile.measure = lambda model: {}
    profile.budget_runtime = lambda model, spin=True, bucket=False: opened.append((model, spin, bucket)) or Stand(model)
    outcome = SimpleNamespace(quantized=["n1"], metrics=None, checks=None)
    form = profile.choose_fallback_form(fp, outcome)
    assert opened == [(fp, False, False), (wo, False, False)]  # side by side: no spin after a run
    assert form["measured_on"] == f"{runtime} (this host)" and form["chosen"] in ("float", "weight-only")
    # each form's weights, counted from its graph: [64, 64] f32, against [64, 64] int8 + 64 f32 scales
    assert form["weight_bytes"] == {"float": 64 * 64 * 4, "weight-only": 64 * 64 + 64 * 4}
