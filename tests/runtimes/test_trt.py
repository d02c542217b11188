"""TensorRT backend. Without TensorRT: metadata, compatibility keys, refusal messages, build
decisions and the missing-dependency path. With TensorRT and a GPU (marked ``trt``): build a tiny
engine, run it and compare with ONNX Runtime. TensorRT is only ever imported inside a test."""

from __future__ import annotations

import json
import logging
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from edgekit.errors import BundleError, EdgekitError, MissingDependency, UsageError
from edgekit.runtimes.onnx_file import load_onnx
from edgekit.runtimes.trt import (
    BuildFlags,
    EngineMetadata,
    HostMetadata,
    TrtBuildConfig,
    TrtRuntime,
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

# JetPack 6.2 (L4T 36.4.3) ships TensorRT 10.3 (JetPack 5.1.x: 8.5.2; 6.0: 8.6.2).
ORIN = HostMetadata("10.3.0", "Orin", "8.7", "36.4.3")
META = EngineMetadata(
    tensorrt_version="10.3.0",
    gpu_name="Orin",
    compute_capability="8.7",
    l4t="36.4.3",
    source_onnx_sha256="a" * 64,
    precision="fp16",
    created="2025-01-01T00:00:00+00:00",
    edgekit_version="0.1.0",
)
TRT_MISSING_HINT = "pip install 'edgekit[trt]'"
REPO = Path(__file__).resolve().parents[2]


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


def test_modules_import_without_heavy_dependencies():
    # In a fresh interpreter: re-importing edgekit.runtimes.trt here would leave the package
    # attribute edgekit.runtimes.trt pointing at a second module object that other tests'
    # monkeypatches never reach (tests must pass alone and in any order).
    code = (
        "import sys\n"
        "for heavy in ('tensorrt', 'torch', 'onnxruntime', 'onnx', 'cuda', 'cuda.bindings', 'cuda.bindings.runtime'):\n"
        "    sys.modules[heavy] = None\n"
        "import edgekit.runtimes._specs, edgekit.runtimes.ort, edgekit.runtimes.torch_ref, edgekit.runtimes.trt\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, timeout=120)
    assert done.returncode == 0, done.stderr


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
        (replace(ORIN, l4t="36.4.0"), None, None, "L4T/JetPack: engine built on 36.4.3, host is 36.4.0"),
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
        # (strongly typed, BuilderFlag.FP16, BuilderFlag.INT8, clear TF32)
        ("qdq", TrtBuildConfig(precision="int8"), "10.3.0", (True, False, False, False)),  # QDQ -> strongly typed
        ("plain", TrtBuildConfig(), "10.3.0", (False, False, False, True)),
        ("plain", TrtBuildConfig(precision="fp16"), "10.3.0", (False, True, False, False)),
        ("plain", TrtBuildConfig(), "11.0.0", (True, False, False, True)),  # strong typing is TensorRT 11's only mode
        # Weakly typed Q/DQ needs BuilderFlag.INT8 ("to enable any quantization operations").
        ("qdq", TrtBuildConfig(precision="int8", strongly_typed=False), "10.3.0", (False, False, True, False)),
        ("qdq", TrtBuildConfig(precision="int8"), "8.6.2", (False, False, True, False)),  # JetPack 6.0
        ("qdq", TrtBuildConfig(precision="int8"), "8.5.2", (False, False, True, False)),  # JetPack 5
        ("plain", TrtBuildConfig(precision="fp16"), "8.5.2", (False, True, False, False)),
    ],
)
def test_build_flags_per_version(qdq_onnx, matmul_add_onnx, graph, cfg, version, flags):
    model = load_onnx(qdq_onnx if graph == "qdq" else matmul_add_onnx)
    got = resolve_build_flags(cfg, model, version)
    assert (got.strongly_typed, got.fp16, got.int8, got.no_tf32) == flags


