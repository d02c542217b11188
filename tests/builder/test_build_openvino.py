"""`edgekit build` for the Intel targets: OpenVINO's compiled blob on this CPU (real OpenVINO),
its compatibility keys and staleness, selection and fallback to ONNX Runtime, and what the GPU
and NPU targets can and cannot do on a host without that device."""

from __future__ import annotations

import dataclasses
import sys

import numpy as np
import pytest
from build_helpers import X86, tiny_model  # tests/builder/build_helpers.py

from edgekit.builder import build_bundle, engine_problems, select_engine
from edgekit.bundle import Bundle
from edgekit.errors import EdgekitError, MissingDependency, TargetUnavailable, UsageError
from edgekit.targets import load_target, parse_target

pytest.importorskip("openvino")
from edgekit.runtimes.openvino import available_devices, device_capabilities, openvino_version  # noqa: E402

HOST = dataclasses.replace(X86, isa=("avx2", "avx512f", "avx512_vnni"))
TOKENS = np.arange(16, dtype=np.int64).reshape(2, 8) % 16


def _ort(path):
    import onnxruntime as ort

    return ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(None, {"tokens": TOKENS})[0]


def test_intel_cpu_build_writes_a_blob_keyed_to_version_device_and_isa(tiny_bundle, ov_route_times):
    ov_route_times({"onnx": 1.0, "ir": 1.0, "ir-fp16": 1.0})  # a tie: the blob stays
    bundle = tiny_bundle(int8=tiny_model(qdq_zero_point=np.array(128, np.uint8)), profile="cpu")
    doc = build_bundle(bundle.root, "intel-cpu", "int8", host=HOST)
    entry = doc["engine"]
    assert (
        doc["status"] == "built"
        and entry["path"].startswith("engines/intel-cpu/int8-")
        and entry["path"].endswith(".blob")
    )
    assert (
        entry["runtime"] == "openvino" and entry["runtime_version"] == openvino_version() and entry["format"] == "blob"
    )
    assert entry["device"].startswith("CPU: ") and entry["cpu_isa"] == ["avx2", "avx512f", "avx512_vnni"]
    assert f"ov={openvino_version()}" in entry["runtime_requirements"] and entry["portable"] is False
    assert (
        entry["config"]["inference_precision"] == "f32" and entry["config"]["compiled"]["inference_precision"] == "f32"
    )
    assert entry["source"] == "int8" and entry["source_onnx_sha256"] == Bundle.load(bundle.root).artifact("int8").sha256
    assert build_bundle(bundle.root, "intel-cpu", "int8", host=HOST)["status"] == "up-to-date"

    choice = select_engine(bundle.root, "intel-cpu", "int8", host=HOST)
    assert choice.built and choice.runtime == "openvino" and choice.path.suffix == ".blob"
    with choice.open(threads=1) as rt:
        out = rt.run({"tokens": TOKENS})["logits"]
        assert rt.name == "openvino" and rt.settings["threads"] == 1 and rt.settings["inference_precision"] == "f32"
    np.testing.assert_allclose(out, _ort(bundle.path_of("int8")), atol=0.05, rtol=0)  # int8 kernels, same QDQ


def test_another_cpu_isa_or_openvino_release_makes_the_blob_stale(tiny_bundle, ov_route_times):
    ov_route_times({"onnx": 1.0})  # the IRs take 10 ms: the blob ships
    bundle = tiny_bundle()
    build_bundle(bundle.root, "intel-cpu", "fp32", host=HOST)
    other = dataclasses.replace(HOST, isa=("avx2",))
    with pytest.raises(
        EdgekitError, match=r"cannot be used here: CPU instruction set: lacks avx512f, avx512_vnni .*--rebuild"
    ):
        select_engine(bundle.root, "intel-cpu", "fp32", host=other)
    b = Bundle.load(bundle.root)
    entry = b.engines["intel-cpu/fp32"]
    assert engine_problems(b, dataclasses.replace(entry, runtime_version="2025.0.0"), HOST) == [
        (
            "OpenVINO version: built with 2025.0.0, this host has "
            f"{openvino_version()} (a blob imports only into its own release)"
        )
    ]
    with pytest.raises(EdgekitError, match="is stale: CPU instruction set"):
        build_bundle(bundle.root, "intel-cpu", "fp32", host=other)
    choice = select_engine(bundle.root, "intel-cpu", "fp32", rebuild=True, host=other)
    assert choice.built and Bundle.load(bundle.root).manifest["engines"]["intel-cpu/fp32"]["cpu_isa"] == ["avx2"]
    with choice.open(threads=1) as rt:
        np.testing.assert_allclose(
            rt.run({"tokens": TOKENS})["logits"], _ort(bundle.path_of("fp32")), atol=1e-4, rtol=0
        )


