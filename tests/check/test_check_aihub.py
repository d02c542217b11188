"""`edgekit check --runtime aihub --device D`: the reference decodes the held-out rows on this host,
every call's inputs go to the device in one inference job, and check's teacher-forced metrics and
gate judge the device's outputs; what needs the candidate's own decode is reported as not
measured. No network: the client is an autospec of the real qai_hub module and the "device" runs
the bundle's graph with ONNX Runtime, with or without noise (tests/fakes/aihub.py)."""

from __future__ import annotations

import json

import numpy as np
import pytest
from typer.testing import CliRunner

from edgekit.bundle import Bundle
from edgekit.check import CheckConfig, check_bundle
from edgekit.cli import app
from tests.fakes.aihub import FakeHub
from tests.profile.conftest import B, L, V, make_masked_bundle

S24 = "Samsung Galaxy S24 (Family)"


def device_network(root, noise: float = 0.0, seed: int = 0):
    """The bundle's fp32 graph as the device would run it: int32 tokens in (--truncate_64bit_io),
    float logits out, plus ``noise`` (std) where the device's arithmetic would differ."""
    import onnxruntime as ort

    session = ort.InferenceSession(str(Bundle.load(root).path_of("fp32")), providers=["CPUExecutionProvider"])
    rng = np.random.default_rng(seed)

    def run(feeds):
        assert feeds["tokens"].dtype == np.int32
        (logits,) = session.run(["logits"], {"tokens": feeds["tokens"].astype(np.int64)})
        return {"logits": (logits + noise * rng.standard_normal(logits.shape)).astype(np.float32)}

    return run


@pytest.fixture
def masked(tmp_path):
    return make_masked_bundle(tmp_path / "masked")


def test_the_device_runs_every_recorded_call_and_check_gates_it(masked, monkeypatch):
    hub = FakeHub(monkeypatch, network=device_network(masked))
    lines: list[str] = []
    doc = check_bundle(
        masked, CheckConfig(runtime="aihub", candidate="fp16", device="snapdragon-8-gen-3", n=4), progress=lines.append
    )
    assert (doc["reference"], doc["candidate"]) == ("ort:fp32", "aihub:fp16")
    (compile_call,) = hub.calls(
        "submit_compile_job"
    )  # no AI Hub engine in the bundle: compiled for the target's first device
    assert compile_call["device"].name == S24
    (infer,) = hub.calls("submit_inference_job")
    assert infer["profile"] is False and infer["device"].name == S24
    tokens = infer["inputs"]["tokens"]
    assert len(tokens) == doc["aihub"]["calls"] == 2 * 4  # 4 rows = 2 batches of 2, 4 steps each, one call per step
    assert (
        tokens[0].shape == (B, L) and tokens[0].dtype == np.int32 and (tokens[0] == V).all()
    )  # step 1: every token masked
    assert doc["metrics"]["logits_kl"] == pytest.approx(0.0, abs=1e-9) and doc["metrics"]["top1_agreement"] == 1.0
    assert doc["metrics"]["token_agreement"] is None and "token_agreement" in doc["aihub"]["not_measured"]
    rows = {r["metric"]: r for r in doc["rows"]}
    assert (
        rows["top1_agreement"]["gated"]
        and rows["top1_agreement"]["passed"]
        and rows["token_agreement"]["value"] is None
    )
    assert doc["passed"] and len(doc["curves"]["top1_agreement_per_step"]) == 4
    assert doc["devices"]["candidate"].startswith(f"Qualcomm AI Hub {S24} (qualcomm-snapdragon-8gen3), compile job ")
    assert doc["aihub"]["mode"].startswith("per step on recorded feeds")
    assert [j["kind"] for j in doc["aihub"]["jobs"]] == ["compile", "inference"]
    assert any("recording every call's inputs" in line for line in lines)


