"""`edgekit build` for an OpenVINO target ships the route measured fastest within the budget
(issue #44.2), with real OpenVINO on tiny models and stand-in timings (``ov_route_times``): the
record in the manifest, an IR engine's files, `run --target` and `select_engine` opening it,
what makes it stale, and pack/unpack carrying its .xml and .bin."""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import onnx
import pytest
from build_helpers import X86, tiny_model  # tests/builder/build_helpers.py
from typer.testing import CliRunner

from edgekit.builder import build_bundle, engine_problems, select_engine
from edgekit.bundle import Bundle
from edgekit.cli import app
from edgekit.targets import load_target

pytest.importorskip("openvino")
from edgekit.builder import openvino_routes  # noqa: E402
from edgekit.runtimes.openvino import openvino_version  # noqa: E402

HOST = dataclasses.replace(X86, isa=("avx2", "avx512f", "avx512_vnni"))
TOKENS = np.arange(16, dtype=np.int64).reshape(2, 8) % 16
runner = CliRunner()


def _int8_bundle(tiny_bundle):
    return tiny_bundle(int8=tiny_model(qdq_zero_point=np.array(128, np.uint8)), profile="cpu")


def _ort(path):
    import onnxruntime as ort

    return ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(None, {"tokens": TOKENS})[0]


def _logits(choice):
    with choice.open(threads=1) as rt:
        return rt, np.array(rt.run({"tokens": TOKENS})["logits"])


def test_the_fastest_route_ships_as_ir_files_recorded_with_every_routes_figures(tiny_bundle, ov_route_times):
    ov_route_times({"onnx": 2.0, "ir": 1.0})
    bundle = _int8_bundle(tiny_bundle)
    doc = build_bundle(bundle.root, "intel-cpu", "int8", host=HOST)
    entry = doc["engine"]
    xml, weights = entry["path"], entry["weights"]["path"]
    assert entry["format"] == "ir" and xml.startswith("engines/intel-cpu/int8-") and xml.endswith(".xml")
    assert weights == xml[: -len(".xml")] + ".bin"  # the name read_model looks for beside the .xml
    assert entry["weights"]["bytes"] == (bundle.root / weights).stat().st_size > 0
    assert entry["portable"] is True and entry["cpu_isa"] is None  # compiled where it runs
    assert entry["config"]["compiled"]["inference_precision"] == "f32"

    route = entry["route"]
    assert route["shipped"] == "ir" and route["format"] == "ir"
    assert route["why"].startswith("ir was 100.0% faster than onnx (1.000 vs 2.000 ms)")
    assert route["routes"]["onnx"]["median_ms"] == 2.0 and route["routes"]["ir"]["median_ms"] == 1.0
    assert route["routes"]["ir-fp16"]["same_as"] == "ir"  # OpenVINO ignores compress_to_fp16 for a QDQ model
    ir = route["routes"]["ir"]
    assert ir["kept"] and ir["snr_vs_source_db"] >= route["required_snr_vs_source_db"] > ir["snr_vs_fp32_db"]
    assert route["feeds"] == "8 calls of one decode (2 rows, seed 0)"  # the tiny bundle's 8 MaskGIT steps
    assert set(route["routes"]["onnx"]["exec"]) & {"FullyConnected", "MatMul"}  # what the plugin compiled

    b = Bundle.load(bundle.root)
    assert b.engines["intel-cpu/int8"].files == (xml, weights) and b.engines["intel-cpu/int8"].format == "ir"
    assert build_bundle(bundle.root, "intel-cpu", "int8", host=HOST)["status"] == "up-to-date"

    choice = select_engine(bundle.root, "intel-cpu", "int8", host=HOST)
    assert choice.built and choice.path == bundle.root / xml
    rt, out = _logits(choice)
    assert rt.model_files == (bundle.root / xml, bundle.root / weights) and rt.settings["threads"] == 1
    np.testing.assert_allclose(out, _ort(bundle.path_of("int8")), atol=0.05, rtol=0)  # the same QDQ model

    r = runner.invoke(
        app, ["run", str(bundle.root), "--target", "intel-cpu", "--precision", "int8", "--steps", "2", "--json"]
    )
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout)["runtime"] == "openvino"


