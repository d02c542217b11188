"""The demo's NPU stage without onnxruntime-qnn: skipped with the install line, not an error
(README command 1 installs export and report only). With it, tests/builder/test_build_qnn.py and
tests/quantize/qnn/test_profile.py cover the stage's steps."""

from __future__ import annotations

from pathlib import Path

import edgekit.demo.stage as demo
from edgekit.demo.render import _print_npu
from edgekit.output import Output


def test_npu_stage_is_skipped_with_the_install_line_without_onnxruntime_qnn(monkeypatch, tmp_path, capsys):
    monkeypatch.setattr(demo, "module_available", lambda name: name != "onnxruntime_qnn")
    report = demo.npu_stage(demo.DemoConfig(out=Path(tmp_path)), lambda message: None)
    assert report == {"skipped": "onnxruntime-qnn is not installed (pip install 'edgekit[qnn]')"}
    _print_npu(Output(False), report)
    assert "pip install 'edgekit[qnn]'" in capsys.readouterr().out
    assert not (tmp_path / "npu").exists()  # nothing exported


def test_npu_stage_calibrates_on_more_sequences_than_it_evaluates(monkeypatch, tmp_path):
    """4 calibration sequences were too few for the 20,000-step masked model (top-1 missed with
    only the logits at 16 bit, and the search ran on for minutes); quantize's default 8 met the
    budget. The held-out rows stay at 4: each is a slow decode on the HTP emulation."""
    from types import SimpleNamespace

    seen = {}

    class Stop(Exception):
        pass

    def fake_quantize(root, qcfg):
        seen["cfg"] = qcfg
        raise Stop

    monkeypatch.setattr(demo, "module_available", lambda name: True)
    monkeypatch.setattr(demo, "load_spec", lambda name, batch=None: None)
    monkeypatch.setattr(demo, "export_bundle", lambda *a, **k: SimpleNamespace(root=tmp_path))
    monkeypatch.setattr(demo, "quantize_bundle", fake_quantize)
    cfg = demo.DemoConfig(out=Path(tmp_path))
    try:
        demo.npu_stage(cfg, lambda message: None)
    except Stop:
        pass
    q = seen["cfg"]
    assert q.profile == "qnn" and q.calib_samples == cfg.npu_calib == 8 and q.eval_samples == cfg.npu_n == 4