def test_a_device_that_strays_fails_the_gate_with_exit_4(masked, monkeypatch, tmp_path):
    FakeHub(monkeypatch, network=device_network(masked, noise=5.0))
    r = CliRunner().invoke(
        app,
        [
            "check",
            str(masked),
            "--runtime",
            "aihub",
            "--candidate",
            "fp16",
            "--device",
            S24,
            "--n",
            "4",
            "--junit",
            str(tmp_path / "check.xml"),
            "--json",
        ],
    )
    assert r.exit_code == 4, r.output
    doc = json.loads(r.stdout)
    assert not doc["passed"] and "top1_agreement" in doc["failed"] and doc["metrics"]["top1_agreement"] < 0.9
    assert 'name="top1_agreement"' in (tmp_path / "check.xml").read_text()


def test_a_gate_on_a_metric_the_device_does_not_measure_is_said(masked, monkeypatch, tmp_path):
    FakeHub(monkeypatch, network=device_network(masked))
    thresholds = tmp_path / "t.toml"
    thresholds.write_text("[masked]\ntoken_agreement = 0.99\n")
    doc = check_bundle(masked, CheckConfig(runtime="aihub", candidate="fp16", device=S24, n=2, thresholds=thresholds))
    assert any(
        w.startswith("token_agreement: not measured on AI Hub") and w.endswith("not gated") for w in doc["warnings"]
    )


def test_strict_fails_the_device_check_on_its_warnings(masked, monkeypatch, tmp_path):
    FakeHub(monkeypatch, network=device_network(masked))
    thresholds = tmp_path / "t.toml"
    thresholds.write_text("[masked]\ntoken_agreement = 0.99\n")
    cfg = CheckConfig(runtime="aihub", candidate="fp16", device=S24, n=2, thresholds=thresholds, strict=True)
    doc = check_bundle(masked, cfg)
    assert not doc["passed"] and doc["failed"] == ["warnings"] and doc["strict"]
    row = next(r for r in doc["rows"] if r["metric"] == "warnings")
    assert row["value"] == len(doc["warnings"]) >= 1 and "token_agreement: not measured" in row["reason"]


def test_device_is_for_aihub_only(masked):
    from edgekit.errors import UsageError

    with pytest.raises(UsageError, match="--device names an AI Hub device: add --runtime aihub"):
        check_bundle(
            masked,
            CheckConfig(reference="fp32", candidate="fp32", runtime="ort", device=S24, candidate_decode={"steps": 2}),
        )


def swap_near_ties(root):
    """A device that differs from FP32 only where FP32 barely decides: at each position whose top
    two logits are within 0.05, it swaps them (a flip of a coin the model itself tossed)."""
    exact = device_network(root)

    def run(feeds):
        logits = exact(feeds)["logits"].copy()  # [B, L, W]
        order = np.argsort(logits, axis=-1)
        first, second = order[..., -1:], order[..., -2:-1]
        a, b = np.take_along_axis(logits, first, -1), np.take_along_axis(logits, second, -1)
        tied = (a - b) < 0.05
        np.put_along_axis(logits, first, np.where(tied, b, a), -1)
        np.put_along_axis(logits, second, np.where(tied, a, b), -1)
        return {"logits": logits}

    return run


def test_the_device_check_counts_near_ties_and_says_so_as_check_does(monkeypatch, tmp_path):
    # The same teacher-forced figures as edgekit check (evaluate.metrics' accumulator): a top-1
    # gate failed only at FP32's own near-ties says it in one warning, and the shares are reported.
    masked = make_masked_bundle(tmp_path / "undecided", fp32_scale=0.01)  # every decision a near-tie
    FakeHub(monkeypatch, network=swap_near_ties(masked))
    thresholds = tmp_path / "t.toml"
    thresholds.write_text("[masked]\ntop1_agreement = 1.0\n")  # any flip fails
    doc = check_bundle(masked, CheckConfig(runtime="aihub", candidate="fp16", device=S24, n=4, thresholds=thresholds))
    m = doc["metrics"]
    assert m["reference_near_ties"] == 1.0 and m["flips_at_near_ties"] == 1.0
    assert m["top1_agreement"] < 1.0 and doc["failed"] == ["top1_agreement"]
    assert not {"reference_near_ties", "flips_at_near_ties"} & set(doc["aihub"]["not_measured"])
    (note,) = [w for w in doc["warnings"] if "near" in w or "barely decides" in w]
    assert note.startswith(f"top1_agreement {m['top1_agreement']:.4g}: 100% of its flips are where FP32's own top two")
