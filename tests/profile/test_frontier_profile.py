"""The quality-latency frontier inside `profile --compare-ar`: tiny ONNX bundles, a user metric
hook written into tmp_path (the tiny models have no ground truth)."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from edgekit.cli import app
from edgekit.errors import UsageError
from edgekit.profile import ProfileConfig, profile_bundle
from edgekit.profile.frontier import FrontierPoint, Tolerance, frontier

HOOK = """
SEEN = []
def score(output, cond):
    SEEN.append(output.shape)
    return {"low_share": float((output < 16).mean()), "rows": float(len(output))}
"""


@pytest.fixture()
def hook(tmp_path):
    path = tmp_path / "quality_hook.py"
    path.write_text(HOOK)
    return f"{path}:score"


def _cfg(kit, tiny, hook, **kw):
    base = dict(
        measure=kit.FAST,
        power="off",
        compare_ar=True,
        ar_bundle=tiny["ar"],
        sweep_lengths=(),
        frontier_steps=(1, 2, 4),
        frontier_n=5,
        metric_hook=hook,
    )
    return ProfileConfig(**(base | kw))


def test_frontier_scores_every_k_and_ar_on_one_evaluation_set(tiny, kit, hook):
    doc = profile_bundle(tiny["masked8"], _cfg(kit, tiny, hook))
    f = doc["compare_ar"]["frontier"]
    assert f["available"] and f["metric"] == "low_share" and f["n"] == 5 and f["rows"] == kit.B
    got = [(p["model"], p["precision"], p["steps"]) for p in f["points"]]
    assert got == [
        ("masked", "fp32", 1),
        ("masked", "fp32", 2),
        ("masked", "fp32", 4),
        ("ar", "fp32", kit.L),
        ("masked", "int8", 1),
        ("masked", "int8", 2),
        ("masked", "int8", 4),
    ]
    assert all(p["latency_ms"] > 0 and p["quality"]["rows"] == 5 for p in f["points"])  # n rows, short chunk trimmed
    # The flags and the smallest K are those of profile.frontier on the measured points.
    pts = [FrontierPoint(p["model"], p["precision"], p["steps"], p["latency_ms"], p["quality"]) for p in f["points"]]
    again = frontier(pts, "low_share", Tolerance.parse("10%"))
    assert [p["pareto"] for p in f["points"]] == [p["pareto"] for p in again["points"]]
    assert f["smallest_k"] == again["smallest_k"]
    ar = next(p for p in f["points"] if p["model"] == "ar")
    assert ar["latency_ms"] == doc["compare_ar"]["variants"][0]["latency"]["median_ms"]  # the AR measured once
    assert f["smallest_k"][1]["reason"] == "no AR baseline at this precision"  # the tiny AR has no int8


def test_a_k_already_profiled_is_not_timed_twice(tiny, kit, hook):
    doc = profile_bundle(tiny["masked"], _cfg(kit, tiny, hook, steps=(2,)))
    k2 = next(p for p in doc["compare_ar"]["frontier"]["points"] if p["steps"] == 2)
    assert k2["latency_ms"] == doc["variants"][0]["latency"]["median_ms"]


def test_the_masked_decode_steps_change_the_outputs_scored(tiny, kit, tmp_path):
    # A hook that fingerprints the tokens: K=1 and K=4 decode different tokens under one seed.
    path = tmp_path / "fingerprint.py"
    path.write_text(
        "import numpy as np\ndef score(output, cond):\n"
        "    return {'sum': float(np.sum(output * np.arange(output.shape[1])))}\n"
    )
    doc = profile_bundle(tiny["masked"], _cfg(kit, tiny, f"{path}:score", frontier_steps=(1, 4)))
    sums = [p["quality"]["sum"] for p in doc["compare_ar"]["frontier"]["points"] if p["model"] == "masked"]
    assert sums[0] != sums[1]


def test_without_ground_truth_or_hook_the_frontier_says_why(profile_doc):
    f = profile_doc["compare_ar"]["frontier"]
    assert f["available"] is False and "--metric module:function" in f["reason"]


def test_an_unknown_frontier_metric_names_the_measured_ones(tiny, kit, hook):
    with pytest.raises(UsageError, match="valid: low_share, rows"):
        profile_bundle(tiny["masked"], _cfg(kit, tiny, hook, frontier_metric="validity"))


def test_bad_frontier_settings_fail_before_measuring():
    with pytest.raises(UsageError, match="frontier-steps"):
        ProfileConfig(frontier_steps=(0, 2))
    with pytest.raises(UsageError, match="frontier-tolerance"):
        ProfileConfig(frontier_tolerance="ten")


runner = CliRunner()
QUICK = ["--iters", "3", "--min-seconds", "0", "--warmup", "1", "--power", "off", "--sweep", "none"]


def test_cli_prints_the_frontier_and_json_carries_it(tiny, hook, tmp_path):
    args = [
        "profile",
        str(tiny["masked"]),
        *QUICK,
        "--compare-ar",
        "--ar-bundle",
        str(tiny["ar"]),
        "--metric",
        hook,
        "--frontier-steps",
        "1,2",
        "--frontier-n",
        "3",
        "--frontier-tolerance",
        "0.05",
    ]
    r = runner.invoke(app, args, catch_exceptions=False)
    assert r.exit_code == 0, r.output
    assert "quality-latency frontier" in r.stdout and "smallest K with low_share within 0.05 of AR's" in r.stdout
    r = runner.invoke(app, args + ["--json"], catch_exceptions=False)
    doc = json.loads(r.stdout)
    assert [p["steps"] for p in doc["compare_ar"]["frontier"]["points"]] == [1, 2, 16]
    assert doc["compare_ar"]["frontier"]["tolerance"]["relative"] is False


def test_cli_frontier_none_skips_it_and_bad_tolerance_is_a_usage_error(tiny, hook):
    base = ["profile", str(tiny["masked"]), *QUICK, "--compare-ar", "--ar-bundle", str(tiny["ar"])]
    r = runner.invoke(app, base + ["--frontier-steps", "none", "--json"], catch_exceptions=False)
    assert r.exit_code == 0 and "frontier" not in json.loads(r.stdout)["compare_ar"]
    r = runner.invoke(app, base + ["--frontier-tolerance", "lots"])
    assert r.exit_code == 2 and "--frontier-tolerance 'lots'" in r.output


def test_html_report_has_the_frontier_plot(tiny, kit, hook, tmp_path):
    pytest.importorskip("matplotlib")
    from edgekit.profile import render_html

    page = render_html(profile_bundle(tiny["masked"], _cfg(kit, tiny, hook)))
    assert "<h2>Quality-latency frontier</h2>" in page and 'alt="quality-latency frontier"' in page
