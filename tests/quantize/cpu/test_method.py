"""``--method auto``: minmax ranges first; where their all-INT8 model misses the budget, the
percentile ranges are calibrated and judged too and the search starts from the better
(``edgekit.quantize.cpu.method``). A stand-in profile: its builds are named by the method whose
ranges they used, its measure answers per method, calibration is recorded, not run."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest

from edgekit.quantize.config import QuantizeConfig
from edgekit.quantize.cpu import method as method_module
from edgekit.quantize.cpu.method import choose_method

FLOW_BUDGET = {"check_margin": 0.0}


class StandIn:
    """What choose_method uses of a FallbackProfile."""

    def __init__(self, tmp_path: Path, margins: dict[str, float], cfg: QuantizeConfig, buckets=None, extra=None):
        said: list[str] = []
        self.run = SimpleNamespace(
            cfg=cfg,
            budget=dict(FLOW_BUDGET),
            tmp=tmp_path,
            say=said.append,
            prepared=tmp_path / "prepared.onnx",
            reader=object(),
            traj=SimpleNamespace(feeds=[{}] * 5),
            call_ranges=None,
            snr_watch=lambda min_rows=None: None,
        )
        self.said = said
        self.buckets = SimpleNamespace(current=buckets)
        self.selected = ["a", "b"]
        self.cache = tmp_path / "calibration.json"
        self.writer = SimpleNamespace(cfg=cfg, bases={None: "minmax-base"})
        self.margins = margins
        self.extra = extra or {}

    def build(self, nodes):
        return Path(f"{self.run.cfg.calibrator}-all-int8.onnx")

    def measure(self, model, watch=None):
        method = model.name.split("-")[0]
        return {"check_margin": self.margins[method], **self.extra}


@pytest.fixture
def calibrated(monkeypatch):
    calls = []
    monkeypatch.setattr(
        method_module,
        "calibrate",
        lambda prepared, reader, cfg, cache, calls_, each, known=None: calls.append((cfg.method, cache)),
    )
    return calls


def test_percentile_ranges_are_judged_where_minmax_misses_and_kept_where_better(tmp_path, calibrated):
    p = StandIn(tmp_path, {"minmax": -0.23, "percentile": -0.20}, QuantizeConfig())
    (model, metrics), record = choose_method(p)
    assert calibrated == [("percentile", tmp_path / "calibration-percentile.json")]
    assert model == Path("percentile-all-int8.onnx") and metrics["check_margin"] == -0.20
    assert p.run.cfg.method == "percentile" and p.writer.cfg.method == "percentile"
    assert p.cache == tmp_path / "calibration-percentile.json"
    assert record["chosen"] == "percentile" and [t["method"] for t in record["tried"]] == ["minmax", "percentile"]
    assert record["why"] == "better: check_margin -0.2 against -0.23"
    assert any(line.startswith("all-INT8 with minmax ranges misses the budget") for line in p.said)


def test_minmax_stays_where_percentile_is_no_better(tmp_path, calibrated):
    cfg = QuantizeConfig()
    p = StandIn(tmp_path, {"minmax": -0.10, "percentile": -0.30}, cfg)
    (model, _), record = choose_method(p)
    assert model == Path("minmax-all-int8.onnx") and record["chosen"] == "minmax"
    assert p.run.cfg is cfg and p.writer.cfg is cfg and p.cache == tmp_path / "calibration.json"
    assert record["why"].startswith("no better: check_margin -0.3 against -0.1")


def test_no_second_calibration_where_minmax_holds_or_the_miss_is_at_near_ties(tmp_path, calibrated):
    held = StandIn(tmp_path, {"minmax": 0.01}, QuantizeConfig())
    (model, _), record = choose_method(held)
    assert model == Path("minmax-all-int8.onnx") and record["why"] == "minmax met the budget"
    # A token model whose lockstep flips are all at FP32's own near-ties: ranges cannot decide them.
    ties = {"lockstep_token_agreement": 0.985, "lockstep_near_ties": 0.1, "lockstep_flips_at_near_ties": 1.0}
    tied = StandIn(tmp_path, {"minmax": 0.5}, QuantizeConfig(), extra=ties)
    tied.run.budget = {"lockstep_token_agreement": 0.99}
    (_, _), record = choose_method(tied)
    assert record["chosen"] == "minmax" and "near-ties" in record["why"]
    assert calibrated == []


def test_the_users_method_and_step_buckets_are_left_alone(tmp_path, calibrated):
    assert choose_method(StandIn(tmp_path, {}, QuantizeConfig(method="minmax"))) == (None, None)
    judged, record = choose_method(StandIn(tmp_path, {}, QuantizeConfig(), buckets=object()))
    assert judged is None and record["why"] == "step buckets calibrate their own ranges"
    assert calibrated == []


def test_auto_is_the_default_and_calibrates_with_minmax_first():
    cfg = QuantizeConfig()
    assert cfg.method == "auto" and cfg.calibrator == "minmax"
    assert QuantizeConfig(method="entropy").calibrator == "entropy"


def test_the_writer_keeps_one_all_int8_base_per_calibrator(tmp_path, monkeypatch):
    # auto judges percentile's all-INT8 model and may go back to minmax's: that base is written
    # once and serves the search again (quantize_static stood in for; candidates derived from it).
    import dataclasses

    from edgekit.quantize.cpu import candidates

    quantized: list[str] = []
    monkeypatch.setattr(candidates, "quantize_model", lambda prepared, out, *a, **k: quantized.append(out.name))
    monkeypatch.setattr(candidates, "derivation_blocker", lambda *a: None)
    monkeypatch.setattr(candidates, "derive_candidate", lambda *a: True)
    names = iter(range(100))
    cfg = QuantizeConfig()
    writer = candidates.CandidateWriter(
        tmp_path / "p.onnx", cfg, None, ["a", "b"], lambda p: tmp_path / f"{p}-{next(names)}.onnx"
    )
    writer.write(["a"], [], None, None)  # minmax: its base, then the candidate derived from it
    writer.cfg = dataclasses.replace(cfg, method="percentile")
    writer.write(["a", "b"], [], None, None)  # percentile: a base of its own
    writer.cfg = cfg
    writer.write(["b"], [], None, None)  # back to minmax: its base again, nothing quantized
    assert quantized == ["all-int8-1.onnx", "all-int8-3.onnx"]
    assert sorted(k[0] for k in writer.bases) == ["minmax", "percentile"] and writer.derived == 3


@pytest.mark.parametrize(
    ("cfg", "buckets", "why"),
    [
        (QuantizeConfig(), False, None),
        (QuantizeConfig(profile="trt"), False, None),
        (QuantizeConfig(method="percentile"), False, "--method percentile"),
        (QuantizeConfig(), True, "step buckets calibrate their own ranges"),
        (QuantizeConfig(fallback=False), False, "--no-fallback: no search"),
    ],
)
def test_one_rule_says_when_auto_may_judge_a_second_set_of_ranges(cfg, buckets, why):
    from edgekit.quantize.cpu.method import alternative_skipped

    assert alternative_skipped(cfg, buckets) == why


def test_the_plan_hears_of_the_second_set_of_ranges_from_the_profile_that_runs_it():
    """The plan's method_alternative came from its own copy of choose_method's conditions, which
    also required cpu_arithmetic: a trt run (the same hooks, the same choice) was not told of the
    extra calibration and candidate. Now each profile's hooks say it (``plan_extras``)."""
    from edgekit.quantize.cpu.fallback import FallbackProfile
    from edgekit.quantize.cpu.form import FORM_EXTRA
    from edgekit.quantize.hooks import PlanExtras
    from edgekit.quantize.qnn.profile import QnnProfile

    def extras(cls, **kw):
        profile = cls.__new__(cls)  # plan_extras reads only the run's config
        profile.run = SimpleNamespace(cfg=QuantizeConfig(**kw))
        return profile.plan_extras()

    # auto keeps each tensor's largest |x| as the calibration decodes run: percentile needs no pass
    assert extras(FallbackProfile) == PlanExtras(form=FORM_EXTRA, method_alternative=True, percentile_pass=False)
    assert extras(FallbackProfile, profile="trt") == PlanExtras(form=0, method_alternative=True, percentile_pass=False)
    assert extras(FallbackProfile, method="minmax") == PlanExtras(form=FORM_EXTRA, method_alternative=False)
    assert extras(FallbackProfile, step_buckets=4) == PlanExtras(form=FORM_EXTRA, method_alternative=False)
    assert extras(FallbackProfile, fallback=False) == PlanExtras()
    assert extras(QnnProfile, profile="qnn") == PlanExtras()


