"""edgekit debug on ORT: a planted fault is found at exactly its layer and step; a layer that
breaks INT8 is the one whose removal from INT8 makes check pass."""

from __future__ import annotations

import math

from edgekit.bundle import Bundle
from edgekit.debug import DebugConfig, debug_bundle
from edgekit.debug.config import DEFAULT_THRESHOLD_DB
from edgekit.debug.html import write_heatmap
from edgekit.debug.render import summary_line
from edgekit.evaluate import gate_runtimes
from edgekit.quantize import QuantizeConfig, quantize_bundle
from edgekit.runtimes import open_runtime
from tests.debug.conftest import QUANTIZE, copy_bundle


def test_a_planted_range_fault_is_found_at_its_layer_and_step(planted, tmp_path):
    path, step = planted
    doc = debug_bundle(path, DebugConfig())
    entry = doc["entry"]
    assert (entry["module"], entry["op"], entry["step"]) == ("ctx", "MatMul", step + 1)
    assert entry["crossed_threshold"] and entry["added_sqnr_db"] < DEFAULT_THRESHOLD_DB
    # Before that step the same layer was healthy: the error entered there, it was not largest there.
    ctx = doc["layers"]["labels"].index("ctx")
    assert all(doc["layers"]["per_step"][s][ctx] > DEFAULT_THRESHOLD_DB for s in range(step))
    assert doc["attribution"]["cause"] == "activation range"
    assert doc["attribution"]["activation"][0]["clipped_share"] > 0  # the late step exceeds the planted range
    assert doc["compounding"]["steps_crossing"][0] == step + 1
    page = write_heatmap(tmp_path / "html", doc | {"summary": summary_line(doc)})
    text = page.read_text()
    assert "data:image/png;base64," in text and f"step {step + 1} of {doc['steps']}, ctx (MatMul)" in text


def test_the_layer_found_is_the_one_whose_removal_from_int8_proves_it(outlier, outlier_doc, tmp_path):
    entry = outlier_doc["entry"]
    assert entry["module"] == "fc2" and entry["op"] == "MatMul"
    assert not outlier_doc["passed"] and outlier_doc["gate"]["failed"]
    assert outlier_doc["capture"]["outputs_changed_by_taps"] == 0.0
    assert outlier_doc["attribution"]["cause"] == "activation range"

    def gate_without(layer: str) -> bool:
        path = copy_bundle(outlier, tmp_path / layer)
        quantize_bundle(path, QuantizeConfig(**QUANTIZE, exclude=(layer,)))
        bundle = Bundle.load(path)
        q = bundle.manifest["quantization"]["budget"]["eval"]
        with open_runtime(bundle, "ort", "fp32") as ref, open_runtime(bundle, "ort", "int8") as cand:
            return gate_runtimes(bundle, ref, cand, q["samples"], q["seed"], q["decode"])["passed"]

    assert gate_without(entry["module"])  # fc2 out of INT8: check passes
    assert not gate_without("fc1")  # another layer out of INT8: it still fails


def test_the_document_has_every_step_and_tensor(outlier_doc):
    doc = outlier_doc
    assert doc["schema"] == "edgekit.debug/1" and doc["steps"] == 4
    assert len(doc["sqnr"]["per_step"]) == doc["steps"]
    assert all(len(row) == len(doc["sqnr"]["tensors"]) for row in doc["sqnr"]["per_step"])
    assert "fc2" in doc["sqnr"]["modules"] and math.isinf(
        doc["sqnr"]["per_step"][0][doc["sqnr"]["tensors"].index("embedding")]
    )
    line = summary_line(doc)
    assert line.startswith(f"step {doc['entry']['step']} of 4, fc2 (MatMul): ") and "check fails, margin -" in line