def test_strongly_typed_int8_says_what_stays_fp32(qdq_onnx):
    notes = resolve_build_flags(TrtBuildConfig(precision="int8"), load_onnx(qdq_onnx), "10.3.0").notes
    assert any("only the layers inside Q/DQ pairs run in INT8" in n and "measure" in n for n in notes)


def test_strong_typing_asked_of_tensorrt_8_is_refused(qdq_onnx):
    with pytest.raises(EdgekitError, match="8.6.2 cannot build strongly typed networks"):
        resolve_build_flags(TrtBuildConfig(precision="int8", strongly_typed=True), load_onnx(qdq_onnx), "8.6.2")


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


# --- against the recording fakes of tensorrt 8.5 / 8.6 / 10.3 / 11.1 and cuda-python ---------


from tests.fakes.trt_bindings import POISON, VERSIONS, install  # noqa: E402


@pytest.fixture(params=VERSIONS)
def fake_trt(request, monkeypatch):
    return install(monkeypatch, request.param)


@pytest.fixture
def tokens_onnx(write_onnx):
    """tokens int64[2,8] -> logits float32[2,8,16] = emb[tokens] @ W, and best int64[2,8] =
    argmax(logits): int64 both ways, as the masked and AR graphs have."""
    rng = np.random.default_rng(0)
    return write_onnx(
        "tokens.onnx",
        [
            helper.make_node("Gather", ["emb", "tokens"], ["h"]),
            helper.make_node("MatMul", ["h", "W"], ["logits"]),
            helper.make_node("ArgMax", ["logits"], ["best"], axis=-1, keepdims=0),
        ],
        [helper.make_tensor_value_info("tokens", TensorProto.INT64, [2, 8])],
        [
            helper.make_tensor_value_info("logits", TensorProto.FLOAT, [2, 8, 16]),
            helper.make_tensor_value_info("best", TensorProto.INT64, [2, 8]),
        ],
        [
            numpy_helper.from_array(rng.standard_normal((16, 4)).astype(np.float32), "emb"),
            numpy_helper.from_array(rng.standard_normal((4, 16)).astype(np.float32), "W"),
        ],
    )


def ort_run(path, feeds):
    import onnxruntime as ort

    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    return dict(zip([o.name for o in session.get_outputs()], session.run(None, feeds)))


def test_int64_tokens_run_on_every_tensorrt(fake_trt, tmp_path, tokens_onnx):
    plan = tmp_path / "tokens.plan"
    meta = build_engine(tokens_onnx, plan)
    assert meta.io_dtypes == {"tokens": "int64", "logits": "float32", "best": "int64"}
    tokens = (np.arange(16, dtype=np.int64).reshape(2, 8) * 7) % 16
    with load_engine(plan, tokens_onnx) as rt:
        # The loops feed int64 whatever the engine holds: TensorRT 8.x narrowed it to INT32.
        assert rt.inputs["tokens"].dtype == "int64" and rt.outputs["best"].dtype == "int64"
        engine_dtype = rt.engine.get_tensor_dtype("tokens").name
        assert engine_dtype == ("INT32" if fake_trt.version.startswith("8.") else "INT64")
        got, expected = rt.run({"tokens": tokens}), ort_run(tokens_onnx, {"tokens": tokens})
        np.testing.assert_allclose(got["logits"], expected["logits"], rtol=1e-6, atol=1e-6)
        assert got["best"].dtype == np.int64 and np.array_equal(got["best"], expected["best"])


@pytest.mark.parametrize("version", ["8.5.2.2", "8.6.2.3"])
def test_int64_feeds_outside_int32_are_refused_on_tensorrt_8(monkeypatch, tmp_path, tokens_onnx, version):
    install(monkeypatch, version)
    build_engine(tokens_onnx, tmp_path / "tokens.plan")
    with TrtRuntime(tmp_path / "tokens.plan") as rt:
        with pytest.raises(
            EdgekitError, match=r"feed 'tokens' has values in \[0, 4294967296\], outside int32.*casts INT64 down"
        ):
            rt.run({"tokens": np.full((2, 8), 2**32, np.int64) * np.eye(2, 8, dtype=np.int64)})


