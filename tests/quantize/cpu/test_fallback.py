"""How the cpu/trt profile opens its INT8 candidates on ORT: as deployed for the budget, and
spinning inside runs only where sessions are timed side by side (TIMED_SPIN, quantize/stage.py)."""

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


@pytest.mark.parametrize(
    "loads,wo_ms,chosen,warned",
    [
        ((0.3,), [80], "weight-only", False),  # surely faster, by more than FORM_MARGIN: measured, kept
        ((0.3,), [99], "float", False),  # surely faster, by less than FORM_MARGIN: not worth the noise
        ((3.1,), [80], "float", True),  # a busy host, timed again: FP32 fallbacks, the safe form, said once
        ((0.3,), [90, 110, 95, 105, 100], "float", True),  # the spread is wider than the difference
    ],
)
def test_the_fallback_form_is_weight_only_only_where_surely_faster(loads, wo_ms, chosen, warned):
    from edgekit.probes.speed import decide
    from tests.fakes.host import StandInHost

    host = StandInHost(loads=loads)
    fns = {"float": host.call("float", [100]), "weight-only": host.call("weight-only", wo_ms)}
    decision = decide(fns, 5, pair=lambda t: ("weight-only", "float"), warmup=0, probe=host.probe)
    warnings, judged = [], []
    profile = FallbackProfile.__new__(FallbackProfile)
    profile.run = SimpleNamespace(warn=warnings.append, judge=lambda metrics: (True, ["ok"]))
    profile.measure = lambda model: judged.append(model) or {"snr_db": 40.0}
    outcome = SimpleNamespace(metrics=None, checks=None)
    form = profile._form(decision, "wo.onnx", outcome)
    assert form["chosen"] == chosen and form["verdict"] == decision.verdict and form["timing"]["timings"]
    assert judged == (["wo.onnx"] if chosen == "weight-only" else [])  # the budget is asked only of a win
    assert len(warnings) == (1 if warned else 0)
    if warned:
        assert "within noise after 3 rounds" in warnings[0] and "kept FP32 fallbacks" in warnings[0]


@pytest.mark.parametrize("runtime", ["ort", "openvino"])
def test_the_fallback_form_is_timed_on_the_runtime_that_decodes_the_budget(runtime):
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
    profile.build = lambda nodes, weight_only_fallback=None: "wo.onnx"
    profile.measure = lambda model: {}
    profile.budget_runtime = lambda model, spin=True, bucket=False: opened.append((model, spin, bucket)) or Stand(model)
    outcome = SimpleNamespace(quantized=["n1"], metrics=None, checks=None)
    form = profile.choose_fallback_form("fp.onnx", outcome)
    assert opened == [("fp.onnx", False, False), ("wo.onnx", False, False)]  # side by side: no spin after a run
    assert form["measured_on"] == f"{runtime} (this host)" and form["chosen"] in ("float", "weight-only")
