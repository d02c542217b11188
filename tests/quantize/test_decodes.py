"""How much of a decode quantize runs: the tokens a row decides, the speed timing's share (a long
AR decode's first tokens, a long masked or flow decode's first steps)."""

from __future__ import annotations

import copy
from types import SimpleNamespace

import pytest


def _speed_record(fp32_ms, int8_ms, part):
    """``speed.speed_record`` of a quiet stand-in host's timing (each side ``*_ms`` a decode) timed
    on ``part`` of a decode."""
    from edgekit.host import HostFacts
    from edgekit.probes.speed import decide
    from edgekit.quantize import speed
    from tests.fakes.host import StandInHost

    host = StandInHost(loads=(0.3,))
    decision = decide(
        {"fp32": host.call("fp32", [fp32_ms]), "int8": host.call("int8", [int8_ms])},
        5,
        pair=lambda t: ("int8", "fp32"),
        probe=host.probe,
    )
    facts = HostFacts("x86_64", "EPYC", None, None, False, ("avx2",))
    return speed.speed_record(decision, "ort", facts, 1, 0, part=part)


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
    from edgekit.quantize import decodes

    ar, masked = Bundle.load(demo_bundles["ar"]), Bundle.load(demo_bundles["masked"])
    assert ar.meta["max_len"] <= decodes.SPEED_AR_TOKENS  # the demo: timed whole
    assert decodes.speed_part(ar, {}) is None and decodes.speed_part(masked, {}) is None
    long_ar = SimpleNamespace(kind="ar", tokens_per_row=1024)  # the accessor a 1024-token bundle answers
    part = decodes.speed_part(long_ar, {})
    assert part == decodes.SpeedPart("tokens", decodes.SPEED_AR_TOKENS, 1024) and part.option == "length"
    assert decodes.speed_part(long_ar, {}, decode_s=0.01) == part  # tokens, whatever the clock
    assert decodes.speed_part(long_ar, {"length": 100}) is None  # the decode itself is short
    doc, _ = _speed_record(100, 50, decodes.SpeedPart("tokens", 128, 1024))
    assert (doc["fp32_ms_per_decode"], doc["int8_ms_per_decode"]) == (800.0, 400.0)  # x 8: a whole decode
    assert doc["int8_speedup"] == pytest.approx(2.0) and doc["timed_tokens"]["of"] == 1024
    assert doc["timed_tokens"]["tokens"] == 128 and "timed_steps" not in doc


@pytest.mark.parametrize(
    "kind,decode,decode_s,bucketed,expected",
    [
        ("masked", {}, None, False, None),  # not timed yet: whole
        ("masked", {}, 0.5, False, None),  # a short decode: whole
        ("masked", {}, 24.0, False, ("steps", 1, 8)),  # 3 s a step of the default 8: one step
        ("masked", {}, 6.0, False, ("steps", 4, 8)),  # 0.75 s a step: four make 3 s
        ("masked", {"steps": 16}, 24.0, False, ("steps", 2, 16)),  # the decode options' steps count
        ("flow", {}, 19.1, False, ("steps", 1, 4)),  # Sana-600M's: 4 steps of ~4.8 s
        ("flow", {}, 19.1, True, None),  # step buckets: every bucket's graph must run
        ("flow", {"steps": 1}, 60.0, False, None),  # one step is the whole decode
    ],
)
def test_a_long_masked_or_flow_decode_is_timed_on_its_first_steps(
    demo_bundles, kind, decode, decode_s, bucketed, expected
):
    """Steps enough for about SPEED_PART_S by the first FP32 decode's clock, where that is fewer
    than the decode takes; the decode options' steps win over the bundle's defaults."""
    from edgekit.bundle import Bundle
    from edgekit.quantize import decodes

    bundle = Bundle.load(demo_bundles[kind])
    defaults = {"masked": 8, "flow": 4}
    assert bundle.decode_defaults.get("steps", defaults[kind]) == defaults[kind]  # the cases assume these
    part = decodes.speed_part(bundle, decode, decode_s=decode_s, bucketed=bucketed)
    assert part == (None if expected is None else decodes.SpeedPart(*expected))
    if part is not None:
        assert part.option == "steps" and decodes.timed_share(part) == part.timed / part.of


def test_the_speed_record_of_a_partly_timed_decode_scales_to_a_whole_one():
    from edgekit.quantize import decodes

    doc, warning = _speed_record(3000, 1000, decodes.SpeedPart("steps", 1, 4))
    assert warning is None and (doc["fp32_ms_per_decode"], doc["int8_ms_per_decode"]) == (12000.0, 4000.0)
    assert doc["timed_steps"]["steps"] == 1 and doc["timed_steps"]["of"] == 4
    assert "x 4" in doc["timed_steps"]["scaled"] and "timed_tokens" not in doc


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
