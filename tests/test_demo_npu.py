"""The demo's NPU stage without onnxruntime-qnn: skipped with the install line, not an error
(README command 1 installs export and report only). With it, tests/builder/test_build_qnn.py and
tests/quantize/test_qnn_profile.py cover the stage's steps."""

from __future__ import annotations

from pathlib import Path

import edgekit.demo as demo
from edgekit.output import Output


def test_npu_stage_is_skipped_with_the_install_line_without_onnxruntime_qnn(monkeypatch, tmp_path, capsys):
    monkeypatch.setattr(demo, "module_available", lambda name: name != "onnxruntime_qnn")
    report = demo.npu_stage(demo.DemoConfig(out=Path(tmp_path)), lambda message: None)
    assert report == {"skipped": "onnxruntime-qnn is not installed (pip install 'edgekit[qnn]')"}
    demo._print_npu(Output(False), report)
    assert "pip install 'edgekit[qnn]'" in capsys.readouterr().out
    assert not (tmp_path / "npu").exists()  # nothing exported
