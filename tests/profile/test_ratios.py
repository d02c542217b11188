"""Ratios between profiled variants say when they are within noise (issue #44.3): each variant
records how it was timed (``timing``: median, spread, the host's load), and a ratio whose spread is
not below its difference, or whose variant was timed on a busy host, is marked so in the JSON and
the table. Stand-in timings: no time is asserted."""

from __future__ import annotations

import pytest

from edgekit.probes.speed import Timing
from edgekit.profile.ratios import ratio
from edgekit.profile.table import ratios_table
from edgekit.vocabulary import SPEED_VERDICTS


def _variant(name: str, samples, load: float = 0.3) -> dict:
    window = {"load_before": load, "load_after": load, "own_cores": 1.0, "cores": 2, "cpu_class": "avx2"}
    t = Timing.of(samples, window)
    return {
        "id": name,
        "latency": {"median_ms": t.median_ms, "p99_ms": max(samples)},
        "throughput": {"items_per_s": 1000 / t.median_ms},
        "energy": {},
        "breakdown": {"host_overhead_share": 0.1},
        "memory": {},
        "timing": t.to_json(samples=False),
    }


@pytest.mark.parametrize(
    "int8,fp32,verdict,why",
    [
        ([70, 71, 69, 70], [100, 101, 99, 100], "faster", []),
        ([130, 131, 129], [100, 101, 99], "slower", []),
        ([80, 120, 100, 90, 110], [100, 101, 99], "within noise", ["spread 20.0% > difference 0.0%"]),
    ],
)
def test_a_ratio_is_within_noise_where_the_spread_is_not_below_the_difference(int8, fp32, verdict, why):
    r = ratio(_variant("ort int8", int8), _variant("ort fp32", fp32), "int8/fp32 (ort)")
    assert (r["verdict"], r["unsure"]) == (verdict, why)
    assert r["median_latency"] == pytest.approx(float(sorted(int8)[len(int8) // 2]) / 100, rel=0.02)


def test_a_ratio_timed_on_a_busy_host_is_within_noise_and_the_table_says_so():
    r = ratio(_variant("ort int8", [70, 71, 69], load=3.1), _variant("ort fp32", [100, 101, 99]), "int8/fp32 (ort)")
    assert r["verdict"] == "within noise" and r["unsure"] == ["load 3.1 on 2 cores (2.1 of it other processes)"]
    columns, rows = ratios_table({"ratios": [r]})
    assert columns == ["ratio", "int8/fp32 (ort)"] and ["latency verdict", "within noise"] in rows


def test_a_report_from_before_the_timing_record_has_no_verdict():
    old = [_variant("a", [70, 71, 69]), _variant("b", [100, 101, 99])]
    for v in old:
        del v["timing"]
    assert ratio(old[0], old[1], "a/b")["verdict"] is None


def test_every_profiled_variant_records_how_it_was_timed(profile_doc):
    measured = [v for v in profile_doc["variants"] + profile_doc["compare_ar"]["variants"] if v["available"]]
    assert len(measured) >= 3  # ort fp32, ort int8, AR ort fp32
    for v in measured:
        t = v["timing"]
        assert t["n"] == v["latency"]["n"] and t["median_ms"] == pytest.approx(v["latency"]["median_ms"])
        assert t["cores"] >= 1 and t["cpu_class"] and "load_before" in t and "samples_ms" not in t
    (r,) = profile_doc["ratios"]
    assert r["verdict"] in SPEED_VERDICTS and isinstance(r["unsure"], list)
    timed = [s for s in profile_doc["compare_ar"]["speedups"] if s["speedup"] is not None]
    assert timed and all(s["verdict"] in SPEED_VERDICTS for s in timed)


def test_no_energy_ratio_from_a_variant_whose_probe_could_not_see_its_device():
    a, b = _variant("ort int8", [70, 71, 69]), _variant("ort fp32", [100, 101, 99])
    a["energy"] = {"available": True, "probe": "rapl", "gross_mj": 300.0}
    b["energy"] = {"available": True, "probe": "rapl", "gross_mj": 400.0}
    assert ratio(a, b, "int8/fp32 (ort)")["energy_per_decode"] == pytest.approx(0.75)
    # A variant's energy refused (the probe reads another device) never enters a ratio, even were
    # a figure left in the document.
    b["energy"] = {"available": False, "probe": "nvml", "gross_mj": 400.0, "reason": "nvml reads ..."}
    assert ratio(a, b, "int8/fp32 (ort)")["energy_per_decode"] is None


def test_the_session_peak_ratio_compares_what_each_session_added():
    """peak_rss compares process peaks (the later variant's includes what the earlier left);
    session_peak compares each session's own, which #42's "session RSS" goal asks for."""
    int8, fp32 = _variant("ort int8", [70, 71, 69]), _variant("ort fp32", [100, 101, 99])
    int8["memory"] = {"peak_rss_bytes": 3_000, "session_peak_bytes": 700}
    fp32["memory"] = {"peak_rss_bytes": 3_200, "session_peak_bytes": 2_800}
    r = ratio(int8, fp32, "int8/fp32 (ort)")
    assert r["session_peak"] == 0.25 and r["peak_rss"] == pytest.approx(3_000 / 3_200)
    assert ["session peak", 0.25] in ratios_table({"ratios": [r]})[1]
    assert ratio(_variant("a", [1, 1, 1]), _variant("b", [2, 2, 2]), "a/b")["session_peak"] is None
