"""Long runs: 2,000 decodes through ORT with IOBinding allocate nothing after warm-up (RSS growth
under 1 MiB) and the latency probe flags drift. Tiny hand-built graphs keep this to seconds; each
RSS soak runs in its own interpreter (_soak_child.py) so that its RSS is its own."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from edgekit.probes.latency import summarize

pytestmark = pytest.mark.slow


def _profiler_conftest():
    import importlib.util

    conftest = Path(__file__).resolve().parents[1] / "profile" / "conftest.py"
    spec = importlib.util.spec_from_file_location("profiler_conftest", conftest)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.fixture(scope="module")
def tiny_masked(tmp_path_factory) -> Path:
    return _profiler_conftest().make_masked_bundle(tmp_path_factory.mktemp("soak") / "masked")


def _soak_in_child(which: str, root: Path) -> dict:
    """Run one soak in a fresh interpreter (tests/reliability/_soak_child.py says why) and return
    what it measured."""
    repo = Path(__file__).resolve().parents[2]
    proc = subprocess.run(
        [sys.executable, "-m", "tests.reliability._soak_child", which, str(root)],
        cwd=repo,
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "PYTHONPATH": os.pathsep.join([str(repo), os.environ.get("PYTHONPATH", "")])},
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_ar_ping_pong_decodes_do_not_grow_rss(tmp_path):
    """The AR loop feeds ORT's double-buffered cache outputs straight back (no copy, no new
    OrtValue per step): 1,000 decodes after warm-up stay under 1 MiB."""
    got = _soak_in_child("ar", _profiler_conftest().make_ar_bundle(tmp_path / "ar"))
    assert got["ping_pong"], "the AR runtime should hand back double-buffered cache outputs"
    assert got["growth"] < 1 << 20, f"RSS grew {got['growth'] / 1024:.0f} KiB over 1,000 AR decodes"


def test_fused_step_decodes_do_not_grow_rss(tmp_path):
    """Tokens ping-pong through the fused masked step graph: 1,000 decodes stay under 1 MiB."""
    pytest.importorskip("torch")
    from edgekit.export.fused import fused_bundle
    from edgekit.export.to_bundle import export_bundle
    from tests.tiny_models import tiny_masked_spec

    spec = tiny_masked_spec()
    export_bundle(spec, tmp_path / "m", source="tiny-masked")
    fused_bundle(tmp_path / "m", "step", spec=spec)
    got = _soak_in_child("fused", tmp_path / "m")
    assert got["growth"] < 1 << 20, f"RSS grew {got['growth'] / 1024:.0f} KiB over 1,000 fused decodes"


def test_2000_decodes_do_not_grow_rss(tiny_masked):
    got = _soak_in_child("masked", tiny_masked)
    assert got["shape"] == [2, 16]
    assert got["growth"] < 1 << 20, f"RSS grew {got['growth'] / 1024:.0f} KiB over 2,000 decodes"
    assert got["n"] == 2000 and got["p99_ms"] >= got["median_ms"] > 0


def test_drift_is_flagged():
    # a run whose last third is 30 % slower than its first (thermal throttling, say)
    samples = [1_000_000] * 30 + [1_100_000] * 30 + [1_300_000] * 30
    stats = summarize(samples)
    assert any("drift" in w for w in stats.warnings), stats.warnings