def test_a_route_that_loses_accuracy_is_not_shipped_however_fast(tiny_bundle, ov_route_times, monkeypatch, tmp_path):
    ov_route_times({"onnx": 5.0, "ir": 1.0})
    bundle = _int8_bundle(tiny_bundle)
    off = tmp_path / "off.onnx"  # the IR routes get a model 5 % off the source: about 26 dB from it
    onnx.save(tiny_model(qdq_zero_point=np.array(128, np.uint8), scale=1.05), str(off))
    real = openvino_routes.save_ir
    monkeypatch.setattr(openvino_routes, "save_ir", lambda src, xml, fp16, for_cpu=False: real(off, xml, fp16, for_cpu))
    entry = build_bundle(bundle.root, "intel-cpu", "int8", host=HOST)["engine"]
    route = entry["route"]
    assert route["shipped"] == "onnx" and entry["format"] == "blob" and entry["path"].endswith(".blob")
    assert route["routes"]["ir"]["kept"] is False and "adds noise at" in route["routes"]["ir"]["why"]
    assert route["routes"]["ir"]["snr_vs_source_db"] < route["required_snr_vs_source_db"]
    assert route["why"] == "onnx was the fastest (5.000 ms per forward); ir failed the budget"
    assert "weights" not in entry


def test_an_fp32_build_times_every_route_with_files_of_its_own_and_says_so(tiny_bundle, ov_route_times):
    ov_route_times({"onnx": 1.0, "ir": 1.0, "ir-fp16": 1.0})
    bundle = tiny_bundle()
    r = runner.invoke(app, ["build", str(bundle.root), "--target", "intel-cpu", "--precision", "fp32"])
    assert r.exit_code == 0, r.output
    assert "route: onnx: onnx was the fastest (1.000 ms per forward)" in r.stdout
    assert "  ir-fp16: 1.000 ms per forward" in r.stdout and "(kept)" in r.stdout
    route = Bundle.load(bundle.root).engines["intel-cpu/fp32"].as_recorded["route"]
    assert route["shipped"] == "onnx" and set(route["routes"]) == {"onnx", "ir", "ir-fp16", "ir-hoisted"}
    hoisted = route["routes"].pop("ir-hoisted")  # no Q/DQ in FP32: nothing to move, the ir route's files
    assert hoisted == {"same_as": "ir", "note": "no activation Q/DQ behind a Reshape to move"}
    assert "  ir-hoisted: no activation Q/DQ behind a Reshape to move" in r.stdout
    assert all("median_ms" in r for r in route["routes"].values())  # the f16-stored weights differ: timed too
    assert route["required_snr_vs_source_db"] == openvino_routes.FLOAT_MATCH_DB  # FP32 is its own reference
    assert route["routes"]["ir"]["kept"] and route["routes"]["ir"]["snr_vs_source_db"] > 100  # float rounding at most
    assert {p for ops in route["routes"]["onnx"]["exec"].values() for p in ops} == {"f32"}


def test_an_ir_engine_is_tied_to_openvino_releases_and_its_files_not_to_the_cpu(tiny_bundle, ov_route_times):
    ov_route_times({"onnx": 2.0, "ir": 1.0, "ir-fp16": 1.5})
    bundle = tiny_bundle()
    entry = build_bundle(bundle.root, "intel-cpu", "fp32", host=HOST)["engine"]
    assert entry["format"] == "ir" and entry["route"]["shipped"] == "ir"
    other_cpu = dataclasses.replace(HOST, isa=("avx2",))
    assert select_engine(bundle.root, "intel-cpu", "fp32", host=other_cpu).path.suffix == ".xml"
    b = Bundle.load(bundle.root)
    record = b.engines["intel-cpu/fp32"]
    assert engine_problems(b, dataclasses.replace(record, runtime_version="2020.1.0"), other_cpu) == []
    assert engine_problems(b, dataclasses.replace(record, runtime_version="2099.1.0"), HOST) == [
        f"OpenVINO version: the IR was written by 2099.1.0, this host has the older {openvino_version()} "
        "(an IR reads into its own release and later ones)"
    ]
    weights = bundle.root / entry["weights"]["path"]
    weights.write_bytes(weights.read_bytes()[:-4])
    r = runner.invoke(app, ["run", str(bundle.root), "--target", "intel-cpu", "--precision", "fp32"])
    assert (
        r.exit_code == 1 and f"engine weights file {entry['weights']['path']}" in r.stderr and "--rebuild" in r.stderr
    )


def test_a_step_bucketed_int8_model_ships_the_blob_for_every_bucket(tiny_bundle, ov_route_times, monkeypatch, tmp_path):
    from edgekit.builder import openvino as ov_builder

    ov_route_times({"onnx": 2.0, "ir": 1.0})
    bundle = _int8_bundle(tiny_bundle)
    monkeypatch.setattr(type(bundle), "step_buckets", lambda self, artifact="int8": object())
    files, facts = ov_builder.build_openvino(
        bundle.path_of("int8"), load_target("intel-cpu"), "int8", HOST, tmp_path, bundle
    )
    assert files["model"].suffix == ".blob" and facts["format"] == "blob" and facts["route"] is None


