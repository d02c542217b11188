"""`edgekit profile --runtime aihub --devices D1,D2`: one profile job per device (and per step
bucket graph), all submitted before any is waited on, a progress line per job, the results side
by side per device (per call from the device, per decode = calls x per call + the host loop
measured here), ops off the NPU a warning and --require-npu exit 4. No network: the client is an
autospec of the real qai_hub module (tests/fakes/aihub.py)."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from edgekit.builder import build_bundle
from edgekit.bundle import Bundle, bucket_binding
from edgekit.cli import app
from edgekit.profile import ProfileConfig, profile_bundle
from tests.fakes.aihub import FakeHub

S24, QRD, XELITE = "Samsung Galaxy S24 (Family)", "Snapdragon 8 Gen 3 QRD", "Snapdragon X Elite CRD"


def _profile(root, kit, devices, **kw):
    lines: list[str] = []
    cfg = ProfileConfig(runtimes=("aihub",), devices=devices, measure=kit.FAST, power="off", **kw)
    return profile_bundle(root, cfg, progress=lambda label, done, total: lines.append(label)), lines


def test_one_job_per_device_at_once_and_the_results_side_by_side(kit, tmp_path, monkeypatch):
    hub = FakeHub(monkeypatch)
    hub.profiles[XELITE] = "profile_cpu_fallback.json"
    root = kit.masked(tmp_path / "masked")
    doc, lines = _profile(root, kit, (S24, "snapdragon-x-elite"))  # a Snapdragon target stands for its first device
    assert doc["variants"] == [] and doc["aihub"]["measured_where"].startswith("per network call: AI Hub's device")
    # No AI Hub engine in the bundle: one compile job per device, the graph's static shapes as input specs.
    compiles = hub.calls("submit_compile_job")
    assert [c["device"].name for c in compiles] == [S24, XELITE]
    assert all(c["options"] == "--target_runtime qnn_context_binary --truncate_64bit_io" for c in compiles)
    assert compiles[0]["input_specs"] == {"tokens": ((kit.B, kit.L), "int64")}
    profiles = hub.calls("submit_inference_job")
    assert [(p["device"].name, p["profile"], p["inputs"]) for p in profiles] == [
        (S24, True, None),
        (XELITE, True, None),
    ]
    assert [p["model"].model_id for p in profiles] == [f"m{i[1:]}" for i in hub.submitted("compile")]
    order = [(e[0], e[1]) for e in hub.events]
    assert (
        order[: order.index(("status", "profile"))].count(("submit", "profile")) == 2
    )  # both submitted before any wait
    rows = {r["device"]: r for r in doc["aihub"]["devices"]}
    s24, xe = rows[S24], rows[XELITE]
    loop = doc["aihub"]["host_loop"]["fp16"]
    assert loop["calls"] == 4 and loop["host_ms"] > 0 and loop["runtime"] == "ort fp32"  # 4 steps, one call each
    assert s24["per_call_ms"] == pytest.approx(0.805) and s24["decode"]["device_ms"] == pytest.approx(4 * 0.805)
    assert s24["decode"]["estimate_ms"] == pytest.approx(4 * 0.805 + loop["host_ms"])
    assert "4 calls x the device's per-call time + the host loop measured on" in s24["decode"]["how"]
    assert (
        s24["peak_memory_bytes"] == 12_582_912
        and s24["npu_share"] == 1.0
        and s24["chipset"] == "qualcomm-snapdragon-8gen3"
    )
    assert xe["npu_share"] == 0.5 and xe["per_call_ms"] == pytest.approx(2.41)
    assert not doc["aihub"]["npu_only"]
    assert any(
        w.startswith(
            f"aihub fp16 @ {XELITE}: 2 of 4 ops fell back off the NPU (2 on the CPU): head (MatMul), softmax (Softmax)"
        )
        for w in doc["warnings"]
    )
    for job in hub.submitted("profile"):  # a progress line per job as its state moves
        assert any(job in line and line.endswith("MEASURING_PERFORMANCE") for line in lines)
        assert any(job in line and line.endswith("SUCCESS") for line in lines)
    assert len(doc["aihub"]["jobs"]) == 4 and all(j["state"] == "succeeded" for j in doc["aihub"]["jobs"])


def test_a_built_engine_serves_every_device_of_its_chipset(kit, tmp_path, monkeypatch):
    hub = FakeHub(monkeypatch)
    root = kit.masked(tmp_path / "masked")
    engine = build_bundle(root, "snapdragon-8-gen-3", "fp16", runtime="aihub")["engine"]
    doc, _ = _profile(root, kit, (S24, QRD))
    assert hub.client.submit_compile_job.call_count == 1  # the build's; none for profiling
    assert {p["model"].model_id for p in hub.calls("submit_inference_job")} == {engine["aihub"]["model_id"]}
    assert [r["model"] for r in doc["aihub"]["devices"]] == ["engine snapdragon-8-gen-3/fp16@aihub"] * 2
    doc, _ = _profile(root, kit, ())  # no --devices: the devices the bundle's engines were compiled for
    assert [r["device"] for r in doc["aihub"]["devices"]] == [S24]


def test_step_bucket_graphs_are_profiled_one_job_each_and_weighted_by_their_calls(kit, tmp_path, monkeypatch):
    hub = FakeHub(monkeypatch)
    root = kit.masked(tmp_path / "masked", int8=True)
    bundle = Bundle.load(root)
    staged = bundle.staging_path("int8-bucket-1.onnx")
    staged.write_bytes(bundle.path_of("int8").read_bytes())
    bundle.add_artifact("int8-bucket-1", staged, made_by="test", config={"profile": "qnn"}, suffix=".onnx")
    names = ["int8", "int8-bucket-1"]
    binding = bucket_binding(
        "mask_share", [0.6], [(n, bundle.artifact(n).sha256) for n in names]
    )  # as quantize records it
    bundle.record(
        "quantization",
        {
            "profile": "qnn",
            "step_buckets": {"n": 2, "by": "mask_share", "boundaries": [0.6], "artifacts": names, "binding": binding},
        },
    )
    bundle.save()
    build_bundle(root, "snapdragon-8-gen-3", "int8", runtime="aihub")
    doc, _ = _profile(root, kit, (S24,))
    (row,) = doc["aihub"]["devices"]
    graphs = [f"graph_m{i[1:]}" for i in hub.submitted("compile")]
    assert [p["options"] for p in hub.calls("submit_inference_job")] == [
        f"--qnn_options context_enable_graphs={g}" for g in graphs
    ]
    buckets = row["buckets"]
    assert [b["graph"] for b in buckets] == graphs and all(b["calls_per_decode"] > 0 for b in buckets)
    assert sum(b["calls_per_decode"] for b in buckets) == pytest.approx(row["decode"]["calls"])
    assert row["decode"]["device_ms"] == pytest.approx(sum(b["calls_per_decode"] * b["per_call_ms"] for b in buckets))


def test_require_npu_exits_4_and_the_report_shows_the_devices(kit, tmp_path, monkeypatch):
    hub = FakeHub(monkeypatch)
    hub.profiles[XELITE] = "profile_cpu_fallback.json"
    root = kit.masked(tmp_path / "masked")
    report = tmp_path / "report"
    args = [
        "profile",
        str(root),
        "--runtime",
        "aihub",
        "--devices",
        f"{S24},{XELITE}",
        "--iters",
        "2",
        "--min-seconds",
        "0",
        "--warmup",
        "1",
        "--power",
        "off",
        "--html",
        str(report),
        "--json",
    ]
    r = CliRunner().invoke(app, [*args, "--require-npu"])
    assert r.exit_code == 4, r.output
    doc = json.loads(r.stdout)  # one document; the client's prints stayed off stdout
    assert [d["device"] for d in doc["aihub"]["devices"]] == [S24, XELITE] and "--require-npu" in r.stderr
    page = (report / "profile.html").read_text()
    assert (
        "<h2>On Qualcomm AI Hub's devices, side by side</h2>" in page
        and f"aihub fp16 @ {XELITE}" in page
        and "ops on NPU" in page
    )
    r = CliRunner().invoke(
        app, [*args[:-3], "--require-npu", "--resume"]
    )  # the same jobs, collected: nothing submitted
    assert (
        r.exit_code == 4
        and hub.client.submit_inference_job.call_count == 2
        and hub.client.submit_compile_job.call_count == 2
    )
    assert "collected from an earlier run" in r.stderr


def test_devices_need_the_aihub_runtime(kit, tmp_path):
    from edgekit.errors import UsageError

    with pytest.raises(UsageError, match="--devices is for AI Hub's devices; add --runtime aihub"):
        ProfileConfig(devices=(S24,))
