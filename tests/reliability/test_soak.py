"""Long runs: 2,000 decodes through ORT with IOBinding allocate nothing after warm-up (RSS growth
under 1 MiB) and the latency probe flags drift. Tiny hand-built graphs keep this to seconds."""

from pathlib import Path

import numpy as np
import pytest

from edgekit.bundle import Bundle
from edgekit.decode.dispatch import decode, decode_config
from edgekit.probes.latency import summarize
from edgekit.probes.memory import memory_snapshot
from edgekit.runtimes import open_runtime

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


def _rss_growth_after_warmup(run_once, warmup: int, measured: int) -> int:
    for i in range(warmup):
        run_once(i)
    before = memory_snapshot().rss_bytes
    for i in range(measured):
        run_once(i)
    return memory_snapshot().rss_bytes - before


def test_ar_ping_pong_decodes_do_not_grow_rss(tmp_path):
    """The AR loop feeds ORT's double-buffered cache outputs straight back (no copy, no new
    OrtValue per step): 1,000 decodes after warm-up stay under 1 MiB."""
    from edgekit.runtimes.ort import OrtRuntime

    bundle = Bundle.load(_profiler_conftest().make_ar_bundle(tmp_path / "ar"))
    with open_runtime(bundle, "ort", "fp32", threads=1) as rt:
        assert isinstance(rt, OrtRuntime) and rt.outputs_stay_valid == 2
        defaults = bundle.manifest["decode_defaults"]
        growth = _rss_growth_after_warmup(
            lambda i: decode("ar", rt, bundle.meta, {}, decode_config("ar", defaults, {}, seed=i)), 1000, 1000
        )
    assert growth < 1 << 20, f"RSS grew {growth / 1024:.0f} KiB over 1,000 AR decodes"


def test_fused_step_decodes_do_not_grow_rss(tmp_path):
    """Tokens ping-pong through the fused masked step graph: 1,000 decodes stay under 1 MiB."""
    pytest.importorskip("torch")
    from tests.tiny_models import tiny_masked_spec

    from edgekit.decode.fused import decode_fused
    from edgekit.runtimes import open_fused
    from edgekit.export.fused import fused_bundle
    from edgekit.export.to_bundle import export_bundle

    spec = tiny_masked_spec()
    export_bundle(spec, tmp_path / "m", source="tiny-masked")
    fused_bundle(tmp_path / "m", "step", spec=spec)
    bundle = Bundle.load(tmp_path / "m")
    cond = {"class_id": np.array([0, 2])}
    rt, entry = open_fused(bundle, "step", threads=1)
    with rt:
        cfg = decode_config("masked", bundle.manifest["decode_defaults"], {})
        growth = _rss_growth_after_warmup(lambda i: decode_fused("masked", rt, entry, cond, cfg), 1000, 1000)
    assert growth < 1 << 20, f"RSS grew {growth / 1024:.0f} KiB over 1,000 fused decodes"


def test_2000_decodes_do_not_grow_rss(tiny_masked):
    bundle = Bundle.load(tiny_masked)
    with open_runtime(bundle, "ort", "fp32", threads=1) as rt:
        # Warm-up: the ORT arena and the malloc/pymalloc pools settle over the first ~1,500
        # decodes (measured: +1.1, +0.8, +0.1 MiB per 500, then 0).
        for i in range(2000):
            decode("masked", rt, bundle.meta, {}, decode_config("masked", bundle.manifest["decode_defaults"], {}, seed=i))
        samples = np.zeros(2000, dtype=np.int64)  # preallocated: the measurement must not allocate
        import time

        before = memory_snapshot().rss_bytes
        for i in range(2000):
            t0 = time.perf_counter_ns()
            out = decode("masked", rt, bundle.meta, {}, decode_config("masked", bundle.manifest["decode_defaults"], {}, seed=i))
            samples[i] = time.perf_counter_ns() - t0
        after = memory_snapshot().rss_bytes
    assert out.output.shape == (2, 16)
    growth = after - before
    assert growth < 1 << 20, f"RSS grew {growth / 1024:.0f} KiB over 2,000 decodes"
    stats = summarize(samples.tolist())
    assert stats.n == 2000 and stats.p99_ms >= stats.median_ms > 0


def test_drift_is_flagged():
    # a run whose last third is 30 % slower than its first (thermal throttling, say)
    samples = [1_000_000] * 30 + [1_100_000] * 30 + [1_300_000] * 30
    stats = summarize(samples)
    assert any("drift" in w for w in stats.warnings), stats.warnings
