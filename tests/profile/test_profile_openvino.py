"""profile --runtime ort,openvino: both engines side by side in one run, each with the
precisions it runs, the OpenVINO settings in every variant, and a crossover per engine."""

from __future__ import annotations

import pytest

from edgekit.bundle import Bundle
from edgekit.errors import UsageError
from edgekit.profile import ProfileConfig, plan_variants, profile_bundle

pytest.importorskip("openvino")


def test_engines_side_by_side_with_the_precisions_each_runs(tiny, kit):
    cfg = ProfileConfig(
        runtimes=("ort", "openvino"), precisions=("fp32", "int8", "bf16"), measure=kit.FAST, power="off", threads=1
    )
    assert [(v.runtime, v.precision) for v in plan_variants(Bundle.load(tiny["masked8"]), cfg)] == [
        ("ort", "fp32"),
        ("ort", "int8"),
        ("openvino", "fp32"),
        ("openvino", "int8"),
        ("openvino", "bf16"),
    ]
    from edgekit.runtimes.openvino import device_capabilities

    precisions = ("fp32", "int8", "bf16") if "BF16" in device_capabilities() else ("fp32", "int8")
    doc = profile_bundle(
        tiny["masked8"],
        ProfileConfig(runtimes=("ort", "openvino"), precisions=precisions, measure=kit.FAST, power="off", threads=1),
    )
    by_id = {v["id"]: v for v in doc["variants"]}
    ov = by_id["openvino fp32"]
    assert ov["runtime_settings"]["inference_precision"] == "f32" and ov["runtime_settings"]["threads"] == 1
    assert ov["device"] == "CPU" and by_id["ort fp32"]["runtime_settings"] == {}
    assert ov["memory"]["model_bytes"] == Bundle.load(tiny["masked8"]).artifact("fp32").bytes
    names = {r["name"] for r in doc["ratios"]}
    assert {"openvino/ort (fp32)", "openvino/ort (int8)", "int8/fp32 (openvino)"} <= names
    if "bf16" in precisions:
        assert by_id["openvino bf16"]["runtime_settings"]["inference_precision"] == "bf16"
        assert "bf16/fp32 (openvino)" in names


def test_a_precision_none_of_the_runtimes_runs_is_an_error(tiny, kit):
    with pytest.raises(UsageError, match="--precision bf16 runs on none of --runtime ort; bf16 runs on openvino"):
        plan_variants(
            Bundle.load(tiny["masked"]), ProfileConfig(runtimes=("ort",), precisions=("bf16",), measure=kit.FAST)
        )


def test_nar_vs_ar_reports_a_crossover_per_engine(tiny, kit):
    doc = profile_bundle(
        tiny["masked"],
        ProfileConfig(
            runtimes=("ort", "openvino"),
            precisions=("fp32",),
            measure=kit.FAST,
            power="off",
            compare_ar=True,
            ar_bundle=tiny["ar"],
            sweep_lengths=(),
            threads=1,
        ),
    )
    crossovers = doc["compare_ar"]["crossovers"]
    assert [c["runtime"] for c in crossovers] == ["ort", "openvino"] and doc["compare_ar"]["crossover"] == crossovers[0]
    assert all(c["available"] and c["seed_formula"]["n"] is not None for c in crossovers)
    from edgekit.profile import crossover_lines

    assert any(line.startswith("crossover on openvino fp32, K=") for line in crossover_lines(doc))


def test_fastest_engine_times_every_available_engine_and_picks_the_lowest(tiny):
    from edgekit.profile import fastest_engine

    pick = fastest_engine(Bundle.load(tiny["masked8"]), "int8", threads=1, rounds=3)
    assert pick["candidates"] == ["openvino", "ort"] and set(pick["median_ms"]) == {"openvino", "ort"}
    assert pick["rounds"] == 3 and pick["recorded"] == "ort"  # no engine built: edgekit's default
    # Surely faster: the lowest median; within noise on this (shared) host: the recorded engine, said once.
    if pick["within_noise"]:
        assert pick["runtime"] == "ort" and pick["warning"].startswith("profile engine: kept ort")
    else:
        assert pick["runtime"] == min(pick["median_ms"], key=pick["median_ms"].get) and pick["warning"] is None


def test_without_openvino_the_demo_engine_is_ort(tiny, monkeypatch):
    import sys

    from edgekit.profile import available_engines, fastest_engine

    monkeypatch.setitem(sys.modules, "openvino", None)  # as if not installed
    assert available_engines() == ["ort"]
    assert fastest_engine(Bundle.load(tiny["masked"]), "fp32", rounds=1)["runtime"] == "ort"
