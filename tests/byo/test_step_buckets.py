"""Step-aware INT8 (issue #27) on bring-your-own models, through the CLI: ``quantize --step-buckets``
writes one graph per step range over one shared weights file, and run, check, profile, build
and pack take the bucketed bundle unchanged."""

from __future__ import annotations

import shutil

import numpy as np
import pytest

from edgekit.bundle import Bundle
from tests.byo.conftest import flow_cond_rows, grid_cond_rows, invoke, invoke_json

FAST = ("--calib-samples", "4", "--eval-samples", "4")
LOOSE = ("--budget", "check_margin=-100")  # these tiny random models are not what is judged here


def _copy(byo_bundles, name, tmp_path):
    root = tmp_path / name
    shutil.copytree(byo_bundles[name], root)
    return root


def test_a_conditioned_flow_model_quantizes_with_step_buckets_and_runs_everywhere(byo_bundles, tmp_path):
    root = _copy(byo_bundles, "masked_flow", tmp_path)
    np.savez(tmp_path / "cond.npz", **flow_cond_rows())
    single = _copy(byo_bundles, "masked_flow", tmp_path / "one")
    base = invoke_json(
        "quantize", single, *FAST, *LOOSE, "--budget", "snr_db=0", "--no-fallback", "--cond-data", tmp_path / "cond.npz"
    )
    q = invoke_json(
        "quantize",
        root,
        *FAST,
        *LOOSE,
        "--budget",
        "snr_db=0",
        "--no-fallback",
        "--step-buckets",
        "2",
        "--cond-data",
        tmp_path / "cond.npz",
    )
    b = q["step_buckets"]
    assert b["n"] == 2 and b["by"] == "t" and len(b["boundaries"]) == 1 and 0 < b["boundaries"][0] < 1
    assert b["artifacts"] == ["int8", "int8-bucket-1"] and sum(b["calls_per_bucket"]) > 0
    assert len(b["per_step"]["one_scale_db"]) == len(b["per_step"]["bucketed_db"]) > 0
    bundle = Bundle.load(root)
    # The weights are stored once: the bucket graphs name one shared file.
    weights = b["weights_file"]
    art = [bundle.manifest["artifacts"][n] for n in b["artifacts"]]
    assert all(any(s["path"] == weights for s in a.get("side_files", [])) for a in art)
    assert (root / weights).stat().st_size == b["shared_bytes"] > 0
    # The weights are in the bundle once: each extra bucket adds only its graph without them
    # (on this tiny model the graph structure outweighs the weights; the demo flow's 4 buckets
    # were 0.99x its one-scale file: benchmarks/step_buckets.py).
    size = sum(a["bytes"] for a in art) + b["shared_bytes"]
    assert size <= base["sizes"]["int8_bytes"] + max(b["graph_bytes"]) + 1024, (size, base["sizes"], b["graph_bytes"])
    # Every stage takes the bucketed model unchanged; both buckets are used by a decode.
    r = invoke_json("run", root, "--precision", "int8", "--cond-data", tmp_path / "cond.npz")
    assert r["precision"] == "int8"
    check = invoke("check", root, "--json")
    assert check.exit_code in (0, 4), check.output
    p = invoke_json(
        "profile",
        root,
        "--precision",
        "fp32,int8",
        "--iters",
        "2",
        "--min-seconds",
        "0",
        "--warmup",
        "0",
        "--power",
        "off",
    )
    assert {v["precision"] for v in p["variants"] if v["available"]} == {"fp32", "int8"}
    built = invoke_json("build", root, "--target", "cpu", "--precision", "int8")
    assert len(built["engine"]["buckets"]["engines"]) == 1
    r2 = invoke_json("run", root, "--target", "cpu", "--precision", "int8", "--cond-data", tmp_path / "cond.npz")
    np.testing.assert_allclose(np.asarray(r2["quality"] or 0), np.asarray(r["quality"] or 0))
    # pack/unpack keep the buckets whole
    out = invoke_json("pack", root, "-o", tmp_path / "b.tar.gz")
    assert {weights, *(a["path"] for a in art)} <= {f.split("/")[-1] for f in out["files"]}
    u = invoke_json("unpack", tmp_path / "b.tar.gz", "-o", tmp_path / "unpacked")
    assert invoke("run", u["bundle"], "--precision", "int8", "--cond-data", tmp_path / "cond.npz").exit_code == 0


