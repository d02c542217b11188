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


@pytest.mark.slow
def test_checks_gate_counts_on_in_the_candidates_progress(demo_bundles, tmp_path, monkeypatch) -> None:
    """A candidate's INT8 decodes are counted over the budget's decode and then ``check``'s gate
    (its teacher-forced calls): at size the gate alone ran 76 s, and said nothing."""
    import shutil

    from edgekit.quantize import QuantizeConfig, context, quantize_bundle
    from edgekit.quantize.plan import Eta

    bundle = shutil.copytree(demo_bundles["flow"], tmp_path / "flow")
    said: list[str] = []
    monkeypatch.setattr(context, "Eta", lambda label, total, say: Eta(label, total, say, interval=0.0))
    quantize_bundle(
        bundle,
        QuantizeConfig(
            calib_samples=2, eval_samples=4, fallback=False, budget={"snr_db": 0.0, "gt_snr_drop_db": 100.0}
        ),
        progress=said.append,
    )
    counted = [m for m in said if m.startswith("candidate 1: INT8 decode")]
    # 2 graph batches of held-out rows: the budget's decodes count 1, the gate's 2 and 3 (of 4)
    assert [m.split(":")[1].strip().split()[-1] for m in counted] == ["1/4", "2/4", "3/4"], "\n".join(said)
