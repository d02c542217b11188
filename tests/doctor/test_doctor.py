"""`edgekit doctor`: what this host runs for each target, and every missing piece with its
install line. Real facts of this host where they are knowable, fake hosts for the rest."""

from __future__ import annotations

import json
import sys

import onnxruntime as ort
import pytest

from edgekit.builder import HostFacts
from edgekit.doctor import DOCTOR_SCHEMA, PROVIDER_INSTALL, doctor, environment, target_report, trt_limits
from edgekit.probes.power import PowerSampler
from edgekit.targets import list_targets, load_target

X86 = HostFacts("x86_64", "Test CPU", None, None, False)
# JetPack 6.2 (L4T 36.4.3) ships TensorRT 10.3; JetPack 6.0 (L4T 36.3.0) ships 8.6.2.
ORIN = HostFacts("aarch64", "ARMv8", "NVIDIA Jetson Orin Nano Developer Kit", "36.4.3", True)
ORIN_JP60 = HostFacts("aarch64", "ARMv8", "NVIDIA Jetson Orin Nano Developer Kit", "36.3.0", True)
JETSON_POWER = {"jetson": {"probe": "jetson", "available": True, "reason": None}}
CPU_ONLY_ENV = {
    "onnxruntime": "1.32.0",
    "providers": ["CPUExecutionProvider"],
    "tensorrt": None,
    "gpu": None,
    "nvpmodel": None,
}


def missing(report) -> dict[str, dict]:
    return {m["what"]: m for m in report["missing"]}


def test_this_host_runs_the_cpu_target():
    doc = doctor("cpu")
    assert doc["schema"] == DOCTOR_SCHEMA and [t["target"] for t in doc["targets"]] == ["cpu"]
    cpu = doc["targets"][0]
    assert cpu["runs_with"] == "ort" and cpu["device"]["matches"] and cpu["ready"]
    (ort_entry,) = cpu["runtimes"]
    assert ort_entry["version"] == ort.__version__ and ort_entry["providers"] == ["CPUExecutionProvider"]
    assert doc["environment"]["providers"] == ort.get_available_providers()
    power = cpu["power"]
    assert power["probe"] and (power["available"] or power["reason"])  # a reason, never a made-up figure
    json.dumps(doc)


def test_every_target_is_reported():
    doc = doctor(host=X86)
    assert [t["target"] for t in doc["targets"]] == [t.name for t in list_targets()]


def test_gpu_target_without_gpu_lists_install_lines():
    report = target_report(load_target("nvidia-gpu"), X86, CPU_ONLY_ENV, {})
    assert [r["runtime"] for r in report["runtimes"]] == ["trt", "ort"]
    assert report["runtimes"][0] == {
        "runtime": "trt",
        "available": False,
        "version": None,
        "gpu": None,
        "problems": ["tensorrt is not installed"],
        "limits": [],
    }
    assert report["runtimes"][1]["providers_missing"] == ["CUDAExecutionProvider"]
    lacking = missing(report)
    assert lacking["TensorRT"]["install"] == "pip install 'edgekit[trt]'"
    assert lacking["ONNX Runtime CUDAExecutionProvider"]["install"] == PROVIDER_INSTALL["CUDAExecutionProvider"]
    assert "onnxruntime-gpu" in PROVIDER_INSTALL["CUDAExecutionProvider"]
    assert "no NVIDIA GPU is visible" in lacking["the nvidia-gpu device"]["why"]
    assert report["runs_with"] == "ort" and not report["ready"]


def test_jetson_target_on_a_jetson_with_tensorrt():
    env = dict(
        CPU_ONLY_ENV,
        tensorrt="10.3.0",
        gpu={"name": "Orin", "compute_capability": "8.7"},
        nvpmodel="/usr/sbin/nvpmodel",
    )
    report = target_report(
        load_target("jetson-orin-nano"), ORIN, env, {"jetson": {"probe": "jetson", "available": True, "reason": None}}
    )
    assert report["runtimes"][0]["available"] and report["runs_with"] == "trt"
    assert report["device"] == {"arch": "aarch64", "matches": True, "reasons": []}
    assert report["ready"] and report["nvpmodel"] == "/usr/sbin/nvpmodel"
    assert list(missing(report)) == ["ONNX Runtime CUDAExecutionProvider"]  # only the ORT fallback's GPU provider


