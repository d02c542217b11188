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
