"""The short summary `edgekit demo` prints (issue #15): four rows, one NAR-vs-AR line with one
crossover statement, "not defined" shown one way."""

from __future__ import annotations

import math

from edgekit.profile.table import SUMMARY_ROWS, crossover_statement, nar_vs_ar_line, summary_table


def test_one_crossover_statement_even_when_the_fit_disagrees_with_the_measurement():
    # The run that printed both "NAR faster at every measured length" and "the fitted costs never
    # make NAR overtake AR": the measurement wins, the fit is not quoted.
    cross = {
        "available": True,
        "measured": {"n": None, "bound": "< 32 (NAR faster at every measured length)"},
        "model": {"n": None, "reason": "the fitted costs never make NAR overtake AR as N grows"},
    }
    assert crossover_statement(cross) == "measured crossover N < 32 (NAR faster at every measured length)"
    cross["measured"] = {"n": 36.6, "bound": None}
    assert crossover_statement(cross) == "measured crossover N ~ 37 tokens"
    cross["measured"] = {"n": None, "bound": None}
    cross["model"] = {"n": 70.2, "extrapolated": True}
    assert crossover_statement(cross) == "fitted crossover N ~ 70 tokens (extrapolated)"


def test_nar_vs_ar_line_quotes_every_measured_speedup():
    doc = {
        "compare_ar": {
            "length": 64,
            "speedups": [{"nar": "ort fp32", "speedup": 1.357}, {"nar": "ort int8", "speedup": None, "reason": "x"}],
            "crossover": {"available": True, "measured": {"n": 37.2}, "model": {}},
        }
    }
    assert nar_vs_ar_line(doc) == "NAR vs AR: 1.36x (ort fp32) at L = 64; measured crossover N ~ 37 tokens"
    assert nar_vs_ar_line({"compare_ar": None}) is None


def test_summary_table_is_the_four_quoted_rows(profile_doc):
    columns, rows = summary_table(profile_doc)
    assert [r[0] for r in rows] == list(SUMMARY_ROWS) and columns == ["metric", "ort fp32", "ort int8", "AR ort fp32"]


def test_not_defined_is_one_rendering_in_tables():
    from edgekit.check.render import check_num
    from edgekit.output import NOT_DEFINED, _fmt, jsonable

    assert _fmt(float("nan")) == _fmt(None) == check_num(float("nan")) == check_num(None) == NOT_DEFINED == "—"
    assert jsonable({"nll": math.nan}) == {"nll": None}


def test_the_demo_warms_up_and_leaves_no_sweep_files_next_to_the_report(profile_doc, tiny, tmp_path, monkeypatch):
    """It measured 5 decodes with no warm-up (then warned about the CV) and kept its sweep
    exports in report/.sweep (6.5 MB of hidden ONNX files next to the HTML)."""
    from edgekit.profile import demo

    seen = {}

    def fake_profile(root, cfg, progress=None):
        seen["cfg"] = cfg
        return profile_doc

    monkeypatch.setattr(demo, "profile_bundle", fake_profile)
    out = demo.demo_profile({"masked": tiny["masked8"], "ar": tiny["ar"]}, tmp_path)
    cfg = seen["cfg"]
    assert cfg.sweep_cache is None  # the sweep exports into a temp dir it removes
    assert cfg.measure.warmup_iters >= 1 and cfg.measure.iters >= 10 and cfg.sweep_measure.warmup_iters >= 1
    assert sorted(p.name for p in (tmp_path / "report").iterdir()) == ["profile.html", "profile.json"]
    assert out["table"]["nar_vs_ar"].startswith("NAR vs AR: ") and len(out["table"]["summary"]["rows"]) == 4


def test_a_missing_int8_model_hint_names_the_profile_the_runtime_loads(tiny_bundles):
    """`profile --runtime qnn --precision int8` on an unquantized bundle hinted `edgekit quantize
    BUNDLE`, whose cpu-profile model the HTP then refuses (issue #31)."""
    import pytest

    from edgekit.bundle import Bundle
    from edgekit.errors import BundleError
    from edgekit.profile import ProfileConfig, plan_variants

    bundle = Bundle.load(tiny_bundles["masked"])
    with pytest.raises(BundleError) as err:
        plan_variants(bundle, ProfileConfig(runtimes=("qnn",), precisions=("int8",)))
    assert f"edgekit quantize {bundle.root} --profile qnn" in err.value.hint and "--precision fp16" in err.value.hint
    with pytest.raises(BundleError) as err:
        plan_variants(bundle, ProfileConfig(runtimes=("ort",), precisions=("int8",)))
    assert f"`edgekit quantize {bundle.root}` first" in err.value.hint and "--precision fp32" in err.value.hint
