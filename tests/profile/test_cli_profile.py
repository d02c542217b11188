"""`edgekit profile` through the CLI (runs once the command from /tmp/edgekit-cli/profile.py is
merged into edgekit/cli.py)."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from edgekit.cli import app

runner = CliRunner()
UNTIMED = ["--min-seconds", "0", "--warmup", "1", "--power", "off"]  # the time rules off, but --iters
QUICK = ["--iters", "3", *UNTIMED]


def invoke(*args):
    return runner.invoke(app, [str(a) for a in args], catch_exceptions=False)


def test_json_is_one_profile_document_with_the_ar_comparison(tiny):
    r = invoke(
        "profile", tiny["masked8"], *QUICK, "--compare-ar", "--ar-bundle", tiny["ar"], "--sweep", "none", "--json"
    )
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)
    assert doc["schema"] == "edgekit.profile/1"
    assert [v["id"] for v in doc["variants"]] == ["ort fp32", "ort int8"]
    assert all(v["latency"]["n"] == 3 for v in doc["variants"])
    # --iters is the count asked for: no time bound (without it, 60 s: probes.latency.max_seconds)
    assert all(
        v["measurement"]["max_seconds"] == 0 and not v["measurement"]["bounded_at_max_seconds"] for v in doc["variants"]
    )
    assert doc["ratios"][0]["name"] == "int8/fp32 (ort)"
    assert doc["compare_ar"]["speedups"][0]["speedup"] > 0


def test_table_shows_variants_side_by_side_and_the_ratios(tiny):
    r = invoke("profile", tiny["masked8"], *QUICK, "--steps", "2,4", "--precision", "fp32")
    assert r.exit_code == 0, r.output
    out = r.stdout
    assert "ort fp32 K=2" in out and "ort fp32 K=4" in out and "K=2/K=4 (ort fp32)" in out
    assert "p99 / p50" in out and "host overhead share" in out
    assert "power: unavailable (off)" in out


def test_html_writes_the_report_and_the_json(tiny, tmp_path):
    pytest.importorskip("matplotlib")
    r = invoke("profile", tiny["masked"], *QUICK, "--html", tmp_path / "rep")
    assert r.exit_code == 0, r.output
    assert (tmp_path / "rep" / "profile.html").is_file()
    assert json.loads((tmp_path / "rep" / "profile.json").read_text())["schema"] == "edgekit.profile/1"
    assert f"wrote {tmp_path / 'rep' / 'profile.html'}" in r.stdout


@pytest.mark.parametrize(
    "args,code,needle",
    [
        (["--precision", "int8"], 1, "edgekit quantize"),
        (["--runtime", "tensorflow"], 2, "--runtime 'tensorflow' is unknown"),
        (["--power", "battery"], 2, "Invalid value for '--power': 'battery' is not one of 'off', 'auto'"),
        (["--steps", "two"], 2, "--steps 'two' is not a comma-separated list"),
    ],
)
def test_bad_options_are_one_line_errors(tiny, args, code, needle):
    r = invoke("profile", tiny["masked"], *QUICK, *args)
    assert r.exit_code == code, r.output
    assert needle in r.stderr and "Traceback" not in r.stderr


def test_bad_sweep_precision_is_one_line_naming_the_valid_ones(tiny):
    r = invoke("profile", tiny["masked8"], *QUICK, "--sweep-precision", "fp16")
    assert r.exit_code == 2
    assert "--sweep-precision 'fp16' is unknown; valid: fp32, int8 (or both: fp32,int8)" in r.stderr
    assert "Traceback" not in r.output


def test_the_time_bound_is_60_s_by_default_and_its_stop_is_said(tiny, monkeypatch):
    # A stand-in for a slow model: the measured phase reports a bounded stop, and the profile
    # says how many decodes it took and how to ask for more (no test times anything).
    from edgekit.probes import latency

    real = latency.measure

    def bounded(fn, cfg=latency.MeasureConfig(), progress=None, clock=None):
        m = real(fn, cfg, progress, clock)
        return latency.Measurement(
            m.samples_ns, m.stats, m.warmup_iters, m.warmup_ns, m.wall_ns, m.capped, cfg.iters > 1
        )

    monkeypatch.setattr("edgekit.profile.measure.measure", bounded)
    r = invoke("profile", tiny["masked"], *UNTIMED, "--precision", "fp32", "--json")
    assert r.exit_code == 0, r.output
    (v,) = json.loads(r.stdout)["variants"]
    assert v["measurement"]["max_seconds"] == 60.0 and v["measurement"]["bounded_at_max_seconds"] is True
    said = json.loads(r.stdout)["warnings"]
    assert any(
        w.startswith(f"ort fp32: {v['latency']['n']} decodes measured, stopped at --max-seconds 60")
        and "--max-seconds 0" in w
        for w in said
    ), said