def test_an_engine_without_recorded_io_dtypes_keeps_the_engine_dtype(monkeypatch, tmp_path, tokens_onnx):
    install(monkeypatch, "8.6.2.3")
    plan = tmp_path / "tokens.plan"
    build_engine(tokens_onnx, plan)
    write_metadata(plan, replace(read_metadata(plan), io_dtypes=None))  # an older edgekit's sidecar
    with TrtRuntime(plan) as rt:
        assert rt.inputs["tokens"].dtype == "int32"
    with load_engine(plan, tokens_onnx) as rt:  # the source ONNX restores the contract
        assert rt.inputs["tokens"].dtype == "int64"


def test_qdq_int8_sets_the_int8_flag_where_weakly_typed(fake_trt, tmp_path, qdq_onnx, x_feed):
    plan = tmp_path / "qdq.plan"
    build_engine(qdq_onnx, plan, TrtBuildConfig(precision="int8"))
    major = int(fake_trt.version.split(".")[0])
    assert (("set_flag", "INT8") in fake_trt.calls) == (major < 10)
    notes = " ".join(read_metadata(plan).notes)  # the sidecar says what stays FP32
    assert ("only the layers inside Q/DQ pairs run in INT8" in notes) == (major >= 10)
    assert json.loads(plan.read_bytes())["strongly_typed"] == (major >= 10)
    with load_engine(plan, qdq_onnx, precision="int8") as rt:
        np.testing.assert_allclose(
            rt.run({"x": x_feed})["y"], ort_run(qdq_onnx, {"x": x_feed})["y"], rtol=1e-6, atol=1e-6
        )


def test_fp32_builds_turn_tf32_off_and_fp16_builds_set_fp16(monkeypatch, tmp_path, matmul_add_onnx):
    fake = install(monkeypatch, "10.3.0")
    build_engine(matmul_add_onnx, tmp_path / "fp32.plan")
    assert ("clear_flag", "TF32") in fake.calls and json.loads((tmp_path / "fp32.plan").read_bytes())["flags"] == []
    fake.calls.clear()
    build_engine(matmul_add_onnx, tmp_path / "fp16.plan", TrtBuildConfig(precision="fp16"))
    assert ("set_flag", "FP16") in fake.calls and ("clear_flag", "TF32") not in fake.calls


# The builder's warnings are asserted on: its logger's own level, not the root's (another test in
# the same worker may leave the root logger at ERROR: a library quieting ORT, a timed-out thread).
BUILDER_LOG = "edgekit.runtimes.trt.builder"


@pytest.mark.parametrize("version, applied", [("8.5.2.2", False), ("8.6.2.3", True), ("10.3.0", True)])
def test_builder_optimization_level_is_guarded(monkeypatch, tmp_path, matmul_add_onnx, caplog, version, applied):
    caplog.set_level(logging.WARNING, logger=BUILDER_LOG)  # whatever level an earlier test left the root at
    install(monkeypatch, version)
    build_engine(matmul_add_onnx, tmp_path / "m.plan", TrtBuildConfig(builder_optimization_level=5))
    warned = any("has no builder_optimization_level" in r.message for r in caplog.records)
    assert warned == (not applied)
    noted = any("no builder_optimization_level" in n for n in read_metadata(tmp_path / "m.plan").notes)
    assert noted == (not applied)


