"""edgekit debug on every runtime: OpenVINO and the QNN HTP backend for real (small: batch 1,
four steps), TensorRT through the recording fakes (tests/fakes/trt_bindings.py), the PyTorch
module as the reference (forward hooks)."""

from __future__ import annotations

import pytest

from edgekit.debug import DebugConfig, debug_bundle
from edgekit.runtimes.registry import backend
from tests.debug.conftest import copy_bundle


def test_openvino_int8_finds_the_same_layer(outlier):
    pytest.importorskip("openvino")
    doc = debug_bundle(outlier, DebugConfig(candidate="openvino:int8"))
    assert doc["capture"]["candidate"] == backend("openvino").debug.capture
    assert doc["entry"]["module"] == "fc2" and not doc["passed"]
    assert doc["capture"]["outputs_changed_by_taps"] < 1e-4


def test_torch_reference_through_forward_hooks(outlier):
    from edgekit._userhooks import TRUST_CODE

    token = TRUST_CODE.set(True)  # the fixture copied the bundle: its model source needs --trust-code
    try:
        doc = debug_bundle(outlier, DebugConfig(reference="torch:fp32", candidate="ort:int8"))
    finally:
        TRUST_CODE.reset(token)
    assert doc["capture"]["reference"] == backend("torch").debug.capture
    # Hooks capture module outputs only: every captured tensor is a module's.
    assert set(doc["sqnr"]["modules"]) <= {"tok", "ctx", "cls", "fc1", "fc2", "head"}
    assert doc["entry"]["module"] == "fc2"


def test_tensorrt_through_the_recording_fakes(outlier, monkeypatch):
    from edgekit.runtimes import trt as trt_backend
    from edgekit.runtimes.trt import metadata as trt_metadata
    from tests.fakes.trt_bindings import install

    install(monkeypatch, "10.3.0")
    host = trt_backend.HostMetadata("10.3.0", "Orin", "8.7", None)
    monkeypatch.setattr(trt_metadata, "host_metadata", lambda *a, **k: host)
    doc = debug_bundle(outlier, DebugConfig(candidate="trt:int8"))
    assert doc["capture"]["candidate"] == backend("trt").debug.capture and doc["devices"]["candidate"] == "cuda:0"
    assert doc["entry"]["module"] == "fc2" and doc["capture"]["outputs_changed_by_taps"] < 1e-4


@pytest.fixture(scope="module")
def qnn_outlier(exported, tmp_path_factory):
    pytest.importorskip("onnxruntime_qnn")
    from edgekit.quantize import QuantizeConfig, quantize_bundle

    path = copy_bundle(exported["outlier_masked"], tmp_path_factory.mktemp("qnn") / "bundle")
    quantize_bundle(path, QuantizeConfig(profile="qnn", calib_samples=2, eval_samples=2, fallback=False))
    return path


def test_qnn_htp_captures_the_dequantized_tensors_without_changing_the_result(qnn_outlier):
    doc = debug_bundle(qnn_outlier, DebugConfig(candidate="qnn:int8"))
    assert doc["capture"]["candidate"] == backend("qnn").debug.capture and "HTP" in doc["devices"]["candidate"]
    assert doc["capture"]["outputs_changed_by_taps"] == 0.0
    # The qnn profile quantizes the embedding table too (uint8, one scale for the table): the mask
    # token's row is 20x smaller than the others, so at step 1 (every token masked) the first op
    # already adds more noise than the threshold; later steps read mostly real tokens' rows.
    entry = doc["entry"]
    assert (entry["module"], entry["op"], entry["step"]) == ("tok", "Gather", 1) and entry["crossed_threshold"]
    assert doc["attribution"]["cause"] == "weights"
    embedding = [row[doc["sqnr"]["tensors"].index("embedding")] for row in doc["sqnr"]["per_step"]]
    assert embedding[-1] > embedding[0] + 10
