"""TensorRT backend. Without TensorRT: metadata, compatibility keys, refusal messages, build
decisions and the missing-dependency path. With TensorRT and a GPU (marked ``trt``): build a tiny
engine, run it and compare with ONNX Runtime. TensorRT is only ever imported inside a test."""

from __future__ import annotations

import importlib
import json
import sys
from dataclasses import replace

import numpy as np
import pytest

from edgekit.errors import BundleError, EdgekitError, MissingDependency, UsageError
from edgekit.runtimes._specs import load_onnx
from edgekit.runtimes.trt import (
    EngineMetadata,
    HostMetadata,
    TrtBuildConfig,
    build_engine,
    check_compatible,
    host_metadata,
    load_engine,
    onnx_has_qdq,
    parse_l4t,
    read_l4t,
    read_metadata,
    resolve_build_flags,
    sha256_file,
    sidecar_path,
    write_metadata,
)

ORIN = HostMetadata("10.3.0", "Orin", "8.7", "35.4.1")
META = EngineMetadata(
    tensorrt_version="10.3.0",
    gpu_name="Orin",
    compute_capability="8.7",
    l4t="35.4.1",
    source_onnx_sha256="a" * 64,
    precision="fp16",
    created="2025-01-01T00:00:00+00:00",
    edgekit_version="0.1.0",
)
TRT_MISSING_HINT = "pip install 'edgekit[trt]'"


@pytest.fixture
def no_tensorrt(monkeypatch):
    """Make ``import tensorrt`` fail even where it is installed."""
    monkeypatch.setitem(sys.modules, "tensorrt", None)


@pytest.fixture
def fake_engine(tmp_path, matmul_add_onnx):
    """A .plan (bytes never deserialized here) with a sidecar keyed to ORIN and matmul_add.onnx."""
    plan = tmp_path / "engines" / "matmul_add.plan"
    plan.parent.mkdir()
    plan.write_bytes(b"not a real engine")
    write_metadata(plan, replace(META, source_onnx_sha256=sha256_file(matmul_add_onnx)))
    return plan


def test_modules_import_without_heavy_dependencies(monkeypatch):
    for heavy in ("tensorrt", "torch", "onnxruntime", "onnx", "cuda", "cuda.bindings", "cuda.bindings.runtime"):
        monkeypatch.setitem(sys.modules, heavy, None)
    for name in ("_specs", "ort", "torch_ref", "trt"):
        monkeypatch.delitem(sys.modules, f"edgekit.runtimes.{name}", raising=False)
        importlib.import_module(f"edgekit.runtimes.{name}")


def test_metadata_round_trips_through_json_and_the_sidecar(tmp_path):
    assert EngineMetadata.from_json(json.loads(json.dumps(META.to_json()))) == META
    plan = tmp_path / "model.plan"
    assert write_metadata(plan, META) == sidecar_path(plan) == tmp_path / "model.plan.json"
    assert read_metadata(plan) == META
    assert json.loads(sidecar_path(plan).read_text())["schema"] == "edgekit.engine/1"


def test_metadata_with_unknown_schema_or_missing_keys_is_refused():
    with pytest.raises(BundleError, match="schema"):
        EngineMetadata.from_json({**META.to_json(), "schema": "edgekit.engine/99"})
    doc = META.to_json()
    del doc["compute_capability"]
    with pytest.raises(BundleError, match="compute_capability"):
        EngineMetadata.from_json(doc)


@pytest.mark.parametrize(
    "text, release",
    [
        ("# R35 (release), REVISION: 4.1, GCID: 33958178, BOARD: t186ref, EABI: aarch64, DATE: Tue", "35.4.1"),
        ("# R32 (release), REVISION: 7.1, GCID: 29818004, BOARD: t210ref, EABI: aarch64", "32.7.1"),
        ("# R36 (release), REVISION: 3.0, GCID: 36923193, BOARD: generic, EABI: aarch64", "36.3.0"),
        ("Ubuntu 22.04.4 LTS", None),
    ],
)
def test_l4t_release_is_parsed(tmp_path, text, release):
    assert parse_l4t(text) == release
    path = tmp_path / "nv_tegra_release"
    path.write_text(text + "\n")
    assert read_l4t(path) == release