def test_timing_cache_is_written_reused_and_a_foreign_one_replaced(monkeypatch, tmp_path, matmul_add_onnx, caplog):
    caplog.set_level(logging.WARNING, logger=BUILDER_LOG)  # whatever level an earlier test left the root at
    fake = install(monkeypatch, "10.3.0")
    cache = tmp_path / "timing.cache"
    cfg = TrtBuildConfig(timing_cache=str(cache))
    build_engine(matmul_add_onnx, tmp_path / "a.plan", cfg)
    assert json.loads(cache.read_bytes()) == {"version": "10.3.0", "device": "Orin", "entries": 1}
    build_engine(matmul_add_onnx, tmp_path / "b.plan", cfg)
    assert json.loads(cache.read_bytes())["entries"] == 2  # reused, not replaced
    cache.write_text(json.dumps({"version": "8.6.2.3", "device": "Orin", "entries": 9}))
    build_engine(matmul_add_onnx, tmp_path / "c.plan", cfg)  # create_timing_cache returns None for it
    assert json.loads(cache.read_bytes()) == {"version": "10.3.0", "device": "Orin", "entries": 1}
    assert any("made by another TensorRT version or GPU" in r.message for r in caplog.records)
    assert ("create_timing_cache", 0) in fake.calls


def test_a_foreign_timing_cache_does_not_leak_into_a_later_error(monkeypatch, tmp_path, qdq_onnx):
    install(monkeypatch, "8.6.2.3")
    cache = tmp_path / "timing.cache"
    cache.write_text(json.dumps({"version": "8.5.2.2", "device": "Orin", "entries": 3}))
    # A weakly typed Q/DQ build without the INT8 flag fails in the builder: its error, only.
    monkeypatch.setattr(
        "edgekit.runtimes.trt.builder.resolve_build_flags", lambda *a, **k: BuildFlags(False, False, False, False)
    )
    with pytest.raises(EdgekitError) as err:
        build_engine(qdq_onnx, tmp_path / "q.plan", TrtBuildConfig(precision="int8", timing_cache=str(cache)))
    assert "INT8 flag must be set" in str(err.value) and "Timing cache" not in str(err.value)


def test_a_build_without_any_timing_cache_still_builds(monkeypatch, tmp_path, matmul_add_onnx, caplog):
    caplog.set_level(logging.WARNING, logger=BUILDER_LOG)  # whatever level an earlier test left the root at
    fake = install(monkeypatch, "10.3.0")
    monkeypatch.setattr(
        type(fake.mod.Builder(None).create_builder_config()), "create_timing_cache", lambda self, data: None
    )
    cache = tmp_path / "timing.cache"
    build_engine(matmul_add_onnx, tmp_path / "m.plan", TrtBuildConfig(timing_cache=str(cache)))
    assert not cache.exists() and any("gave no timing cache" in r.message for r in caplog.records)


def test_outputs_outlive_close_and_pinned_memory_is_freed_after_them(
    monkeypatch, tmp_path, matmul_add_onnx, x_feed, matmul_add_reference
):
    import gc

    fake = install(monkeypatch, "10.3.0")
    build_engine(matmul_add_onnx, tmp_path / "m.plan")
    rt = load_engine(tmp_path / "m.plan", matmul_add_onnx)
    out = rt.run({"x": x_feed})
    rt.close()
    assert fake.cuda.device_memory == {} and fake.cuda.streams == set()  # device side released at close
    assert fake.cuda.freed_host == []  # ...but not the pinned memory `out` views
    np.testing.assert_allclose(out["y"], matmul_add_reference(x_feed)["y"], rtol=1e-6, atol=1e-6)
    assert not (out["y"].view(np.uint8) == POISON).all()
    del out, rt
    gc.collect()
    assert len(fake.cuda.freed_host) == 2 and fake.cuda.host_memory == {}  # y and z, once nothing views them


