"""``quantize --profile qnn``: every op quantized for the Hexagon NPU, 16-bit promotions decided by
decodes on the HTP backend (emulated here), recorded in the manifest."""

from __future__ import annotations

import shutil

import numpy as np
import pytest

from edgekit.bundle import Bundle
from edgekit.errors import EdgekitError
from edgekit.quantize import QuantizeConfig, quantize_bundle
from edgekit.quantize.config import DEFAULT_BUDGETS
from edgekit.runtimes.qnn import float_nodes

pytestmark = pytest.mark.slow  # exports tiny models and decodes them on the emulated NPU


def _uint16_q_nodes(path) -> int:
    import onnx

    model = onnx.load(str(path))
    inits = {i.name: i for i in model.graph.initializer}
    return sum(
        1 for n in model.graph.node
        if n.op_type == "QuantizeLinear" and len(n.input) > 2 and n.input[2] in inits
        and inits[n.input[2]].data_type == onnx.TensorProto.UINT16
    )


def test_every_op_is_quantized_and_the_budget_was_measured_on_the_htp(tiny_qnn_bundles):
    for kind, root in tiny_qnn_bundles.items():
        bundle = Bundle.load(root)
        q = bundle.manifest["quantization"]
        assert q["profile"] == "qnn" and q["passed"]
        assert float_nodes(bundle.path_of("int8")) == []  # no float op left for an NPU without float
        assert q["structure"]["float_nodes"] == []
        assert q["budget"]["measured_on"].startswith("qnn HTP backend")
        assert all(h["backend"] == "qnn-htp" for h in q["budget"]["history"] if h["passed"])
        assert q["qnn"]["share_8bit"] == 1.0 and q["qnn"]["promotions"] == []  # the tiny models pass at 8 bit
        assert q["qnn"]["htp_arch"] and q["qnn"]["qnn_sdk"]


def test_the_qnn_profile_has_its_own_token_floor_and_keeps_the_rest():
    budget = QuantizeConfig(profile="qnn").budget_for("masked")
    assert budget["lockstep_token_agreement"] == 0.95 and budget["top1_agreement"] == 0.90  # check's default top-1 floor
    assert budget["event_accuracy_drop"] == DEFAULT_BUDGETS["masked"]["event_accuracy_drop"]
    assert QuantizeConfig(profile="qnn").budget_for("flow") == DEFAULT_BUDGETS["flow"]


def test_a_failing_budget_promotes_the_least_precise_tensors_to_16_bit(tiny_qnn_bundles, tmp_path):
    root = tmp_path / "masked"
    shutil.copytree(tiny_qnn_bundles["masked"], root)
    # An unreachable floor: the search promotes (at most 2 tensors here) and records each step.
    cfg = QuantizeConfig(profile="qnn", calib_samples=2, eval_samples=2, budget={"lockstep_token_agreement": 1.01}, max_fallback=2)
    s = quantize_bundle(root, cfg)
    assert not s["passed"]
    q = s["qnn"]
    assert q["promoted_16bit"] == 2 and [p["step"] for p in q["promotions"]] == [1, 2]
    sqnr = [p["sqnr_8bit_db"] for p in q["promotions"]]
    assert sqnr == sorted(sqnr)  # least precise first
    assert 0 < q["share_8bit"] < 1
    backends = [h["backend"] for h in s["budget"]["history"]]
    assert backends[0] == "qnn-htp" and backends[-1] == "qnn-htp"  # the HTP backend decides
    assert _uint16_q_nodes(Bundle.load(root).path_of("int8")) >= 1
    assert float_nodes(Bundle.load(root).path_of("int8")) == []


def test_exclude_does_not_apply_to_an_npu_without_float(tiny_qnn_bundles, tmp_path):
    root = tmp_path / "masked"
    shutil.copytree(tiny_qnn_bundles["masked"], root)
    with pytest.raises(EdgekitError, match="no float fallback"):
        quantize_bundle(root, QuantizeConfig(profile="qnn", exclude=("fc",)))


def test_qnn_runtime_refuses_an_int8_model_of_another_profile(tiny_qnn_bundles, tmp_path):
    from edgekit.errors import UsageError
    from edgekit.runtimes import open_runtime

    root = tmp_path / "masked"
    shutil.copytree(tiny_qnn_bundles["masked"], root)
    bundle = Bundle.load(root)
    bundle.manifest["quantization"]["profile"] = "cpu"
    bundle.save()
    with pytest.raises(UsageError, match="--profile qnn"):
        open_runtime(Bundle.load(root), "qnn", "int8")
    with pytest.raises(UsageError, match="no fp32"):
        open_runtime(Bundle.load(root), "qnn", "fp32")


def test_check_runs_the_candidate_on_the_htp(tiny_qnn_bundles):
    from edgekit.check import CheckConfig, check_bundle

    doc = check_bundle(tiny_qnn_bundles["masked"], CheckConfig(reference="ort:fp32", candidate="qnn:int8", n=1,
                                                               cond={"class_id": "1"}))
    assert doc["candidate"] == "qnn:int8"
    assert np.isfinite(doc["metrics"]["logits_kl"])