def test_a_tensorrt_8_jetson_is_told_what_it_lacks():
    env = dict(
        CPU_ONLY_ENV,
        tensorrt="8.6.2.3",
        gpu={"name": "Orin", "compute_capability": "8.7"},
        nvpmodel="/usr/sbin/nvpmodel",
    )
    wrong = target_report(load_target("jetson-orin-nano"), ORIN_JP60, env, JETSON_POWER)
    trt = wrong["runtimes"][0]
    assert not trt["available"] and not wrong["ready"]
    assert trt["problems"] == ["target jetson-orin-nano is for TensorRT 10.3 (JetPack 6.1, 6.2), this host has 8.6.2.3"]
    assert missing(wrong)["TensorRT 10.3"]["install"] == "use --target jetson-orin-nano-jp60"
    assert "this Jetson runs L4T 36.3.0 (JetPack 6.0)" in wrong["device"]["reasons"][0]
    right = target_report(load_target("jetson-orin-nano-jp60"), ORIN_JP60, env, JETSON_POWER)
    assert right["ready"] and right["runs_with"] == "trt"
    limits = " | ".join(right["runtimes"][0]["limits"])
    for says in (
        "runs INT64 graph inputs/outputs as INT32",
        "opsets up to 17: export with --opset 17",
        "no strongly typed networks",
        "BuilderFlag.INT8",
    ):
        assert says in limits
    assert "builder_optimization_level" not in limits  # 8.6 has it; 8.5 does not


def test_tensorrt_8_5_and_older_hosts():
    assert any("no builder_optimization_level" in limit for limit in trt_limits("8.5.2.2"))
    assert trt_limits("10.3.0") == [] and trt_limits("11.1.0") == []
    gpu = load_target("nvidia-gpu")
    assert any("lint allows opset 20" in limit for limit in trt_limits("8.6.1", gpu))  # pip TensorRT 8 on x86
    env = dict(CPU_ONLY_ENV, tensorrt="8.4.1.5", gpu={"name": "Xavier", "compute_capability": "7.2"})
    old = target_report(
        load_target("jetson-xavier"), HostFacts("aarch64", "ARMv8", "Jetson Xavier NX", "35.4.1", True), env, {}
    )
    assert "lacks the name-based IO API" in old["runtimes"][0]["problems"][0]
    assert missing(old)["TensorRT >= 8.5"]["install"] == "upgrade to JetPack 5.1 or newer"


def test_jetpack_5_without_bindings_for_this_python_gets_the_build_route():
    report = target_report(
        load_target("jetson-xavier"),
        HostFacts("aarch64", "ARMv8", "Jetson Xavier NX", "35.4.1", True),
        CPU_ONLY_ENV,
        {},
    )
    assert "build TensorRT 8.5's bindings for this Python" in missing(report)["TensorRT"]["install"]


def test_jetson_target_elsewhere_says_why():
    env = dict(CPU_ONLY_ENV, tensorrt="10.3.0", gpu={"name": "RTX 4090", "compute_capability": "8.9"})
    report = target_report(load_target("jetson-xavier"), X86, env, {})
    trt = report["runtimes"][0]
    assert not trt["available"] and trt["problems"] == [
        "target jetson-xavier is for TensorRT 8.5 (JetPack 5.1.x), this host has 10.3.0",
        "GPU RTX 4090 has compute capability 8.9, target needs 7.2",
    ]
    assert report["device"]["reasons"] == [
        "this host is x86_64, target jetson-xavier is aarch64",
        "this host is not a Jetson (no /etc/nv_tegra_release)",
    ]
    assert "nvpmodel (Jetson power modes)" in missing(report)
    no_trt = target_report(load_target("jetson-xavier"), X86, CPU_ONLY_ENV, {})
    assert "JetPack" in missing(no_trt)["TensorRT"]["install"]