def test_a_plan_that_does_not_deserialize_releases_everything(monkeypatch, tmp_path, matmul_add_onnx):
    import gc

    install(monkeypatch, "8.6.2.3")
    build_engine(matmul_add_onnx, tmp_path / "m.plan")
    fake = install(monkeypatch, "10.3.0")  # the host's TensorRT was upgraded
    with pytest.raises(
        EdgekitError, match=r"TensorRT 10.3.0 cannot deserialize .*expecting library version 10.3.0 got 8.6.2.3"
    ):
        TrtRuntime(tmp_path / "m.plan")
    gc.collect()
    assert fake.cuda.streams == set() and fake.cuda.device_memory == {} and fake.cuda.host_memory == {}
    assert ("cudaStreamCreate", next(c[1] for c in fake.cuda.calls if c[0] == "cudaStreamCreate")) in fake.cuda.calls


def test_device_index_is_honoured_when_building_and_deserializing(
    monkeypatch, tmp_path, matmul_add_onnx, x_feed, matmul_add_reference
):
    fake = install(monkeypatch, "10.3.0", devices=(("RTX 4090", "8.9"), ("A100", "8.0")))
    meta = build_engine(matmul_add_onnx, tmp_path / "m.plan", device=1)
    assert (meta.gpu_name, meta.compute_capability) == ("A100", "8.0")
    assert ("build_serialized_network", 1) in fake.calls and ("Builder", 1) in fake.calls
    fake.cuda.current = 0  # another library switched devices in between
    with load_engine(tmp_path / "m.plan", matmul_add_onnx, device=1) as rt:
        assert ("deserialize_cuda_engine", 1) in fake.calls and rt.device == "cuda:1"
        fake.cuda.current = 0
        np.testing.assert_allclose(rt.run({"x": x_feed})["y"], matmul_add_reference(x_feed)["y"], rtol=1e-6, atol=1e-6)


def test_verbose_tensorrt_messages_stop_before_python_logging(monkeypatch, tmp_path, matmul_add_onnx):
    import logging

    fake = install(monkeypatch, "10.3.0")
    from edgekit.runtimes.trt import builder as trt_backend

    calls = []
    monkeypatch.setattr(trt_backend.log, "debug", lambda *a, **k: calls.append(a))
    monkeypatch.setattr(trt_backend.log, "isEnabledFor", lambda level: level > logging.DEBUG)
    build_engine(matmul_add_onnx, tmp_path / "m.plan")
    assert fake.log_counts["VERBOSE"] >= 200 and calls == []
    monkeypatch.setattr(trt_backend.log, "isEnabledFor", lambda level: True)  # EDGEKIT debug logging on
    build_engine(matmul_add_onnx, tmp_path / "m.plan")
    assert len(calls) >= 200


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
            # fp32 builds turn TF32 off, so fp32 MatMuls match ORT to float rounding.
            np.testing.assert_allclose(got[name], expected[name], rtol=1e-5, atol=1e-5)
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


@pytest.mark.trt
@pytest.mark.gpu
def test_real_int64_tokens_match_ort(tensorrt_host, tmp_path, tokens_onnx):
    # TensorRT 8.x narrows the int64 IO to int32 inside the engine; callers still feed int64.
    plan = tmp_path / "tokens.plan"
    build_engine(tokens_onnx, plan, TrtBuildConfig(workspace_mib=64))
    tokens = (np.arange(16, dtype=np.int64).reshape(2, 8) * 5) % 16
    with load_engine(plan, tokens_onnx) as rt:
        assert rt.inputs["tokens"].dtype == "int64" and rt.outputs["best"].dtype == "int64"
        got, expected = rt.run({"tokens": tokens}), ort_run(tokens_onnx, {"tokens": tokens})
        np.testing.assert_allclose(got["logits"], expected["logits"], rtol=1e-5, atol=1e-5)
        assert np.array_equal(got["best"], expected["best"])


