"""`edgekit build`: ORT targets (optimized .onnx, mobile .ort), shape fixing, the manifest's
engine records, staleness, and engine selection. TensorRT paths run against a fake TensorRT
host here (every decision up to the builder call); a real build is marked ``trt``."""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from build_helpers import (  # tests/builder/build_helpers.py
    ORIN_NANO,
    ORIN_NANO_JP60,
    ORIN_TRT_JP60,
    X86,
    FakeTrt,
    add_model,
    tiny_model,
)

from edgekit.builder import (
    BUILD_SCHEMA,
    HostFacts,
    build_bundle,
    builds_on_device,
    engine_problems,
    select_engine,
)
from edgekit.bundle import Bundle, bucket_binding, sha256_file
from edgekit.errors import BundleError, EdgekitError, TargetUnavailable, UsageError
from edgekit.runtimes import trt as trt_backend
from edgekit.targets import load_target

ATOL = 1e-4  # graph optimizations reorder float sums; the demo logits are O(10)


def run_model(path, feeds):
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    return session.run(None, feeds)[0]


def demo_feeds(bundle: Bundle, seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {
        name: rng.integers(0, int(spec.high or 8), size=spec.shape).astype(spec.dtype)
        for name, spec in bundle.inputs.items()
    }


# ---- ONNX Runtime targets --------------------------------------------------------------------------


def test_cpu_build_is_an_optimized_model_keyed_to_this_cpu(masked):
    doc = build_bundle(masked, "cpu", "fp32", host=X86)
    assert doc["schema"] == BUILD_SCHEMA and doc["status"] == "built" and doc["key"] == "cpu/fp32"
    bundle = Bundle.load(masked)
    entry = bundle.manifest["engines"]["cpu/fp32"]
    assert entry == doc["engine"]
    engine = masked / entry["path"]
    assert entry["path"].startswith("engines/cpu/fp32-") and entry["path"].endswith(".onnx")
    assert entry["sha256"] == sha256_file(engine) and entry["bytes"] == engine.stat().st_size
    assert entry["runtime"] == "ort" and entry["runtime_version"] == ort.__version__ and entry["format"] == "onnx"
    assert entry["device"] == X86.cpu_key and entry["portable"] is False  # "all" bakes in this CPU's layouts
    assert entry["config"]["graph_optimization"] == "all"
    assert entry["source"] == "fp32" and entry["source_onnx_sha256"] == bundle.artifact("fp32").sha256
    assert entry["compute_capability"] is None and entry["l4t"] is None
    feeds = demo_feeds(bundle)
    np.testing.assert_allclose(run_model(engine, feeds), run_model(bundle.path_of("fp32"), feeds), atol=ATOL, rtol=0)
    again = build_bundle(masked, "cpu", "fp32", host=X86)
    assert again["status"] == "up-to-date" and again["engine"] == entry


def test_android_build_writes_ort_format_and_required_operators(masked):
    doc = build_bundle(masked, "android-arm64", "fp32", host=X86)
    entry = doc["engine"]
    assert (
        entry["format"] == "ort"
        and entry["path"].startswith("engines/android-arm64/")
        and entry["path"].endswith(".ort")
    )
    assert entry["portable"] is True and entry["device"] == "aarch64"
    assert entry["config"]["optimization_style"] == "runtime"
    config = (masked / entry["required_operators"]["path"]).read_text()
    ops = {op for line in config.splitlines() if not line.startswith("#") for op in line.split(";")[2].split(",")}
    graph_ops = {n.op_type for n in onnx.load(str(Bundle.load(masked).path_of("fp32"))).graph.node}
    assert {"Gather", "MatMul", "Softmax", "LayerNormalization"} <= ops <= graph_ops | {"Gemm"}
    assert "--include_ops_by_config" in config and "/tmp" not in config
    bundle = Bundle.load(masked)
    feeds = demo_feeds(bundle, seed=1)
    # The full onnxruntime wheel reads .ort too: same logits as the source graph.
    np.testing.assert_allclose(
        run_model(masked / entry["path"], feeds), run_model(bundle.path_of("fp32"), feeds), atol=ATOL, rtol=0
    )


def test_cross_device_targets_use_portable_optimizations():
    for name in ("arm64-cpu", "rpi5", "android-arm64"):
        assert load_target(name).ort.graph_optimization == "extended"
        assert not builds_on_device(load_target(name))
    assert builds_on_device(load_target("cpu")) and builds_on_device(load_target("jetson-orin-nano"))


def test_dynamic_dims_are_fixed_to_the_manifest_shapes(tiny_bundle):
    bundle = tiny_bundle(fp32=tiny_model(batch_dim="batch"))
    doc = build_bundle(bundle.root, "arm64-cpu", "fp32", host=X86)
    assert doc["engine"]["fixed_shapes"] == {"tokens": [2, 8]}
    built = onnx.load(str(bundle.root / doc["engine"]["path"]))
    dims = [d.dim_value for d in built.graph.input[0].type.tensor_type.shape.dim]
    assert dims == [2, 8]
    assert doc["engine"]["source_onnx_sha256"] == bundle.artifact("fp32").sha256
    tokens = np.arange(16, dtype=np.int64).reshape(2, 8) % 16
    np.testing.assert_allclose(
        run_model(bundle.root / doc["engine"]["path"], {"tokens": tokens}),
        run_model(bundle.path_of("fp32"), {"tokens": tokens}),
        atol=1e-5,
        rtol=0,
    )


def test_int8_needs_quantize_and_the_right_profile(tiny_bundle):
    plain = tiny_bundle()
    with pytest.raises(BundleError, match=r"no int8 model .* \(make one with `edgekit quantize .* --profile cpu`\)"):
        build_bundle(plain.root, "cpu", "int8", host=X86)
    wrong = tiny_bundle(int8=tiny_model(qdq_zero_point=np.array(0, np.int8)), profile="trt", name="wrong")
    with pytest.raises(EdgekitError, match="quantized with profile 'trt'; target cpu needs 'cpu'"):
        build_bundle(wrong.root, "cpu", "int8", host=X86)
    good = tiny_bundle(int8=tiny_model(qdq_zero_point=np.array(0, np.uint8)), profile="cpu", name="good")
    doc = build_bundle(good.root, "cpu", "int8", host=X86)
    assert doc["engine"]["source"] == "int8" and doc["key"] == "cpu/int8"


def test_a_step_bucketed_engine_packs_and_loads_with_every_bucket(tiny_bundle, tmp_path):
    """One engine per step bucket; `pack --target` carries every bucket's file (the bundle's one
    list of an engine's files, ``EngineRecord.files``), and the unpacked engine loads with them."""
    from edgekit.deploy import pack_bundle, unpack_bundle

    bundle = tiny_bundle(int8=tiny_model(qdq_zero_point=np.array(0, np.uint8)), profile="cpu")
    add_model(bundle, "int8-bucket-1", tiny_model(qdq_zero_point=np.array(0, np.uint8), scale=0.5), {"profile": "cpu"})
    names = ["int8", "int8-bucket-1"]
    binding = bucket_binding(
        "mask share", [0.5], [(n, bundle.artifact(n).sha256) for n in names]
    )  # as quantize records it
    bundle.record(
        "quantization",
        {
            "profile": "cpu",
            "step_buckets": {"n": 2, "by": "mask share", "boundaries": [0.5], "artifacts": names, "binding": binding},
        },
    )
    bundle.save()
    build_bundle(bundle.root, "cpu", "int8", host=X86)
    engine = Bundle.load(bundle.root).engines["cpu/int8"]
    assert len(engine.bucket_engines) == 1 and engine.bucket_boundaries == (0.5,) and engine.bucket_binding
    doc = pack_bundle(bundle.root, tmp_path / "cpu.tar.gz", "cpu")
    assert set(engine.files) <= set(doc["files"])
    unpacked = unpack_bundle(tmp_path / "cpu.tar.gz", tmp_path / "device")["bundle"]
    choice = select_engine(unpacked, "cpu", "int8", host=X86)
    assert choice.built and len(choice.bucket_paths) == 2 and all(p.is_file() for p in choice.bucket_paths)


def test_precision_must_be_one_the_target_runs(tiny_bundle):
    bundle = tiny_bundle()
    with pytest.raises(UsageError, match="--precision 'fp16' is not one target cpu runs; valid: fp32, int8"):
        build_bundle(bundle.root, "cpu", "fp16", host=X86)


def test_lint_errors_stop_a_build(tiny_bundle, tmp_path):
    bundle = tiny_bundle()
    toml = tmp_path / "old-runtime.toml"
    toml.write_text('runtimes = ["ort"]\nprecisions = ["fp32"]\n[lint]\nopset_max = 13\n')
    with pytest.raises(EdgekitError, match=r"will not deploy to target old-runtime: opset 17 .*edgekit lint"):
        build_bundle(bundle.root, toml, "fp32", host=X86)
    assert "engines" not in {p.name for p in bundle.root.iterdir()}
    assert not list(bundle.root.glob(".staging-*"))


# ---- staleness --------------------------------------------------------------------------------------


def test_a_changed_source_makes_the_engine_stale(tiny_bundle):
    bundle = tiny_bundle(int8=tiny_model(qdq_zero_point=np.array(0, np.uint8)), profile="cpu")
    first = build_bundle(bundle.root, "cpu", "int8", host=X86)["engine"]
    b = Bundle.load(bundle.root)  # re-quantize: a different int8 model
    add_model(b, "int8", tiny_model(qdq_zero_point=np.array(0, np.uint8), scale=2.0), {"profile": "cpu"})
    b.save()
    with pytest.raises(EdgekitError, match=r"engine cpu/int8 .* is stale: source ONNX changed .*--rebuild"):
        build_bundle(bundle.root, "cpu", "int8", host=X86)
    with pytest.raises(EdgekitError, match="cannot be used here: source ONNX changed"):
        select_engine(bundle.root, "cpu", "int8", host=X86)
    choice = select_engine(bundle.root, "cpu", "int8", rebuild=True, host=X86)  # rebuilds the stale one
    entry = Bundle.load(bundle.root).manifest["engines"]["cpu/int8"]
    assert choice.built and choice.path == bundle.root / entry["path"] and entry["sha256"] != first["sha256"]
    assert entry["source_onnx_sha256"] == Bundle.load(bundle.root).artifact("int8").sha256
    assert not (bundle.root / first["path"]).exists()  # the superseded engine is gone
    assert build_bundle(bundle.root, "cpu", "int8", rebuild=True, host=X86)["status"] == "rebuilt"


def test_other_device_and_older_runtime_are_refused(tiny_bundle):
    bundle = tiny_bundle()
    build_bundle(bundle.root, "cpu", "fp32", host=X86)
    build_bundle(bundle.root, "arm64-cpu", "fp32", host=X86)
    other_cpu = dataclasses.replace(X86, cpu="Other CPU 1")
    with pytest.raises(
        EdgekitError, match=r"device: optimized for x86_64: Test CPU 9000, this host is x86_64: Other CPU 1"
    ):
        select_engine(bundle.root, "cpu", "fp32", host=other_cpu)
    assert select_engine(bundle.root, "arm64-cpu", "fp32", host=other_cpu).built  # portable: any CPU
    b = Bundle.load(bundle.root)
    b.manifest["engines"]["arm64-cpu/fp32"]["runtime_version"] = "99.0.0"
    b.save()
    problems = engine_problems(Bundle.load(bundle.root), b.engines["arm64-cpu/fp32"], X86)
    assert problems == [f"ONNX Runtime version: built with 99.0.0, this host has older {ort.__version__}"]
    (bundle.root / b.manifest["engines"]["cpu/fp32"]["path"]).write_bytes(b"tampered")
    assert "changed since it was built" in engine_problems(Bundle.load(bundle.root), b.engines["cpu/fp32"], X86)[0]


# ---- selection --------------------------------------------------------------------------------------


def test_select_engine_loads_the_built_model_or_the_bundles_onnx(tiny_bundle):
    bundle = tiny_bundle()
    choice = select_engine(bundle.root, "rpi5", "fp32", host=X86)
    assert not choice.built and choice.path == bundle.path_of("fp32")
    assert choice.warnings == ("target rpi5 is aarch64, this host is x86_64: speed and power are this host's",)
    build_bundle(bundle.root, "cpu", "fp32", host=X86)
    choice = select_engine(bundle.root, "cpu", "fp32", host=X86)
    assert choice.built and choice.runtime == "ort" and choice.path.parent.name == "cpu" and choice.warnings == ()
    with choice.open(threads=1) as rt:
        tokens = np.zeros((2, 8), np.int64)
        np.testing.assert_allclose(
            rt.run({"tokens": tokens})["logits"],
            run_model(bundle.path_of("fp32"), {"tokens": tokens}),
            atol=1e-5,
            rtol=0,
        )
        assert rt.device == "CPUExecutionProvider"
    assert json.loads(json.dumps(choice.to_json()))["key"] == "cpu/fp32"


def test_tensorrt_targets_fall_back_to_ort_where_tensorrt_cannot_run(tiny_bundle, monkeypatch):
    import sys

    monkeypatch.setitem(sys.modules, "tensorrt", None)
    bundle = tiny_bundle()
    choice = select_engine(bundle.root, "nvidia-gpu", "fp32", host=X86)
    assert choice.runtime == "ort" and not choice.built
    assert choice.warnings[0].startswith(
        "target nvidia-gpu: TensorRT skipped on this host (tensorrt is not installed; no NVIDIA GPU"
    )
    with choice.open() as rt:
        assert any("CUDAExecutionProvider" in w for w in rt.warnings) or rt.device == "CUDAExecutionProvider"
    with pytest.raises(
        TargetUnavailable, match="none of target nvidia-gpu's runtimes .* in fp16.*ONNX Runtime runs fp32 and int8"
    ):
        select_engine(bundle.root, "nvidia-gpu", "fp16", host=X86)


# ---- TensorRT (fake host: every decision up to the builder call) ----------------------------------


def test_tensorrt_build_is_refused_off_the_device(tiny_bundle, fake_trt):
    bundle = tiny_bundle()
    with pytest.raises(
        TargetUnavailable, match=r"this host is not a Jetson .*edgekit deploy .* --target jetson-orin-nano"
    ):
        build_bundle(bundle.root, "jetson-orin-nano", "fp16", host=X86)
    with pytest.raises(
        TargetUnavailable,
        match="this board is 'NVIDIA Jetson Orin Nano Developer Kit', target jetson-agx-orin is a AGX Orin",
    ):
        build_bundle(bundle.root, "jetson-agx-orin", "fp16", host=ORIN_NANO)
    with pytest.raises(TargetUnavailable, match="no NVIDIA GPU is visible"):
        build_bundle(bundle.root, "nvidia-gpu", "fp16", host=X86)
    with pytest.raises(
        TargetUnavailable,
        match=r"this GPU is Orin \(compute capability 8.7\), target jetson-xavier has compute capability 7.2",
    ):
        build_bundle(
            bundle.root,
            "jetson-xavier",
            "fp16",
            host=dataclasses.replace(ORIN_NANO, board="Jetson Xavier NX", l4t="35.4.1"),
        )
    assert fake_trt.builds == []


def test_a_jetson_on_another_jetpack_is_pointed_at_its_target(tiny_bundle, fake_trt):
    bundle = tiny_bundle()
    with pytest.raises(
        TargetUnavailable,
        match=r"this Jetson runs L4T 36.3.0 \(JetPack 6.0\), target jetson-orin-nano is for "
        r"JetPack 6.1, 6.2 \(L4T 36.4, TensorRT 10.3\): use --target jetson-orin-nano-jp60",
    ):
        build_bundle(bundle.root, "jetson-orin-nano", "fp16", host=ORIN_NANO_JP60)
    with pytest.raises(
        TargetUnavailable, match=r"L4T 36.4.3 \(JetPack 6.2\), target jetson-agx-orin-jp60 is for JetPack 6.0"
    ):
        build_bundle(
            bundle.root,
            "jetson-agx-orin-jp60",
            "fp16",
            host=dataclasses.replace(ORIN_NANO, board="NVIDIA Jetson AGX Orin"),
        )
    assert fake_trt.builds == []


def test_jetpack_60_builds_int8_weakly_typed_and_runs_int64_tokens(tiny_bundle, monkeypatch):
    fake = FakeTrt(monkeypatch, ORIN_TRT_JP60)
    bundle = tiny_bundle(int8=tiny_model(qdq_zero_point=np.array(0, np.int8)), profile="trt")
    doc = build_bundle(bundle.root, "jetson-orin-nano-jp60", "int8", host=ORIN_NANO_JP60)
    assert doc["engine"]["runtime_version"] == "8.6.2.3" and doc["engine"]["l4t"] == "36.3.0"
    assert ("set_flag", "INT8") in fake.bindings.calls  # TensorRT 8.6: no strong typing, so the INT8 flag
    assert doc["engine"]["notes"] == ["weakly typed INT8 (BuilderFlag.INT8): layers outside Q/DQ pairs run in FP32"]
    tokens = (np.arange(16, dtype=np.int64).reshape(2, 8) * 3) % 16
    with select_engine(bundle.root, "jetson-orin-nano-jp60", "int8", host=ORIN_NANO_JP60).open() as rt:
        assert rt.inputs["tokens"].dtype == "int64"  # the engine holds int32; edgekit casts at the boundary
        np.testing.assert_allclose(
            rt.run({"tokens": tokens})["logits"],
            run_model(bundle.path_of("int8"), {"tokens": tokens}),
            atol=1e-5,
            rtol=0,
        )


def test_opset_18_is_refused_for_tensorrt_8_with_the_fix(tiny_bundle, monkeypatch):
    FakeTrt(monkeypatch, ORIN_TRT_JP60)
    model = tiny_model()
    model.opset_import[0].version = 18
    bundle = tiny_bundle(fp32=model)
    with pytest.raises(
        EdgekitError, match=r"opset 18 is outside the range target jetson-orin-nano-jp60 reads \(9..17\)"
    ) as err:
        build_bundle(bundle.root, "jetson-orin-nano-jp60", "fp16", host=ORIN_NANO_JP60)
    assert "--opset 17" in str(err.value) and "edgekit lint" in str(err.value)


def test_tensorrt_engine_is_recorded_with_its_keys(tiny_bundle, fake_trt):
    bundle = tiny_bundle(fp32=tiny_model(batch_dim="batch"))
    doc = build_bundle(bundle.root, "jetson-orin-nano", "fp16", host=ORIN_NANO)
    entry = doc["engine"]
    assert (
        doc["status"] == "built"
        and entry["path"].startswith("engines/jetson-orin-nano/fp16-")
        and entry["path"].endswith(".plan")
    )
    assert (entry["runtime"], entry["runtime_version"], entry["device"], entry["compute_capability"], entry["l4t"]) == (
        "trt",
        "10.3.0",
        "Orin",
        "8.7",
        "36.4.3",
    )
    assert entry["precision"] == "fp16" and entry["format"] == "plan" and entry["fixed_shapes"] == {"tokens": [2, 8]}
    ((built_from, cfg),) = fake_trt.builds
    assert cfg.precision == "fp16" and cfg.workspace_mib == 1024 and cfg.builder_optimization_level is None
    assert built_from.name.startswith("static-")  # TensorRT got the shape-fixed copy
    sidecar = trt_backend.read_metadata(bundle.root / entry["path"])
    # ...but the engine is keyed to the bundle's artifact, so load_engine(source_onnx=fp32) accepts it.
    assert sidecar.source_onnx_sha256 == entry["source_onnx_sha256"] == bundle.artifact("fp32").sha256
    assert entry["metadata"]["path"] == entry["path"] + ".json"
    choice = select_engine(bundle.root, "jetson-orin-nano", "fp16", host=ORIN_NANO)
    assert choice.runtime == "trt" and choice.built and choice.source == bundle.path_of("fp32")
    assert build_bundle(bundle.root, "jetson-orin-nano", "fp16", host=ORIN_NANO)["status"] == "up-to-date"
    assert len(fake_trt.builds) == 1


def test_tensorrt_upgrade_makes_engines_stale(tiny_bundle, fake_trt):
    bundle = tiny_bundle()
    old = build_bundle(bundle.root, "jetson-orin-nano", "fp32", host=ORIN_NANO)["engine"]
    fake_trt.upgrade("10.4.0")
    with pytest.raises(
        EdgekitError, match=r"stale: TensorRT version: engine built with 10.3.0, host has 10.4.0 .*--rebuild"
    ):
        build_bundle(bundle.root, "jetson-orin-nano", "fp32", host=ORIN_NANO)
    with pytest.raises(EdgekitError, match="cannot be used here: TensorRT version"):
        select_engine(bundle.root, "jetson-orin-nano", "fp32", host=ORIN_NANO)
    doc = build_bundle(bundle.root, "jetson-orin-nano", "fp32", rebuild=True, host=ORIN_NANO)
    assert doc["status"] == "rebuilt" and doc["engine"]["runtime_version"] == "10.4.0"
    assert not (bundle.root / old["path"]).exists() and not (bundle.root / old["metadata"]["path"]).exists()


def test_tensorrt_needs_a_built_engine(tiny_bundle, fake_trt):
    bundle = tiny_bundle()
    with pytest.raises(
        BundleError, match=r"no TensorRT fp16 engine for target jetson-orin-nano \(build it here with `edgekit build"
    ):
        select_engine(bundle.root, "jetson-orin-nano", "fp16", host=ORIN_NANO)
    choice = select_engine(bundle.root, "jetson-orin-nano", "fp16", rebuild=True, host=ORIN_NANO)
    assert choice.built and len(fake_trt.builds) == 1


def test_tensorrt_int8_needs_the_trt_profile(tiny_bundle, fake_trt):
    cpu_quantized = tiny_bundle(int8=tiny_model(qdq_zero_point=np.array(0, np.uint8)), profile="cpu")
    with pytest.raises(EdgekitError, match="quantized with profile 'cpu'; target jetson-orin-nano needs 'trt'"):
        build_bundle(cpu_quantized.root, "jetson-orin-nano", "int8", host=ORIN_NANO)
    unrecorded = tiny_bundle(int8=tiny_model(qdq_zero_point=np.array(0, np.uint8)), name="unrecorded")
    with pytest.raises(
        EdgekitError, match="will not deploy to target jetson-orin-nano: 2 Q/DQ node.* uint8 zero points"
    ):
        build_bundle(unrecorded.root, "jetson-orin-nano", "int8", host=ORIN_NANO)
    trt_quantized = tiny_bundle(int8=tiny_model(qdq_zero_point=np.array(0, np.int8)), profile="trt", name="trtq")
    assert build_bundle(trt_quantized.root, "jetson-orin-nano", "int8", host=ORIN_NANO)["engine"]["source"] == "int8"
    assert fake_trt.builds[-1][1].precision == "int8"


@pytest.mark.trt
@pytest.mark.gpu
def test_real_tensorrt_engine_build_and_select(tiny_bundle):
    pytest.importorskip("tensorrt", reason="TensorRT not installed")
    host = HostFacts.detect()
    if not host.nvidia_gpu:
        pytest.skip("no NVIDIA GPU visible")
    from edgekit.builder import device_problems
    from edgekit.targets import list_targets

    # The Jetson target of this board and JetPack (its L4T picks the TensorRT), else nvidia-gpu.
    jetsons = [t.name for t in list_targets() if t.trt.jetson and not device_problems(t, host)] if host.l4t else []
    target = jetsons[0] if jetsons else "nvidia-gpu"
    bundle = tiny_bundle()
    doc = build_bundle(bundle.root, target, "fp32", host=host)
    assert doc["engine"]["runtime"] == "trt"
    tokens = (np.arange(16, dtype=np.int64).reshape(2, 8) * 5) % 16
    with select_engine(bundle.root, target, "fp32", host=host).open() as rt:
        np.testing.assert_allclose(
            rt.run({"tokens": tokens})["logits"],
            run_model(bundle.path_of("fp32"), {"tokens": tokens}),
            atol=1e-3,
            rtol=1e-3,
        )


def test_demo_build_stage_reports_lint_and_engine(masked):
    from edgekit.builder import demo_build_stage

    stage = demo_build_stage(masked, "cpu", "fp32")
    assert stage["lint_passed"] and stage["lint"]["error"] == 0 and stage["status"] == "built"
    assert stage["engine"].startswith("engines/cpu/fp32-") and stage["format"] == "onnx"
    assert stage["bytes"] == (masked / stage["engine"]).stat().st_size and stage["runtime"] == f"ort {ort.__version__}"
    assert json.loads(json.dumps(stage)) == stage


def test_build_a_bundle_opened_by_a_relative_path(tiny_bundles, tmp_path, monkeypatch):
    """`edgekit demo` builds edgekit-demo/masked (relative): the engine entry's path is relative
    to the bundle (it raised ValueError: not in the subpath)."""
    import shutil

    from edgekit.builder import build_bundle

    shutil.copytree(tiny_bundles["masked"], tmp_path / "b" / "masked")
    monkeypatch.chdir(tmp_path)
    doc = build_bundle("b/masked", "cpu", "fp32", False)
    assert (tmp_path / "b" / "masked" / doc["engine"]["path"]).is_file()