def test_a_stopped_candidate_is_compared_on_the_rows_both_decoded(tmp_path, calibrated):
    """minmax's held-out decode stopped after 3 rows (early_stop); percentile's decoded all 8, worse
    over all of them but better on the 3 both decoded: compared there, and the watch that judged
    percentile was asked for at least minmax's 3 rows."""
    p = StandIn(tmp_path, {"minmax": -0.5, "percentile": -0.6}, QuantizeConfig())
    p.run.budget = {"snr_db": 30.0}
    asked: list = []
    p.run.snr_watch = lambda min_rows=None: asked.append(min_rows) or f"watch-{len(asked)}"
    stopped = {"snr_db": 12.0, "rows_judged": 3, "stopped_early": "after 3 of 8", "row_power": [[10.0, 1.0]] * 3}
    full = {"snr_db": 11.0, "row_power": [[10.0, 0.5]] * 3 + [[10.0, 9.0]] * 5}
    answers = {"minmax": stopped, "percentile": full}
    p.measure = lambda model, watch=None: answers[model.name.split("-")[0]] | {"watch": watch}
    (model, metrics), record = choose_method(p)
    assert asked == [None, 3] and metrics["watch"] == "watch-2"
    assert model == Path("percentile-all-int8.onnx") and record["chosen"] == "percentile"
    assert record["why"] == "better: snr_db 13.01 against 10 on the 3 held-out rows both decoded (one stopped early)"
    assert record["tried"][0]["rows_judged"] == 3 and record["tried"][0]["stopped_early"] == "after 3 of 8"
    assert "rows_judged" not in record["tried"][1]


@pytest.mark.parametrize("kept", [True, False])
def test_the_percentile_ranges_say_whether_a_pass_over_the_calls_made_them(tmp_path, calibrated, monkeypatch, kept):
    """Where the calibration decodes kept each tensor's largest |x| (``calibrator.tails_suffice``)
    the percentile ranges are cut from them and the run says so; else one histogram pass."""
    monkeypatch.setattr(method_module, "tails_suffice", lambda known, percentile: kept)
    p = StandIn(tmp_path, {"minmax": -0.23, "percentile": -0.20}, QuantizeConfig())
    p.run.call_ranges = SimpleNamespace(signed=object())
    _, record = choose_method(p)
    assert calibrated == [("percentile", tmp_path / "calibration-percentile.json")]
    said = [line for line in p.said if "(no pass over the calls)" in line]
    if kept:
        assert record["alternative_ranges_from"] == "each tensor's largest |x|, kept as the calibration decodes ran"
        assert said
    else:
        assert record["alternative_ranges_from"] == "a pass over the recorded calls" and not said
