"""`edgekit build --precision auto`: INT8 only where quantize's record says it met its budget, is
exact on the target's CPU class and was not slower than FP32 there; the reason is said."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest

from edgekit.arithmetic import SCHEMES
from edgekit.builder.precision import choose_precision
from edgekit.host import HostFacts
from edgekit.manifest_sections import QuantizationSummary
from edgekit.targets import load_target

AVX2 = HostFacts("x86_64", "EPYC", None, None, False, ("avx2",))
AMX = HostFacts("x86_64", "Xeon", None, None, False, ("avx2", "avx512f", "avx512_vnni", "amx_int8"))


def _bundle(passed=True, scheme="u8s8-pair", speed_isa="avx2", ratio=1.3, profile="cpu", int8=True):
    q = {
        "profile": profile,
        "passed": passed,
        "arithmetic": {"isa": speed_isa, "scheme": SCHEMES[scheme].to_json(), "validated_on": speed_isa},
        "speed": {"measured": True, "isa": speed_isa, "runtime": "ort", "int8_speedup": ratio},
    }
    return SimpleNamespace(
        root="b",
        quantization=QuantizationSummary.from_json(q),
        has=lambda name: name == "fp32" or (int8 and name == "int8"),
    )


@pytest.mark.parametrize(
    "case,host,target,want,says",
    [
        ("faster", AVX2, "cpu", "int8", "ran 1.30x FP32 per decode on avx2"),
        ("slower", AVX2, "cpu", "fp32", "FP32 is faster there"),
        ("missed", AVX2, "cpu", "fp32", "missed its accuracy budget"),
        ("none", AVX2, "cpu", "fp32", "no int8 model"),
        ("saturates", AVX2, "x86-avx2", "fp32", "saturates on avx2"),
        ("other-class", AVX2, "x86-amx", "int8", "not on amx"),
        ("trt-profile", AVX2, "cpu", "fp32", "needs 'cpu'"),
        ("host-is-amx", AMX, "cpu", "int8", "not on amx"),
    ],
)
def test_auto_picks_the_fastest_precision_within_budget_and_says_why(case, host, target, want, says):
    bundle = {
        "faster": _bundle(),
        "slower": _bundle(ratio=0.8),
        "missed": _bundle(passed=False),
        "none": _bundle(int8=False),
        "saturates": _bundle(scheme="u8s8", speed_isa="avx512-vnni"),
        "other-class": _bundle(),
        "trt-profile": _bundle(profile="trt"),
        "host-is-amx": _bundle(),
    }[case]
    precision, why = choose_precision(bundle, load_target(target), host)
    assert precision == want and says in why and "\n" not in why


def test_build_auto_from_the_cli_records_the_choice(tmp_path, demo_bundles):
    import shutil

    from typer.testing import CliRunner

    from edgekit.cli import app

    root = tmp_path / "m"
    shutil.copytree(demo_bundles["masked"], root)
    r = CliRunner().invoke(app, ["build", str(root), "--target", "cpu", "--precision", "auto", "--json"])
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)
    assert doc["precision"] == "fp32" and "no int8 model" in doc["precision_choice"] and doc["status"] == "built"


def test_an_older_record_without_its_measurement_still_decides_and_says_so():
    precision, why = choose_precision(_bundle(), load_target("cpu"), AVX2)
    assert precision == "int8" and why.endswith("how it was measured is not recorded)")


@pytest.mark.parametrize(
    "loads,want,says",
    [
        ((3.1,), "fp32", "within noise when quantize timed it (load 3.1 on 2 cores (2.1 of it other processes))"),
        ((0.3,), "int8", "INT8 met its budget and ran 1.43x FP32 per decode on avx2 (ort, measured by quantize)"),
    ],
)
def test_auto_ships_fp32_where_quantize_timed_int8_within_noise(tiny_bundle, loads, want, says):
    """quantize's speed record (its own writer, on a stand-in clock and load) saved in a real
    manifest and read back: a busy host's timing keeps FP32, the safe choice, and says why; the
    build document carries how it was measured."""
    from build_helpers import tiny_model

    from edgekit.builder.precision import precision_evidence
    from edgekit.bundle import Bundle
    from edgekit.probes.speed import decide
    from edgekit.quantize.speed import speed_record
    from tests.fakes.host import StandInHost

    host = StandInHost(loads=loads)
    fns = {"fp32": host.call("fp32", [100]), "int8": host.call("int8", [70])}
    decision = decide(fns, 5, pair=lambda t: ("int8", "fp32"), probe=host.probe)
    speed, warning = speed_record(decision, "ort", AVX2, 2, 0)
    assert (warning is None) == (want == "int8")
    b = tiny_bundle(int8=tiny_model(), profile="cpu")
    arithmetic = {"isa": "avx2", "scheme": SCHEMES["u8s8-pair"].to_json(), "validated_on": "avx2"}
    b.record("quantization", {"profile": "cpu", "passed": True, "arithmetic": arithmetic, "speed": speed})
    b.save()
    loaded = Bundle.load(b.root)
    rec = loaded.quantization.speed
    assert rec.verdict == decision.verdict and rec.unsure == decision.unsure
    assert rec.timing["timings"]["int8"]["samples_ms"] == [70.0] * 5 and rec.timing["timings"]["int8"]["load_after"]
    precision, why = choose_precision(loaded, load_target("cpu"), AVX2)
    assert precision == want and says in why and "\n" not in why
    evidence = precision_evidence(loaded)
    assert evidence["verdict"] == decision.verdict and evidence["timing"]["rounds"] == decision.rounds


def test_a_recorded_verdict_edgekit_does_not_know_is_one_line(tiny_bundle):
    from build_helpers import tiny_model

    from edgekit.bundle import Bundle
    from edgekit.errors import BundleError

    b = tiny_bundle(int8=tiny_model(), profile="cpu")
    b.record("quantization", {"profile": "cpu", "passed": True, "speed": {"measured": True, "verdict": "quick"}})
    b.save()
    with pytest.raises(BundleError, match=r"quantization\.speed\.verdict: expected null or one of faster, slower"):
        Bundle.load(b.root)
