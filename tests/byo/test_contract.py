"""Issue #14 points 4, 6, 7 and the unconditional values: quantize's "met" is check's pass
(same metrics, thresholds, rows and decode settings); a relative factory path is recorded
absolutely; a flow decode's x0 goes into the .npz; per-element and "same" unconditional rows."""

from __future__ import annotations

import hashlib
import shutil

import numpy as np
import pytest

from tests.byo.conftest import EXAMPLE, invoke, invoke_json

FAST = ("--calib-samples", "2", "--eval-samples", "4")


def test_check_decodes_with_the_settings_quantize_gated(byo_bundles, tmp_path):
    bundle = tmp_path / "flow"
    shutil.copytree(byo_bundles["example"], bundle)
    q = invoke_json("quantize", bundle, *FAST, "--decode", "guidance=2", "--seed", "5")
    assert q["passed"] and q["budget"]["eval"] == q["budget"]["eval"] | {
        "samples": 4,
        "seed": 5,
        "decode": {"guidance": 2},
    }
    c = invoke_json("check", bundle)
    assert c["passed"] and c["decode"]["guidance"] == 2.0 and c["n"] == 4 and c["seed"] == 5
    # teacher-forced velocity SNR is part of what quantize gated
    gated = q["measured"]["check_metrics"]["velocity_snr_db"]
    if isinstance(gated, str):  # "inf": every layer fell back to FP32 within this tiny budget run
        assert str(c["metrics"]["velocity_snr_db"]) == gated
    else:
        assert c["metrics"]["velocity_snr_db"] == pytest.approx(gated, rel=1e-9)
    # explicit arguments still win
    c = invoke_json("check", bundle, "--n", "2", "--seed", "0")
    assert c["n"] == 2 and c["seed"] == 0


def test_budget_includes_checks_gate_and_fails_with_it(byo_bundles, tmp_path):
    """A budget whose own keys pass still fails when check's default gate would fail."""
    from edgekit.quantize import QuantizeConfig, quantize_bundle

    bundle = tmp_path / "flow"
    shutil.copytree(byo_bundles["example"], bundle)
    # snr_db floor off, no fallback: only check's velocity SNR / SNR gates (>= 30 dB) can fail it
    s = quantize_bundle(
        bundle,
        QuantizeConfig(
            calib_samples=2, eval_samples=2, budget={"snr_db": -100.0, "check_margin": 10.0}, fallback=False
        ),
    )
    row = next(r for r in s["budget"]["checks"] if r["key"] == "check_margin")
    assert row["passed"] is False and s["passed"] is False


def test_relative_factory_path_is_recorded_absolutely(tmp_path, monkeypatch):
    pytest.importorskip("torch")
    repo = EXAMPLE.parents[1]
    monkeypatch.chdir(repo)
    out = tmp_path / "mine"
    r = invoke("export", "examples/custom_model.py:make_model", "-o", out, "--batch", "2")
    assert r.exit_code == 0, r.output
    man = invoke_json("inspect", out)
    assert man["model"]["source"] == f"{EXAMPLE}:make_model"
    assert man["model"]["source_sha256"] == hashlib.sha256(EXAMPLE.read_bytes()).hexdigest()
    monkeypatch.chdir(tmp_path)  # another directory: the torch runtime rebuilds the module from there
    r = invoke_json("run", out, "--runtime", "torch", "--cond", "speaker=0.5")
    assert r["runtime"] == "torch"


