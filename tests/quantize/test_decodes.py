"""How much of a decode quantize runs: the tokens a row decides, the speed timing's share."""

from __future__ import annotations

import copy
from types import SimpleNamespace

import pytest


def test_tokens_per_row_is_what_a_rows_decode_decides(demo_bundles):
    from edgekit.bundle import Bundle
    from edgekit.quantize.decodes import tokens_per_row

    masked, ar, flow = (Bundle.load(demo_bundles[k]) for k in ("masked", "ar", "flow"))
    assert tokens_per_row(masked, {}) == masked.meta["seq_len"]
    assert tokens_per_row(ar, {}) == ar.meta["max_len"]
    assert tokens_per_row(ar, {"length": 5}) == 5  # a shorter decode decides fewer
    assert tokens_per_row(flow, {}) is None
    # A length the bundle's decode defaults give is the decode's too; the options still win.
    manifest = copy.deepcopy(ar.manifest)
    manifest["decode_defaults"] = {**manifest.get("decode_defaults", {}), "length": 7}
    short = Bundle(ar.root, manifest)
    assert tokens_per_row(short, {}) == 7 and tokens_per_row(short, {"length": 5}) == 5


def test_a_long_ar_decode_is_timed_on_its_first_tokens_and_scaled_to_a_whole_one(demo_bundles):
    from edgekit.bundle import Bundle
    from edgekit.host import HostFacts
    from edgekit.probes.speed import decide
    from edgekit.quantize import decodes, stage
    from tests.fakes.host import StandInHost

    ar, masked = Bundle.load(demo_bundles["ar"]), Bundle.load(demo_bundles["masked"])
    assert ar.meta["max_len"] <= decodes.SPEED_AR_TOKENS  # the demo: timed whole
    assert decodes.speed_tokens(ar, {}) is None and decodes.speed_tokens(masked, {}) is None
    long_ar = SimpleNamespace(kind="ar", tokens_per_row=1024)  # the accessor a 1024-token bundle answers
    assert decodes.speed_tokens(long_ar, {}) == (decodes.SPEED_AR_TOKENS, 1024)
    assert decodes.speed_tokens(long_ar, {"length": 100}) is None  # the decode itself is short
    host = StandInHost(loads=(0.3,))
    decision = decide(
        {"fp32": host.call("fp32", [100]), "int8": host.call("int8", [50])},
        5,
        pair=lambda t: ("int8", "fp32"),
        probe=host.probe,
    )
    facts = HostFacts("x86_64", "EPYC", None, None, False, ("avx2",))
    doc, _ = stage.speed_record(decision, "ort", facts, 1, 0, part=(128, 1024))
    assert (doc["fp32_ms_per_decode"], doc["int8_ms_per_decode"]) == (800.0, 400.0)  # x 8: a whole decode
    assert doc["int8_speedup"] == pytest.approx(2.0) and doc["timed_tokens"]["of"] == 1024


def test_the_bundle_says_how_many_tokens_a_row_decides(demo_bundles):
    from edgekit.bundle import Bundle

    masked, ar, flow = (Bundle.load(demo_bundles[k]) for k in ("masked", "ar", "flow"))
    assert (masked.tokens_per_row, ar.tokens_per_row, flow.tokens_per_row) == (
        masked.meta["seq_len"],
        ar.meta["max_len"],
        None,
    )


class _Session:
    """A stand-in runtime that counts its runs."""

    name, device, inputs, outputs = "stand-in", "cpu", {}, {}

    def __init__(self):
        self.runs = 0

    def run(self, feeds):
        self.runs += 1
        return {}


def test_the_speed_timing_warms_every_session_once_each_step_bucket_included():
    """One recorded call on each session before the timed decodes: a bucketed INT8 model's every
    bucket graph too, not only the one the call's position reaches (its first decode would pay
    the others' first runs)."""
    import numpy as np

    from edgekit.quantize.decodes import warm_up
    from edgekit.runtimes.bucketed import BucketedRuntime

    fp32, buckets = _Session(), [_Session(), _Session(), _Session()]
    int8 = BucketedRuntime(buckets, [0.25, 0.5], "flow", {})
    assert warm_up([fp32, int8], {"x": np.zeros(2, np.float32)}) == 4
    assert fp32.runs == 1 and [b.runs for b in buckets] == [1, 1, 1]