def test_pack_carries_the_ir_and_its_weights_and_the_unpacked_engine_runs(tiny_bundle, ov_route_times, tmp_path):
    from edgekit.deploy.pack import bundle_contents, pack_bundle, unpack_bundle

    ov_route_times({"onnx": 2.0, "ir": 1.0})
    bundle = _int8_bundle(tiny_bundle)
    entry = build_bundle(bundle.root, "intel-cpu", "int8", host=HOST)["engine"]
    files, manifest, _ = bundle_contents(Bundle.load(bundle.root), load_target("intel-cpu"))
    assert {entry["path"], entry["weights"]["path"]} <= set(files)
    assert manifest["engines"]["intel-cpu/int8"]["weights"] == entry["weights"]
    pack_bundle(bundle.root, tmp_path / "b.tar.gz", "intel-cpu")
    unpacked = unpack_bundle(tmp_path / "b.tar.gz", tmp_path / "device")["bundle"]
    choice = select_engine(unpacked, "intel-cpu", "int8", host=HOST)
    assert choice.path.suffix == ".xml" and choice.path.with_suffix(".bin").is_file()
    _, got = _logits(choice)
    _, want = _logits(select_engine(bundle.root, "intel-cpu", "int8", host=HOST))
    np.testing.assert_array_equal(got, want)


def test_a_model_over_the_routes_size_limit_ships_the_blob_without_comparing(tiny_bundle, monkeypatch):
    """Comparing holds every route compiled at once: over ROUTES_MAX_BYTES (a real-size model),
    build ships the blob, writes no IR and says why in the record."""
    monkeypatch.setattr(openvino_routes, "ROUTES_MAX_BYTES", 0)
    monkeypatch.setattr(openvino_routes, "write_routes", lambda *a: pytest.fail("routes written over the limit"))
    bundle = _int8_bundle(tiny_bundle)
    entry = build_bundle(bundle.root, "intel-cpu", "int8", host=HOST)["engine"]
    assert entry["format"] == "blob" and entry["path"].endswith(".blob") and "weights" not in entry
    route = entry["route"]
    assert route["shipped"] == "onnx" and route["routes"] == {}
    assert route["why"].startswith("routes not compared: ") and "over 0 GiB" in route["why"]


def test_the_hoisted_ir_ships_when_fastest_and_a_plain_openvino_session_computes_what_run_target_does(
    tiny_bundle, ov_route_times
):
    """The int8 model's activation Q/DQ behind a Reshape (as quantize's pre-processing writes a
    MatMul): ir-hoisted is the IR of the graph with the pair moved ahead of it; shipped, an app's
    plain read_model + compile_model on its files computes what `run --target` computes."""
    import openvino as ov

    ov_route_times({"onnx": 2.0, "ir": 2.0, "ir-hoisted": 1.0})
    bundle = tiny_bundle(int8=tiny_model(qdq_zero_point=np.array(128, np.uint8), reshape=True), profile="cpu")
    entry = build_bundle(bundle.root, "intel-cpu", "int8", host=HOST)["engine"]
    route = entry["route"]
    assert route["shipped"] == "ir-hoisted" and entry["format"] == "ir" and entry["path"].endswith(".xml")
    hoisted = route["routes"]["ir-hoisted"]
    assert hoisted["note"] == "1 activation Q/DQ pair moved ahead of a Reshape"
    assert hoisted["kept"] and hoisted["snr_vs_source_db"] >= openvino_routes.FLOAT_MATCH_DB  # the same values

    choice = select_engine(bundle.root, "intel-cpu", "int8", host=HOST)
    rt, ours = _logits(choice)
    compiled = ov.Core().compile_model(
        str(bundle.root / entry["path"]), "CPU", {"INFERENCE_PRECISION_HINT": "f32", "INFERENCE_NUM_THREADS": 1}
    )
    plain = compiled({"tokens": TOKENS})[0]
    np.testing.assert_allclose(plain, ours, rtol=0, atol=1e-5)
    np.testing.assert_allclose(ours, _ort(bundle.path_of("int8")), atol=0.05, rtol=0)  # the source QDQ model
    r = runner.invoke(
        app, ["run", str(bundle.root), "--target", "intel-cpu", "--precision", "int8", "--steps", "2", "--json"]
    )
    assert r.exit_code == 0, r.output
