import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from edgekit.cli import app

pytest.importorskip("torch")
runner = CliRunner()
EXAMPLE = f"{Path(__file__).resolve().parents[2] / 'examples' / 'custom_model.py'}:make_model"


@pytest.fixture(scope="module")
def tiny_flow(tmp_path_factory):
    out = tmp_path_factory.mktemp("fast") / "flow"
    r = runner.invoke(app, ["export", EXAMPLE, "-o", str(out), "--graph", "step", "--decode", "solver=heun", "--json"])
    assert r.exit_code == 0, r.output
    return out, json.loads(r.stdout)


def test_export_graph_step_records_what_was_baked(tiny_flow):
    _, doc = tiny_flow
    assert doc["fused"]["step"]["baked"]["solver"] == "heun"
    assert "fused-step" in doc["artifacts"]


def test_bad_graph_and_decode_values(tmp_path):
    """Usage errors (exit 2), found before the export starts: no bundle is left behind."""
    r = runner.invoke(app, ["export", EXAMPLE, "-o", str(tmp_path / "x"), "--graph", "sideways"])
    assert (
        r.exit_code == 2
        and "Invalid value for '--graph': 'sideways' is not one of 'host', 'step', 'unrolled'" in r.stderr
    )
    r = runner.invoke(app, ["export", EXAMPLE, "-o", str(tmp_path / "y"), "--graph", "step", "--decode", "steps=many"])
    assert r.exit_code == 2 and "steps needs an integer" in r.stderr
    r = runner.invoke(
        app, ["export", EXAMPLE, "-o", str(tmp_path / "z"), "--graph", "step", "--decode", "solver=leapfrog"]
    )
    assert r.exit_code == 2 and "leapfrog" in r.stderr
    assert not any((tmp_path / d).exists() for d in ("x", "y", "z"))


def test_run_with_latency_budget_picks_a_plan_or_fails_with_exit_4(tiny_flow):
    out, _ = tiny_flow
    r = runner.invoke(app, ["run", str(out), "--cond", "speaker=0.5", "--latency-budget-ms", "10000", "--json"])
    assert r.exit_code == 0, r.output
    budget = json.loads(r.stdout)["budget"]
    assert budget["expected_ms"] <= 10000 and budget["solver"] in ("euler", "midpoint", "heun", "rk4")
    assert json.loads(r.stdout)["nfe"] == budget["nfe"]
    r = runner.invoke(app, ["run", str(out), "--cond", "speaker=0.5", "--latency-budget-ms", "0.000001"])
    assert r.exit_code == 4, r.output


def test_profile_with_latency_budget_measures_the_chosen_plan(tiny_flow):
    out, _ = tiny_flow
    quick = ["--iters", "2", "--min-seconds", "0", "--warmup", "1", "--power", "off", "--precision", "fp32"]
    r = runner.invoke(
        app, ["profile", str(out), "--cond", "speaker=0.5", "--latency-budget-ms", "10000", *quick, "--json"]
    )
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)
    budget, variant = doc["budget"], doc["variants"][0]
    assert budget["solver"] in ("euler", "midpoint", "heun", "rk4") and budget["expected_ms"] <= 10000
    assert doc["config"]["decode"] == {"solver": budget["solver"]}
    assert (
        variant["decode_config"]["solver"] == budget["solver"] and variant["decode_config"]["steps"] == budget["steps"]
    )
    r = runner.invoke(app, ["profile", str(out), "--latency-budget-ms", "50", "--steps", "2", *quick])
    assert r.exit_code == 2 and "drop --steps" in r.output


def test_run_graph_step_matches_host_loop_and_refuses_other_baked_values(tiny_flow):
    import numpy as np

    out, _ = tiny_flow
    res = {}
    for graph in ("host", "step"):
        npz = out.parent / f"{graph}.npz"
        r = runner.invoke(
            app,
            ["run", str(out), "--graph", graph, "--cond", "speaker=0.5", "--solver", "heun", "-o", str(npz), "--json"],
        )
        assert r.exit_code == 0, r.output
        assert json.loads(r.stdout)["graph"] == graph
        res[graph] = np.load(npz)["frames"]
    np.testing.assert_allclose(res["step"], res["host"], atol=1e-4)
    r = runner.invoke(app, ["run", str(out), "--graph", "step", "--cond", "speaker=0.5", "--solver", "rk4"])
    assert r.exit_code == 2 and "heun" in r.stderr  # baked solver named in the one-line error
    r = runner.invoke(app, ["run", str(out), "--graph", "unrolled", "--cond", "speaker=0.5"])
    assert r.exit_code == 2 and "no fused 'unrolled' graph" in r.stderr