def test_no_release_file_means_not_a_jetson(tmp_path):
    assert read_l4t(tmp_path / "absent") is None


def test_a_matching_host_is_compatible():
    assert check_compatible(META, ORIN, META.source_onnx_sha256, "fp16") == []


@pytest.mark.parametrize(
    "host, source, precision, says",
    [
        (replace(ORIN, tensorrt_version="10.7.0"), None, None, "engine built with 10.3.0, host has 10.7.0"),
        (replace(ORIN, compute_capability="8.6", gpu_name="RTX"), None, None, "capability: engine built for 8.7"),
        (replace(ORIN, gpu_name="Orin Nano"), None, None, "GPU: engine built on Orin, host GPU is Orin Nano"),
        (replace(ORIN, l4t="36.3.0"), None, None, "L4T/JetPack: engine built on 35.4.1, host is 36.3.0"),
        (replace(ORIN, l4t=None), None, None, "host is not a Jetson"),
        (ORIN, "b" * 64, None, "stale engine: source ONNX changed"),
        (ORIN, None, "int8", "precision: engine is fp16, int8 was asked for"),
    ],
    ids=["tensorrt", "compute-capability", "gpu-model", "l4t", "not-jetson", "stale-source", "precision"],
)
def test_each_mismatch_is_one_reason(host, source, precision, says):
    reasons = check_compatible(META, host, source, precision)
    assert len(reasons) == 1 and says in reasons[0]


def test_load_engine_refuses_a_mismatched_stale_engine_with_every_reason(fake_engine, matmul_add_onnx):
    matmul_add_onnx.write_bytes(matmul_add_onnx.read_bytes() + b"\n")  # the source changed since the build
    desktop = HostMetadata("10.7.0", "RTX 3090", "8.6", None)
    with pytest.raises(EdgekitError) as err:
        load_engine(fake_engine, matmul_add_onnx, host=desktop)
    message = str(err.value)
    reasons = ("TensorRT version", "compute capability", "L4T/JetPack", "stale engine")
    for says in (*reasons, "--rebuild", str(fake_engine)):
        assert says in message
    assert err.value.exit_code == 1


def test_load_engine_refuses_an_engine_without_sidecar(fake_engine):
    sidecar_path(fake_engine).unlink()
    with pytest.raises(EdgekitError, match="no usable metadata sidecar.*--rebuild"):
        load_engine(fake_engine, host=ORIN)


def test_load_engine_cannot_rebuild_without_the_source_onnx(fake_engine):
    with pytest.raises(EdgekitError, match="no source ONNX was given"):
        load_engine(fake_engine, rebuild=True, host=replace(ORIN, tensorrt_version="10.7.0"))


def test_missing_tensorrt_is_missing_dependency_with_the_install_line(
    no_tensorrt, fake_engine, matmul_add_onnx, tmp_path
):
    from edgekit.runtimes.trt import TrtRuntime

    attempts = [
        lambda: host_metadata(),
        lambda: TrtRuntime(fake_engine),
        lambda: load_engine(fake_engine, matmul_add_onnx),  # compatible sidecar: needs this host's facts
        lambda: build_engine(matmul_add_onnx, tmp_path / "new.plan"),
    ]
    for attempt in attempts:
        with pytest.raises(MissingDependency) as err:
            attempt()
        assert err.value.exit_code == 3
        assert TRT_MISSING_HINT in str(err.value) and "JetPack" in str(err.value)


def test_build_refuses_dynamic_dims_before_touching_tensorrt(dynamic_onnx, tmp_path):
    with pytest.raises(EdgekitError, match="dynamic dims.*make_dynamic_shape_fixed"):
        build_engine(dynamic_onnx, tmp_path / "dynamic.plan")
    assert not (tmp_path / "dynamic.plan").exists()


def test_qdq_graph_is_detected(qdq_onnx, matmul_add_onnx):
    assert onnx_has_qdq(load_onnx(qdq_onnx)) and not onnx_has_qdq(load_onnx(matmul_add_onnx))


