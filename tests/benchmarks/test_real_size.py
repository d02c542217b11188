"""benchmarks/real_size.py: every stage it runs is a real `edgekit` command with options that
exist (a renamed option would otherwise surface only in an hour-long at-size run), and the
recorded table orders the extra stages after the pipeline's."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import pytest
import typer

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
import real_size  # noqa: E402

from edgekit.cli import app  # noqa: E402

OPTS = argparse.Namespace(
    target="cpu",
    quantize_args="--calib-samples 4 --eval-samples 4 --max-fallback 4",
    check_args="",
    profile_runtimes="ort,openvino",
    profile_args="--iters 3 --warmup 1",
)


@pytest.mark.parametrize("stage", [*real_size.STAGES, *real_size.EXTRA_STAGES])
@pytest.mark.parametrize("model", sorted(real_size.ZOO))
def test_every_stage_is_a_command_with_options_that_exist(stage, model, tmp_path):
    args = real_size.stage_args(stage, real_size.ZOO[model], tmp_path / model, OPTS)
    commands = typer.main.get_command(app).commands
    assert args[0] in commands, args
    cmd = commands[args[0]]
    known = {o for p in cmd.params for o in (*p.opts, *p.secondary_opts)}
    for a in [*args[1:], "--json"]:  # run_stage adds --json to every command
        if a.startswith("-") and not a.lstrip("-").replace(".", "").isdigit():
            assert a in known, f"{stage}: {a} is not an option of `edgekit {args[0]}`"
    positional = [p for p in cmd.params if not getattr(p, "opts", [""])[0].startswith("-")]
    assert positional, f"{args[0]} takes the bundle or archive as its argument"


def test_pack_unpack_and_inspect_chain_through_the_same_paths(tmp_path):
    model = real_size.ZOO["amused-256"]
    bundle = tmp_path / model.name
    pack = real_size.stage_args("pack", model, bundle, OPTS)
    unpack = real_size.stage_args("unpack", model, bundle, OPTS)
    inspect = real_size.stage_args("inspect-unpacked", model, bundle, OPTS)
    archive = pack[pack.index("-o") + 1]
    assert unpack[1] == archive and archive.endswith(".tar.gz")
    assert Path(inspect[1]) == Path(unpack[unpack.index("-o") + 1]) / model.name
    assert Path(inspect[1]) != bundle  # inspects the copy, not the original


def test_unknown_stage_is_refused_naming_the_extras(monkeypatch, capsys):
    monkeypatch.setattr(sys, "argv", ["real_size.py", "--stages", "bogus"])
    with pytest.raises(SystemExit) as err:
        real_size.main()
    assert "bogus" in str(err.value) and "lint-jetson" in str(err.value)


def test_table_orders_extra_stages_after_the_pipeline(tmp_path):
    row = {"exit_code": 0, "wall_s": 1.0, "peak_rss_mb": 1024.0, "bytes_written": 0, "fp32_decodes": None}
    report = {
        "model": "m",
        "date": "2026-12-06T00:00:00+00:00",
        "fp32_bytes": 2**30,
        "machine": {"cpu": "cpu", "cores": 2, "isa_class": "avx2"},
        "stages": {"unpack": row, "export": row, "lint-jetson": row, "profile": row},
    }
    path = tmp_path / "runs.jsonl"
    path.write_text(json.dumps(report) + "\n")
    stages = [line.split("|")[3].strip() for line in real_size.table(path).splitlines()[2:]]
    assert stages == ["`export`", "`profile`", "`lint-jetson`", "`unpack`"]


def test_the_cost_unit_is_a_warm_fp32_decode():
    """profile's ORT FP32 median first, then quantize's own warm unit or speed timing, then run's
    cold decode."""
    run = {"document": {"wall_ms": 36000.0, "decode_calls": 1}}
    quantize = {"document": {"speed": {"measured": True, "fp32_ms_per_decode": 15100.0}}}
    profile = {
        "document": {
            "variants": [
                {"id": "ort int8", "latency": {"median_ms": 6000.0}},
                {"id": "ort fp32", "latency": {"median_ms": 14900.0}},
            ]
        }
    }
    assert real_size.warm_fp32_decode_s({"run": run, "quantize": quantize, "profile": profile})[0] == 14.9
    assert real_size.warm_fp32_decode_s({"run": run, "quantize": quantize})[0] == 15.1
    # quantize's own unit where it says one (the median of its held-out decodes), not a cold one
    held = {"document": quantize["document"] | {"fp32_decode_unit": {"seconds": 13.5, "from": "held-out FP32"}}}
    assert real_size.warm_fp32_decode_s({"run": run, "quantize": held}) == (13.5, "quantize: held-out FP32")
    cold = {"document": quantize["document"] | {"fp32_decode_unit": {"seconds": 20.0, "from": "the first (cold)"}}}
    assert real_size.warm_fp32_decode_s({"run": run, "quantize": cold})[0] == 15.1
    seconds, source = real_size.warm_fp32_decode_s({"run": run})
    assert seconds == 36.0 and "cold" in source


def test_a_stages_progress_is_kept_in_its_log(tmp_path):
    """``run_stage(log=)``: the command's stderr (quantize's progress, an error's one line) is kept
    beside the bundles, where the record keeps only an error's last lines."""
    log = tmp_path / "out" / "m-inspect.log"  # its folder made too
    row = real_size.run_stage(["inspect", str(tmp_path / "no-bundle")], tmp_path, log)
    assert row["exit_code"] != 0
    assert "error:" in log.read_text() and "no-bundle" in log.read_text()
