"""QuantizeRun's fields that one step sets and later steps read: read too early, each names the
step that sets it (a RuntimeError, not an AttributeError on None further on)."""

from __future__ import annotations

from pathlib import Path

import pytest

from edgekit.quantize.config import QuantizeConfig
from edgekit.quantize.context import QuantizeRun


def bare_run(tmp: Path) -> QuantizeRun:
    """A run as ``stage.quantize_bundle`` makes it, before any step (no bundle is read here)."""
    return QuantizeRun(None, QuantizeConfig(), tmp, {}, lambda m: None, lambda m: None, None, None, {})


@pytest.mark.parametrize(
    ("name", "step"),
    [
        ("prepared", "the profile's prepare step"),
        ("plan", "the profile's prepare step"),
        ("traj", r"the FP32 decodes \(stage.record_fp32\)"),
        ("reference", r"the FP32 decodes \(stage.record_fp32\)"),
        ("fp32_rt", r"the FP32 answers \(stage.fp32_answers\)"),
    ],
)
def test_read_before_its_step_names_the_step(tmp_path: Path, name: str, step: str) -> None:
    run = bare_run(tmp_path)
    with pytest.raises(RuntimeError, match=rf"^QuantizeRun\.{name} was read before {step} set it$"):
        getattr(run, name)


def test_set_then_read(tmp_path: Path) -> None:
    run = bare_run(tmp_path)
    graph = tmp_path / "prepared.onnx"
    run.prepared = graph
    assert run.prepared is graph
    assert run.schedule is None  # optional for good: measure() runs without a plan