def test_power_probe_comes_from_probes_power_detect(monkeypatch):
    import edgekit.doctor.stage as doctor_stage

    class Fake(PowerSampler):
        probe = "rpi"

    asked = []
    monkeypatch.setattr(doctor_stage, "detect", lambda choice: asked.append(choice) or Fake())
    cache: dict = {}
    report = target_report(load_target("rpi5"), X86, CPU_ONLY_ENV, cache)
    assert report["power"] == {"probe": "rpi", "available": True, "reason": None} and asked == ["rpi"]
    target_report(load_target("rpi5"), X86, CPU_ONLY_ENV, cache)
    assert asked == ["rpi"]  # detected once per probe


def test_environment_without_tensorrt(monkeypatch):
    monkeypatch.setitem(sys.modules, "tensorrt", None)
    env = environment(X86)
    assert env["tensorrt"] is None and env["onnxruntime"] == ort.__version__
    assert set(env["tools"]) == {"ssh", "scp", "rsync"}


@pytest.mark.parametrize("provider", ["NnapiExecutionProvider", "XnnpackExecutionProvider", "QNNExecutionProvider"])
def test_android_providers_have_install_lines(provider):
    report = target_report(load_target("android-arm64"), X86, CPU_ONLY_ENV, {})
    assert missing(report)[f"ONNX Runtime {provider}"]["install"] == PROVIDER_INSTALL[provider]


def test_intel_targets_report_openvino_its_devices_and_the_missing_drivers():
    pytest.importorskip("openvino")
    from edgekit.runtimes.openvino import openvino_version

    doc = doctor("intel-cpu")
    cpu = doc["targets"][0]
    assert doc["environment"]["openvino"] == openvino_version() and "CPU" in doc["environment"]["openvino_devices"]
    assert isinstance(doc["host"]["cpu_isa"], list)
    assert (
        cpu["runs_with"] == "openvino"
        and cpu["ready"]
        and [r["runtime"] for r in cpu["runtimes"]] == ["openvino", "ort"]
    )
    assert "INT8" in cpu["runtimes"][0]["capabilities"]
    env = dict(CPU_ONLY_ENV, openvino=openvino_version(), openvino_devices={"CPU": ["FP32", "INT8"]})
    for name, device, driver in (("intel-gpu", "GPU", "intel-opencl-icd"), ("intel-npu", "NPU", "linux-npu-driver")):
        report = target_report(load_target(name), X86, env, {})
        assert report["runs_with"] is None and not report["ready"]
        assert report["device"]["reasons"] == [f"no Intel {device} is visible to OpenVINO here"]
        assert driver in missing(report)[f"an Intel {device} with its driver"]["install"]


def test_intel_cpu_without_openvino_runs_with_ort_and_says_how_to_install():
    env = dict(CPU_ONLY_ENV, openvino=None)
    report = target_report(load_target("intel-cpu"), X86, env, {})
    assert report["runs_with"] == "ort" and report["runtimes"][0]["available"] is False
    assert missing(report)["OpenVINO"]["install"] == "pip install 'edgekit[openvino]'"


# ---- every runtime a target lists, through the runtime registry (issue #31 point 2) -------------
SNAPDRAGONS = [t.name for t in list_targets() if "qnn" in t.runtimes]


@pytest.mark.parametrize("name", SNAPDRAGONS)
def test_snapdragon_targets_run_with_qnn_where_onnxruntime_qnn_is_installed(name):
    """onnxruntime-qnn is installed here: the doctor checks the qnn runtime (not TensorRT), finds it
    usable through the emulated HTP and says so; the device (an arm64 phone or laptop) is not this host."""
    pytest.importorskip("onnxruntime_qnn")
    doc = doctor(name)
    assert (
        doc["environment"]["onnxruntime_qnn"]
        and doc["environment"]["qnn_sdk"]
        and "qnn_error" not in doc["environment"]
    )
    (report,) = doc["targets"]
    qnn, aihub = report["runtimes"]
    assert qnn["runtime"] == "qnn" and qnn["available"] and qnn["problems"] == [] and aihub["runtime"] == "aihub"
    assert qnn["htp_arch"] == load_target(name).qnn.htp_arch
    assert report["runs_with"] == "qnn"
    assert not any("TensorRT" in m["what"] or "tensorrt" in (m.get("why") or "") for m in report["missing"])
    if doc["host"]["arch"] != "aarch64":
        assert qnn["emulated"] and "emulated" in qnn["notes"][0] and not report["ready"]