def test_the_bucketed_runtime_uses_each_bucket_for_its_own_steps(byo_bundles, tmp_path):
    from edgekit.evaluate import evaluate
    from edgekit.runtimes import open_runtime
    from edgekit.runtimes.bucketed import BucketedRuntime

    root = _copy(byo_bundles, "masked_flow", tmp_path)
    np.savez(tmp_path / "cond.npz", **flow_cond_rows())
    invoke_json(
        "quantize",
        root,
        *FAST,
        *LOOSE,
        "--budget",
        "snr_db=0",
        "--no-fallback",
        "--step-buckets",
        "3",
        "--cond-data",
        tmp_path / "cond.npz",
    )
    bundle = Bundle.load(root)
    edges = list(bundle.step_buckets().boundaries)
    with open_runtime(bundle, "ort", "int8") as rt:
        assert isinstance(rt, BucketedRuntime) and len(rt.runtimes) == 3
        # The bucket sessions take turns: one arena between them, threads that spin inside runs only.
        assert all(
            r.options.shared_arena and r.options.allow_spinning and not r.options.spin_between_runs for r in rt.runtimes
        )
        evaluate(bundle, rt, 2, 0, {"steps": 6}, cond={k: v[:2] for k, v in flow_cond_rows().items()})
        assert all(c > 0 for c in rt.calls), rt.calls  # t runs 0 -> 1: every range gets its calls
        for t, want in ((0.0, 0), (float(edges[0]) + 1e-6, 1), (0.999, 2)):
            assert rt.bucket({"t": np.full(2, t, np.float32)}) == want
    with open_runtime(bundle, "openvino", "int8") as rt:  # every registered runtime that runs int8 files
        assert isinstance(rt, BucketedRuntime)


def test_a_masked_model_takes_auto_buckets_by_mask_share(byo_bundles, tmp_path):
    root = _copy(byo_bundles, "grid_masked", tmp_path)
    np.savez(tmp_path / "cond.npz", **grid_cond_rows())
    q = invoke_json("quantize", root, *FAST, *LOOSE, "--step-buckets", "auto", "--cond-data", tmp_path / "cond.npz")
    b = q["step_buckets"]
    assert [t["n"] for t in b["tried"]][0] == 1 and all(t["n"] <= 4 for t in b["tried"])
    if b.get("n", 1) > 1:
        assert b["by"] == "mask share"
    assert invoke("run", root, "--precision", "int8", "--cond-data", tmp_path / "cond.npz").exit_code == 0


def test_bad_step_bucket_values_are_one_line(byo_bundles, tmp_path):
    root = _copy(byo_bundles, "grid_masked", tmp_path)
    for bad in ("0", "9", "many"):
        r = invoke("quantize", root, "--step-buckets", bad)
        assert r.exit_code == 2 and "--step-buckets" in r.stderr and "auto or an integer in [1, 8]" in r.stderr, (
            r.output
        )


def test_boundaries_follow_the_measured_drift():
    from edgekit.quantize.buckets.ranges import choose_buckets, split_feeds

    # Calls at t = 0..0.7: the first four share one range, the last four another, 8x wider.
    positions = np.linspace(0, 0.7, 8)
    amax = np.array([[1.0, 2.0]] * 4 + [[8.0, 16.0]] * 4)
    b = choose_buckets("flow", positions, amax, 2)
    assert b.by == "t" and b.boundaries == pytest.approx((0.35,))
    assert [len(p) for p in split_feeds(list(range(8)), positions, b)] == [4, 4]
    assert choose_buckets("flow", positions, amax, 1).n == 1
    assert choose_buckets("masked", [1.0, 1.0], amax[:2], 4).n == 1  # one distinct position: nothing to split
