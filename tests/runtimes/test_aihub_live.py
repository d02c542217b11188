"""Against the real Qualcomm AI Hub (marker ``aihub``): build, profile and check a tiny bundle on one
hosted device. Skips, saying why, where no client is configured (no ~/.qai_hub/client.ini, no
QAI_HUB_API_TOKEN). Costs one compile, one profile and one inference job of your AI Hub quota and
takes minutes (device queues): run it on purpose, `pytest -m aihub tests/runtimes/test_aihub_live.py`."""

from __future__ import annotations

import pytest

from edgekit.runtimes.aihub import client as hub_client

pytestmark = pytest.mark.aihub

TARGET = "snapdragon-8-gen-3"


@pytest.fixture(scope="module")
def configured():
    pytest.importorskip("qai_hub", reason="the AI Hub client is not installed (pip install 'edgekit[aihub]')")
    conf = hub_client.configuration()
    if not conf.configured:
        pytest.skip(f"no Qualcomm AI Hub client configured here ({conf.problem}); {hub_client.SETUP}")
    return conf


def test_build_profile_and_check_on_a_hosted_device(configured, tmp_path):
    from edgekit.builder import build_bundle
    from edgekit.check import CheckConfig, check_bundle
    from edgekit.probes.latency import MeasureConfig
    from edgekit.profile import ProfileConfig, profile_bundle
    from tests.profile.conftest import make_masked_bundle

    root = make_masked_bundle(tmp_path / "masked")
    engine = build_bundle(root, TARGET, "fp16", runtime="aihub")["engine"]
    assert (root / engine["path"]).stat().st_size > 0 and engine["runtime_version"] and engine["aihub"]["model_id"]
    device = engine["aihub"]["device"]
    quick = MeasureConfig(warmup_iters=1, warmup_seconds=0.0, iters=3, min_seconds=0.0)
    doc = profile_bundle(root, ProfileConfig(runtimes=("aihub",), devices=(device,), measure=quick, power="off"))
    (row,) = doc["aihub"]["devices"]
    assert (
        row["available"]
        and row["per_call_ms"] > 0
        and row["ops"]["total"] > 0
        and row["model"] == f"engine {TARGET}/fp16@aihub"
    )
    checked = check_bundle(root, CheckConfig(runtime="aihub", candidate="fp16", device=device, n=2))
    assert checked["metrics"]["top1_agreement"] > 0.9, checked["metrics"]