def test_snapdragon_target_without_onnxruntime_qnn_says_how_to_install(no_aihub):
    env = dict(CPU_ONLY_ENV, onnxruntime_qnn=None)
    report = target_report(load_target("snapdragon-8-gen-3"), X86, env, {})
    assert report["runtimes"][0]["runtime"] == "qnn" and not report["runtimes"][0]["available"]
    assert report["runs_with"] is None
    assert missing(report)["onnxruntime-qnn (the QNN HTP backend)"]["install"] == "pip install 'edgekit[qnn]'"


def test_every_built_in_runtime_has_a_doctor_check_or_says_why_not():
    """A plugin backend gets the registry's check (is its package importable); each built-in one
    has its own or a reason why no target lists it."""
    from edgekit.doctor.stage import NOT_REPORTED, RUNTIME_REPORTS
    from edgekit.vocabulary import RUNTIMES, TARGET_RUNTIMES

    assert set(RUNTIME_REPORTS) | set(NOT_REPORTED) == set(RUNTIMES)
    assert not set(RUNTIME_REPORTS) & set(NOT_REPORTED) and set(TARGET_RUNTIMES) <= set(RUNTIME_REPORTS)


@pytest.fixture
def no_aihub(monkeypatch, tmp_path):
    """No AI Hub client configured, whatever this machine's user has."""
    monkeypatch.delenv("QAI_HUB_API_TOKEN", raising=False)
    monkeypatch.setenv("QAIHUB_CLIENT_INI", str(tmp_path / "absent.ini"))
    return tmp_path / "absent.ini"


def test_snapdragon_target_says_whether_an_ai_hub_client_is_configured_and_its_devices(no_aihub, monkeypatch):
    pytest.importorskip("qai_hub")
    target = load_target("snapdragon-8-gen-3")
    report = target_report(target, X86, dict(CPU_ONLY_ENV), {})
    aihub = report["runtimes"][1]
    assert aihub["runtime"] == "aihub" and not aihub["available"] and not aihub["configured"]
    assert (
        aihub["devices"] == ["Samsung Galaxy S24 (Family)", "Snapdragon 8 Gen 3 QRD"]
        and aihub["chipset"] == "qualcomm-snapdragon-8gen3"
    )
    fix = missing(report)["an AI Hub API token"]
    assert fix["why"] == f"no {no_aihub} and no $QAI_HUB_API_TOKEN" and fix["install"].startswith(
        "run `qai-hub configure --api_token TOKEN`"
    )
    no_aihub.write_text(
        "[api]\napi_token = t\napi_url = https://workbench.aihub.qualcomm.com\nweb_url = https://workbench.aihub.qualcomm.com\n"
    )
    aihub = target_report(target, X86, dict(CPU_ONLY_ENV), {})["runtimes"][1]
    assert aihub["available"] and aihub["configuration"]["source"] == str(no_aihub) and aihub["version"]
    assert aihub["notes"][0] == f"client configured from {no_aihub}"


def test_the_cli_says_the_ai_hub_client_and_devices_in_one_line(no_aihub, monkeypatch):
    from typer.testing import CliRunner

    from edgekit.cli import app

    monkeypatch.setenv("QAI_HUB_API_TOKEN", "t")
    r = CliRunner().invoke(app, ["doctor", "--target", "snapdragon-x-elite"], env={"COLUMNS": "200"})
    assert "aihub: client configured from $QAI_HUB_API_TOKEN; devices: Snapdragon X Elite CRD" in r.stdout