@pytest.mark.trt
@pytest.mark.gpu
def test_real_fp16_engine_is_close_to_ort(tensorrt_host, tmp_path, matmul_add_onnx, x_feed):
    if int(tensorrt_host.tensorrt_version.split(".")[0]) >= 11:
        pytest.skip("TensorRT 11 takes fp16 from the graph's types only (export an fp16 ONNX)")
    plan = tmp_path / "fp16.plan"
    build_engine(matmul_add_onnx, plan, TrtBuildConfig(precision="fp16", workspace_mib=64))
    with load_engine(plan, matmul_add_onnx, precision="fp16") as rt:
        got, expected = rt.run({"x": x_feed}), ort_run(matmul_add_onnx, {"x": x_feed})
    for name in expected:  # fp16 carries ~3 decimal digits; these outputs are O(1)
        np.testing.assert_allclose(got[name], expected[name], rtol=1e-2, atol=1e-2)


@pytest.mark.trt
@pytest.mark.gpu
def test_real_int8_qdq_engine_is_close_to_ort(tensorrt_host, tmp_path, qdq_onnx, x_feed):
    # Weakly typed with BuilderFlag.INT8 on 8.x, strongly typed on 10.x/11.x.
    plan = tmp_path / "int8.plan"
    build_engine(qdq_onnx, plan, TrtBuildConfig(precision="int8", workspace_mib=64))
    with load_engine(plan, qdq_onnx, precision="int8") as rt:
        got, expected = rt.run({"x": x_feed})["y"], ort_run(qdq_onnx, {"x": x_feed})["y"]
    # Same scales both sides: at most a rounding step of x (0.02) times |W| sums (~1.2) apart.
    np.testing.assert_allclose(got, expected, rtol=0, atol=0.03)


@pytest.mark.trt
@pytest.mark.gpu
def test_real_timing_cache_is_reused_and_a_foreign_one_replaced(tensorrt_host, tmp_path, matmul_add_onnx, caplog):
    cache = tmp_path / "timing.cache"
    cfg = TrtBuildConfig(workspace_mib=64, timing_cache=str(cache))
    build_engine(matmul_add_onnx, tmp_path / "a.plan", cfg)
    first = cache.read_bytes()
    assert first
    build_engine(matmul_add_onnx, tmp_path / "b.plan", cfg)
    assert cache.stat().st_size >= len(first)
    cache.write_bytes(b"not a timing cache from any TensorRT")
    build_engine(matmul_add_onnx, tmp_path / "c.plan", cfg)  # replaced, not an error
    assert cache.read_bytes() != b"not a timing cache from any TensorRT"


@pytest.mark.trt
@pytest.mark.gpu
def test_real_outputs_stay_readable_after_close(tensorrt_host, tmp_path, matmul_add_onnx, x_feed):
    plan = tmp_path / "m.plan"
    build_engine(matmul_add_onnx, plan, TrtBuildConfig(workspace_mib=64))
    rt = load_engine(plan, matmul_add_onnx)
    out = rt.run({"x": x_feed})
    kept = {k: v.copy() for k, v in out.items()}
    rt.close()
    for name in kept:
        assert np.array_equal(out[name], kept[name])


def test_trt_extra_is_bounded_and_never_installs_tensorrt_on_a_jetson():
    from packaging.requirements import Requirement

    tomllib = pytest.importorskip("tomllib" if sys.version_info >= (3, 11) else "tomli")

    extra = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["optional-dependencies"]["trt"]
    reqs = {r.name: r for r in map(Requirement, extra)}
    assert set(reqs) == {"tensorrt", "cuda-python"}
    # tensorrt 11 has no BuilderFlag.FP16/weak typing; cuda-python 13 needs a driver >= 580.
    assert "10.3.0" in reqs["tensorrt"].specifier and "11.0.0" not in reqs["tensorrt"].specifier
    assert "12.6.0" in reqs["cuda-python"].specifier and "13.0.0" not in reqs["cuda-python"].specifier
    for req in reqs.values():  # JetPack's TensorRT must not be shadowed by a pip one
        assert req.marker.evaluate({"platform_release": "6.8.0-49-generic"})
        assert not req.marker.evaluate({"platform_release": "5.15.148-tegra"})
