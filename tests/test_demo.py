"""`edgekit demo`'s sizes and its clock (issue #31): sized for a few minutes on 2 cores with the
full versions one flag away, and every stage's wall and CPU time in its output and JSON."""

from __future__ import annotations

import json

import typer

import edgekit.demo as demo
from edgekit.cli import app


def test_default_sizes_are_the_demos_and_full_restores_the_complete_ones():
    small, full = demo.DemoConfig(), demo.DemoConfig(full=True)
    assert small.frontier_steps == (1, 2, 4, 5, 6, 8) and full.frontier_steps == (1, 2, 4, 5, 6, 8, 16)
    assert small.frontier_n == 16 and full.frontier_n == 32
    assert small.sweep_lengths == () and full.sweep_lengths == (32, 256, 512)
    assert (
        small.gate_n == full.gate_n == 16
    )  # the budget's rows are not cut (they cost little, and 8 needed more fallbacks)
    assert not small.runs_npu and full.runs_npu
    assert demo.DemoConfig(npu=True).runs_npu and not demo.DemoConfig(full=True, npu=False).runs_npu
    assert not demo.DemoConfig(full=True, npu_target=None).runs_npu


def test_the_cli_flags_reach_the_config(monkeypatch, tmp_path):
    seen = []
    monkeypatch.setattr(demo, "run_demo", lambda cfg, progress=None: seen.append(cfg) or {"stop": True})
    monkeypatch.setattr(demo, "print_demo", lambda o, report: None)
    from typer.testing import CliRunner

    for args, want in ((["--full"], (True, None)), (["--npu"], (False, True)), ([], (False, None))):
        r = CliRunner().invoke(app, ["demo", "--out", str(tmp_path / "d"), *args])
        assert r.exit_code == 0, r.output
        assert (seen[-1].full, seen[-1].npu) == want
    help_text = typer.main.get_command(app).commands["demo"].params
    assert {"--full", "--npu"} <= {o for p in help_text for o in p.opts}


def test_stage_clock_times_each_stage_and_stamps_progress_lines():
    lines = []
    clock = demo.StageClock(lines.append)
    clock.step("export masked-demo", stage="export")
    clock.detail("a detail")
    clock.step("decode", stage="decode")
    clock.step("export again", stage="export")  # a stage entered twice adds up
    clock.profile_detail("frontier K=1", 0, 0)
    clock.profile_detail("frontier K=1", 1, 4)  # one line per label
    t = clock.finish()
    assert list(t["stages"]) == ["export", "decode"] and all(
        set(v) == {"wall_s", "cpu_s"} for v in t["stages"].values()
    )
    assert t["wall_s"] >= sum(v["wall_s"] for v in t["stages"].values()) - 1e-6
    assert {"cpu", "cores", "cpu_s", "load_avg_end"} <= set(t)
    assert lines[0].startswith("[0:00] export masked-demo") and lines[1] == "[0:00]   a detail"
    assert sum("frontier K=1" in line for line in lines) == 1
    json.dumps(t)


def test_the_output_ends_with_the_time_per_stage_and_the_machine(capsys):
    from edgekit.output import Output

    timing = {
        "stages": {"export": {"wall_s": 20.4, "cpu_s": 22.0}, "quantize": {"wall_s": 58.1, "cpu_s": 100.3}},
        "wall_s": 103.2,
        "cpu_s": 163.0,
        "cpu": "AMD EPYC",
        "cores": 2,
        "load_avg_end": [2.0, 2.0, 2.0],
    }
    demo.print_timing(Output(False), timing)
    out = capsys.readouterr().out
    assert "demo: time per stage (seconds)" in out and "quantize" in out and "total" in out
    assert "demo took 1 min 43 s wall, 2 min 43 s CPU on AMD EPYC (2 cores, load average 2 at the end)" in out
