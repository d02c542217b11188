"""Up-front host checks (``edgekit.resources``): a model too big for this host's memory or disk
stops `export` and `quantize` in one line before any work (exit 3, nothing written), with the
numbers and the fix; EDGEKIT_NO_PREFLIGHT=1 makes it a warning. The host's figures are stand-ins
here (the suite's verdict never depends on this machine's RAM)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from edgekit.cli import app
from edgekit.resources import GIB, HostTooSmall, Need, cgroup_available, meminfo_available, preflight

runner = CliRunner()


def test_meminfo_and_cgroup_are_read_as_the_kernel_writes_them(tmp_path):
    (tmp_path / "meminfo").write_text(
        "MemTotal:       24587536 kB\nMemFree:         1024 kB\nMemAvailable:   20971520 kB\n"
    )
    assert meminfo_available(tmp_path / "meminfo") == 20 * GIB
    assert meminfo_available(tmp_path / "missing") is None
    cg = tmp_path / "cg"
    cg.mkdir()
    (cg / "memory.max").write_text("max\n")
    (cg / "memory.current").write_text("1000\n")
    assert cgroup_available(cg) is None  # no limit
    (cg / "memory.max").write_text(f"{8 * GIB}\n")
    (cg / "memory.current").write_text(f"{3 * GIB}\n")
    assert cgroup_available(cg) == 5 * GIB


def test_preflight_refuses_in_one_line_with_the_numbers_and_the_fix(tmp_path):
    needs = [Need("memory", 12 * GIB, "3.5x its 3.4 GiB of FP32 weights")]
    with pytest.raises(HostTooSmall) as err:
        preflight("quantize", needs, memory=lambda: 6 * GIB)
    text = str(err.value)
    assert "\n" not in text and err.value.exit_code == 3
    assert "needs about 12.0 GiB of memory" in text and "6.0 GiB available" in text and "EDGEKIT_NO_PREFLIGHT=1" in text
    assert preflight("quantize", needs, memory=lambda: 16 * GIB) == []
    assert preflight("quantize", needs, memory=lambda: None) == []  # a host that cannot say passes


def test_disk_needs_on_one_file_system_add_up(tmp_path):
    a, b = tmp_path / "scratch", tmp_path / "bundle" / "new"  # b does not exist yet: its parent's disk
    a.mkdir()
    needs = [Need("disk", 3 * GIB, "the scratch copies", a), Need("disk", 2 * GIB, "the int8 graph", b)]
    assert preflight("quantize", needs, disk=lambda folder: 5 * GIB) == []
    with pytest.raises(HostTooSmall, match=r"needs about 5\.0 GiB of free disk \(3\.0 GiB for the scratch copies"):
        preflight("quantize", needs, disk=lambda folder: 4 * GIB)


def test_the_override_turns_a_refusal_into_one_warning(monkeypatch):
    monkeypatch.setenv("EDGEKIT_NO_PREFLIGHT", "1")
    said: list[str] = []
    lines = preflight("export", [Need("memory", 10 * GIB, "x")], warn=said.append, memory=lambda: GIB)
    assert len(lines) == 1 and len(said) == 1 and "EDGEKIT_NO_PREFLIGHT is set: going on" in said[0]


def test_quantize_too_big_for_the_host_stops_before_any_work(masked, monkeypatch):
    before = json.loads((masked / "edgekit.json").read_text())
    monkeypatch.setattr("edgekit.resources.available_memory", lambda: 64 * 1024**2)
    r = runner.invoke(app, ["quantize", str(masked), "--calib-samples", "2", "--eval-samples", "2"])
    assert r.exit_code == 3, r.output
    assert r.stderr.count("error:") == 1 and "quantize needs about" in r.stderr and "64 MiB available" in r.stderr
    assert "Traceback" not in r.output
    assert json.loads((masked / "edgekit.json").read_text()) == before and not list(masked.glob("int8*"))


def test_quantize_needs_count_the_weights_side_file(masked, monkeypatch):
    from edgekit.bundle import Bundle
    from edgekit.quantize import QuantizeConfig
    from edgekit.quantize.stage import quantize_needs

    bundle = Bundle.load(masked)
    fp32 = Path(bundle.path_of("fp32"))
    (memory, scratch, int8) = quantize_needs(bundle, QuantizeConfig())
    assert memory.bytes > 3 * fp32.stat().st_size and scratch.bytes > 2 * fp32.stat().st_size
    assert int8.folder == bundle.root and 0 < int8.bytes < fp32.stat().st_size


def test_export_too_big_for_the_disk_stops_before_the_bundle_exists(tmp_path, monkeypatch):
    monkeypatch.setattr("edgekit.resources.free_disk", lambda folder: 1024)
    out = tmp_path / "b"
    r = runner.invoke(app, ["export", "masked-demo", "-o", str(out)])
    assert r.exit_code == 3, r.output
    assert "export needs about" in r.stderr and "of free disk" in r.stderr and "for the FP32 graph" in r.stderr
    assert not out.exists()


def test_quantize_too_big_for_the_scratch_disk_names_the_recording(masked, monkeypatch):
    before = json.loads((masked / "edgekit.json").read_text())
    monkeypatch.setattr("edgekit.resources.free_disk", lambda folder: 1024)
    r = runner.invoke(app, ["quantize", str(masked), "--calib-samples", "2", "--eval-samples", "2"])
    assert r.exit_code == 3, r.output
    assert r.stderr.count("error:") == 1 and "of free disk" in r.stderr
    assert "of recorded calls and kept answers" in " ".join(r.stderr.split()), r.stderr
    assert json.loads((masked / "edgekit.json").read_text()) == before and not list(masked.glob("int8*"))