def test_flow_run_writes_x0_by_the_documented_rule(byo_bundles, tmp_path):
    from edgekit.bundle import Bundle
    from edgekit.decode import FlowDecodeConfig
    from edgekit.decode.flow import decode_flow
    from edgekit.runtimes import open_runtime

    npz = tmp_path / "o.npz"
    run = invoke_json(
        "run", byo_bundles["example"], "--cond", "speaker=0.5", "--seed", "7", "--temperature", "0.7", "-o", npz
    )
    data = np.load(npz)
    want = (0.7 * np.random.default_rng(7).standard_normal((2, 32, 16))).astype(np.float32)
    np.testing.assert_array_equal(data["x0"], want)
    bundle = Bundle.load(byo_bundles["example"])
    with open_runtime(bundle) as rt:  # the frames follow from x0 alone (any seed)
        again = decode_flow(
            rt,
            bundle.meta,
            {"speaker": data["cond_speaker"]},
            FlowDecodeConfig(**(run["decode"] | {"seed": 123})),
            x0=data["x0"],
        )
    np.testing.assert_array_equal(again.x, data["frames"])


def test_flow_run_over_several_graph_calls_writes_each_rows_x0(byo_bundles, tmp_path):
    """Three --cond-data rows at batch 2 are two graph calls (seeds 7 and 8): x0 holds every
    row's own starting noise, so row 2's frames follow from the .npz alone (it held call 0's
    two rows only)."""
    from edgekit.bundle import Bundle
    from edgekit.decode import FlowDecodeConfig
    from edgekit.decode.flow import decode_flow
    from edgekit.runtimes import open_runtime

    rows = tmp_path / "speakers.npz"
    np.savez(rows, speaker=np.linspace(-1, 1, 3 * 8, dtype=np.float32).reshape(3, 8))
    npz = tmp_path / "o.npz"
    run = invoke_json("run", byo_bundles["example"], "--cond-data", rows, "--seed", "7", "-o", npz)
    data = np.load(npz)
    assert data["x0"].shape == data["frames"].shape == (3, 32, 16)
    draw = lambda seed: np.random.default_rng(seed).standard_normal((2, 32, 16)).astype(np.float32)  # noqa: E731
    np.testing.assert_array_equal(data["x0"][:2], draw(7))
    np.testing.assert_array_equal(data["x0"][2], draw(8)[0])
    bundle = Bundle.load(byo_bundles["example"])
    with open_runtime(bundle) as rt:
        again = decode_flow(
            rt,
            bundle.meta,
            {"speaker": data["cond_speaker"][[2, 2]]},
            FlowDecodeConfig(**(run["decode"] | {"seed": 0})),
            x0=data["x0"][[2, 2]],
        )
    np.testing.assert_allclose(again.x[0], data["frames"][2], rtol=0, atol=1e-6)


def test_per_element_and_same_unconditional_rows(byo_bundles):
    """grid_masked: text's unconditional value is a per-element null embedding [3, 8], style is
    "same" (kept), class_id a number; with guidance the unconditional call sees exactly those."""
    from edgekit.bundle import Bundle
    from edgekit.decode import MaskedDecodeConfig, decode_masked
    from edgekit.runtimes import open_runtime
    from edgekit.runtimes.recording import RecordingRuntime

    bundle = Bundle.load(byo_bundles["grid_masked"])
    cond = {
        "class_id": np.array([1, 2]),
        "text": np.ones((2, 3, 8), np.float32),
        "style": np.array([[1, 2], [3, 4]], np.int32),
    }
    with open_runtime(bundle) as rt:
        rec = RecordingRuntime(rt, "masked", bundle.meta)
        decode_masked(rec, bundle.meta, cond, MaskedDecodeConfig(steps=2, guidance=2.0))
    cond_call, uncond_call = rec.feeds[0], rec.feeds[1]  # graph batch 2 = B: two calls per step
    np.testing.assert_array_equal(cond_call["text"], cond["text"])
    np.testing.assert_array_equal(uncond_call["class_id"], [4, 4])
    np.testing.assert_array_equal(uncond_call["style"], cond["style"])
    null = np.array([[0.0] * 8, [0.0] * 8, [0.1] * 8], np.float32)
    np.testing.assert_array_equal(uncond_call["text"], np.broadcast_to(null, (2, 3, 8)))
