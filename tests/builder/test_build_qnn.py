"""`edgekit build --target <snapdragon>`: an EPContext model (the QNN context binary for that SoC)
recorded with its compatibility keys, refused when stale, loaded by run/check without compiling."""

from __future__ import annotations

import json
import shutil

import pytest

from edgekit.builder import build_bundle, select_engine
from edgekit.bundle import Bundle
from edgekit.errors import EdgekitError
from edgekit.runtimes.engines import EngineNeedsBuild, find_engine

pytestmark = pytest.mark.slow  # compiles for the emulated HTP

TARGET = "snapdragon-8-gen-3"


@pytest.fixture
def masked(tiny_qnn_bundles, tmp_path):
    root = tmp_path / "masked"
    shutil.copytree(tiny_qnn_bundles["masked"], root)
    return root


def _context_nodes(path) -> list[str]:
    import onnx

    return [n.op_type for n in onnx.load(str(path)).graph.node]


def test_build_writes_an_epcontext_model_with_compatibility_keys(masked):
    doc = build_bundle(masked, TARGET, "int8")
    assert doc["status"] == "built"
    entry = doc["engine"]
    assert entry["runtime"] == "qnn" and entry["format"] == "epcontext" and not entry["portable"]
    assert _context_nodes(masked / entry["path"]) == ["EPContext"]  # the compiled binary, embedded
    q = entry["qnn"]
    assert (q["htp_arch"], q["soc_model"]) == (75, 57)
    assert q["qnn_sdk"] and q["onnxruntime_qnn"] and q["onnxruntime"]
    bundle = Bundle.load(masked)
    assert entry["source_onnx_sha256"] == bundle.artifact("int8").sha256
    assert entry["session_seconds"]["compile"] > 0 and entry["session_seconds"]["load_precompiled"] > 0
    assert build_bundle(masked, TARGET, "int8")["status"] == "up-to-date"


def test_run_loads_the_context_without_compiling(masked):
    build_bundle(masked, TARGET, "int8")
    choice = find_engine(masked, TARGET, "int8")
    assert choice.built and choice.runtime == "qnn" and choice.compile_seconds is not None
    with choice.open() as rt:
        assert rt.precompiled and rt.session_info["precompiled"]
        assert "compile_seconds_at_build" in rt.session_info and "saved_seconds" in rt.session_info
        assert any("emulated" in w for w in rt.warnings) == rt.emulated


def test_without_a_build_the_bundle_model_is_compiled_at_load(masked):
    choice = find_engine(masked, TARGET, "int8")
    assert not choice.built and choice.path == Bundle.load(masked).path_of("int8")
    with choice.open() as rt:
        assert not rt.precompiled
        assert any("no precompiled context" in w for w in rt.warnings)


def test_a_context_from_another_qnn_sdk_or_soc_is_stale(masked, tmp_path):
    build_bundle(masked, TARGET, "int8")
    manifest = masked / "edgekit.json"
    doc = json.loads(manifest.read_text())
    doc["engines"][f"{TARGET}/int8"]["qnn"]["qnn_sdk"] = "2.0.0"
    manifest.write_text(json.dumps(doc))
    with pytest.raises(EngineNeedsBuild, match="QNN SDK version: compiled with 2.0.0"):
        find_engine(masked, TARGET, "int8")
    with pytest.raises(EdgekitError, match="stale"):
        build_bundle(masked, TARGET, "int8")
    assert select_engine(masked, TARGET, "int8", rebuild=True).built  # --rebuild compiles it again

    # The same target name, its TOML now naming another SoC: the context is refused, with the reason.
    from importlib import resources

    other = tmp_path / "sd.toml"
    other.write_text(
        resources.files("edgekit.targets")
        .joinpath(f"{TARGET}.toml")
        .read_text()
        .replace("soc_model = 57", "soc_model = 69")
    )
    with pytest.raises(EngineNeedsBuild, match="soc_model: compiled for 57"):
        find_engine(masked, other, "int8")


def test_fp16_builds_from_the_fp32_model(masked):
    entry = build_bundle(masked, TARGET, "fp16")["engine"]
    assert entry["source"] == "fp32" and entry["qnn"]["fp16"]
    with find_engine(masked, TARGET, "fp16").open() as rt:
        assert rt.precompiled


def test_an_int8_model_of_another_profile_is_refused_before_compiling(masked):
    bundle = Bundle.load(masked)
    bundle.manifest["quantization"]["profile"] = "cpu"
    bundle.save()
    with pytest.raises(EdgekitError, match="--profile qnn"):
        build_bundle(masked, TARGET, "int8")


def test_check_with_the_target_runs_the_candidate_from_the_precompiled_context(masked):
    from edgekit.check import CheckConfig, check_bundle

    build_bundle(masked, TARGET, "int8")
    doc = check_bundle(
        masked, CheckConfig(reference="ort:fp32", candidate="qnn:int8", n=1, cond={"class_id": "1"}, target=TARGET)
    )
    assert doc["candidate"] == "qnn:int8" and any("emulated" in w for w in doc["warnings"])


def test_a_relative_bundle_path_builds(masked, monkeypatch):
    monkeypatch.chdir(masked.parent)
    entry = build_bundle(masked.name, TARGET, "int8")["engine"]
    assert entry["path"].startswith(f"engines/{TARGET}/") and (masked / entry["path"]).is_file()