@pytest.mark.parametrize(
    "graph, cfg, version, flags",
    [
        ("qdq", TrtBuildConfig(precision="int8"), "10.3.0", (True, False)),  # QDQ -> strongly typed
        ("plain", TrtBuildConfig(), "10.3.0", (False, False)),
        ("plain", TrtBuildConfig(precision="fp16"), "10.3.0", (False, True)),  # BuilderFlag.FP16
        ("plain", TrtBuildConfig(), "11.0.0", (True, False)),  # strong typing is TensorRT 11's default
        ("qdq", TrtBuildConfig(precision="int8", strongly_typed=False), "10.3.0", (False, False)),
    ],
)
def test_strongly_typed_auto_decision(qdq_onnx, matmul_add_onnx, graph, cfg, version, flags):
    model = load_onnx(qdq_onnx if graph == "qdq" else matmul_add_onnx)
    assert resolve_build_flags(cfg, model, version) == flags


@pytest.mark.parametrize(
    "graph, cfg, version, says",
    [
        ("plain", TrtBuildConfig(precision="int8"), "10.3.0", "needs an explicitly quantized"),
        ("qdq", TrtBuildConfig(precision="fp32"), "10.3.0", "build with precision int8"),
        ("plain", TrtBuildConfig(precision="fp16"), "11.0.0", "no float16 tensors"),
    ],
)
def test_precision_the_graph_cannot_give_is_refused(qdq_onnx, matmul_add_onnx, graph, cfg, version, says):
    with pytest.raises(EdgekitError, match=says):
        resolve_build_flags(cfg, load_onnx(qdq_onnx if graph == "qdq" else matmul_add_onnx), version)


def test_build_config_rejects_bad_values():
    with pytest.raises(UsageError, match="valid: fp32, fp16, int8"):
        TrtBuildConfig(precision="bf16")
    with pytest.raises(UsageError, match="0..5"):
        TrtBuildConfig(builder_optimization_level=9)


# --- needs TensorRT and a CUDA GPU -----------------------------------------------------------


@pytest.fixture
def tensorrt_host():
    pytest.importorskip("tensorrt", reason="TensorRT not installed")
    try:
        return host_metadata()
    except EdgekitError as exc:
        pytest.skip(f"no usable CUDA GPU: {exc}")


@pytest.mark.trt
@pytest.mark.gpu
def test_built_engine_matches_ort(tensorrt_host, tmp_path, matmul_add_onnx, x_feed):
    from edgekit.runtimes.ort import OrtRuntime

    plan = tmp_path / "matmul_add.plan"
    meta = build_engine(matmul_add_onnx, plan, TrtBuildConfig(workspace_mib=64, timing_cache=str(tmp_path / "tc.bin")))
    assert read_metadata(plan) == meta and meta.source_onnx_sha256 == sha256_file(matmul_add_onnx)
    assert check_compatible(meta, tensorrt_host, sha256_file(matmul_add_onnx)) == []
    assert (tmp_path / "tc.bin").stat().st_size > 0
    with load_engine(plan, matmul_add_onnx) as rt, OrtRuntime(matmul_add_onnx) as ort_rt:
        assert rt.inputs == ort_rt.inputs and rt.outputs == ort_rt.outputs
        got, expected = rt.run({"x": x_feed}), ort_rt.run({"x": x_feed})
        for name in expected:
            # TF32 may run fp32 MatMuls on Ampere+: 1e-2 bounds it for these magnitudes.
            np.testing.assert_allclose(got[name], expected[name], rtol=1e-2, atol=1e-2)
        assert rt.run({"x": x_feed})["y"] is got["y"]  # preallocated host outputs, reused


@pytest.mark.trt
@pytest.mark.gpu
def test_stale_engine_is_rebuilt_on_request(tensorrt_host, tmp_path, matmul_add_onnx):
    plan = tmp_path / "matmul_add.plan"
    build_engine(matmul_add_onnx, plan, TrtBuildConfig(workspace_mib=64))
    write_metadata(plan, replace(read_metadata(plan), source_onnx_sha256="0" * 64))
    with pytest.raises(EdgekitError, match="stale engine"):
        load_engine(plan, matmul_add_onnx)
    with load_engine(plan, matmul_add_onnx, rebuild=True) as rt:
        assert rt.metadata is not None and rt.metadata.source_onnx_sha256 == sha256_file(matmul_add_onnx)