@pytest.mark.skipif("BF16" not in device_capabilities("CPU"), reason="this CPU has no bf16 (AMX / AVX512-BF16)")
def test_bf16_is_the_fp32_model_compiled_in_bf16(tiny_bundle):
    bundle = tiny_bundle()
    entry = build_bundle(bundle.root, "intel-cpu", "bf16", host=HOST)["engine"]
    assert entry["source"] == "fp32" and entry["config"]["compiled"]["inference_precision"] == "bf16"
    with select_engine(bundle.root, "intel-cpu", "bf16", host=HOST).open(threads=1) as rt:
        assert rt.settings["inference_precision"] == "bf16"
        out = rt.run({"tokens": TOKENS})["logits"]
    ref = _ort(bundle.path_of("fp32"))
    assert 0 < np.abs(out - ref).max() < 0.05 * np.abs(ref).max()  # bf16 rounding, not f32's


@pytest.mark.parametrize("target, precision, device", [("intel-gpu", "fp16", "GPU"), ("intel-npu", "int8", "NPU")])
def test_gpu_and_npu_builds_convert_the_graph_and_say_the_device_is_needed(tiny_bundle, target, precision, device):
    if device in available_devices():
        pytest.skip(f"this host has an Intel {device}")
    bundle = tiny_bundle(int8=tiny_model(qdq_zero_point=np.array(128, np.uint8)), profile="cpu")
    with pytest.raises(TargetUnavailable) as err:
        build_bundle(bundle.root, target, precision, host=HOST)
    message = str(err.value)
    assert err.value.exit_code == 3
    assert (
        f"sees CPU, not {device}" in message
        and "The graph itself converts (" in message
        and f"needs the {device}" in message
    )
    assert f"--target {target}" in err.value.hint
    assert "engines" not in Bundle.load(bundle.root).manifest or not Bundle.load(bundle.root).manifest["engines"]


def test_without_openvino_intel_cpu_runs_on_ort_and_build_says_how_to_install(tiny_bundle, monkeypatch):
    bundle = tiny_bundle()
    monkeypatch.setitem(sys.modules, "openvino", None)
    choice = select_engine(bundle.root, "intel-cpu", "fp32", host=HOST)
    assert choice.runtime == "ort" and not choice.built
    assert choice.warnings[0].startswith("target intel-cpu: OpenVINO skipped on this host (openvino is not installed")
    with pytest.raises(TargetUnavailable, match="ONNX Runtime runs fp32 and int8 models only, not bf16"):
        select_engine(bundle.root, "intel-cpu", "bf16", host=HOST)
    with pytest.raises(MissingDependency) as err:
        build_bundle(bundle.root, "intel-cpu", "fp32", host=HOST)
    assert "pip install 'edgekit[openvino]'" in err.value.hint


def test_intel_targets_load_and_bad_openvino_values_list_valid_ones():
    cpu, gpu, npu = (load_target(n) for n in ("intel-cpu", "intel-gpu", "intel-npu"))
    assert (
        cpu.runtimes == ("openvino", "ort")
        and cpu.openvino.device == "CPU"
        and cpu.openvino.inference_precision == "f32"
    )
    assert gpu.openvino.device == "GPU" and npu.openvino.device == "NPU" and "fp32" not in npu.precisions
    base = 'name = "x"\nruntimes = ["openvino"]\nprecisions = ["int8"]\n'
    with pytest.raises(UsageError, match="openvino.device = 'VPU' is invalid; valid: CPU, GPU, NPU"):
        parse_target(base + '[openvino]\ndevice = "VPU"\n', "x.toml")
    with pytest.raises(UsageError, match="unknown key 'hint' in \\[openvino\\]"):
        parse_target(base + '[openvino]\nhint = "LATENCY"\n', "x.toml")
