"""A candidate's memory on the budget runtime (what ``--step-buckets auto`` weighs a bucket count
by): real ORT sessions and OpenVINO compiled models, measured in a fresh process; the bucket graphs
measured as a bundle stores them, over one weights file."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from edgekit.bundle import Bundle
from edgekit.quantize.buckets.candidate import added_rss
from edgekit.quantize.buckets.shared import shared_copies
from edgekit.runtimes.ort import OrtRuntime
from tests.quantize.conftest import build_tiny_model, tiny_feeds


def test_bucket_graphs_are_measured_over_one_weights_file_and_compute_the_same(tmp_path):
    pytest.importorskip("onnx")
    graphs = [build_tiny_model(tmp_path / f"g{i}.onnx") for i in range(2)]  # same weights, as buckets share
    stored = shared_copies(graphs, tmp_path / "stored")
    weights = [p for p in (tmp_path / "stored").iterdir() if p.suffix == ".bin"]
    assert len(stored) == 2 and len(weights) == 1 and weights[0].stat().st_size > 0
    assert all(p.stat().st_size < graphs[0].stat().st_size / 2 for p in stored)  # the weights left the graphs
    feeds = tiny_feeds(1)[0]
    with OrtRuntime(graphs[0]) as original, OrtRuntime(stored[1]) as copy:
        np.testing.assert_array_equal(original.run(feeds)["y"], copy.run(feeds)["y"])


@pytest.mark.parametrize("runtime", ["ort", "openvino"])
def test_added_rss_is_measured_in_a_fresh_process(tiny_model, runtime):
    pytest.importorskip("onnxruntime" if runtime == "ort" else "openvino")
    feeds = tiny_feeds(2)
    one = added_rss(runtime, [tiny_model], feeds[:1], threads=1)
    assert one is not None and one > 0  # the runtime's libraries and the session
    if runtime == "openvino":
        # Every compiled model holds its own kernels and buffers: two cost more than one.
        two = added_rss(runtime, [tiny_model, tiny_model], feeds, threads=1)
        assert two is not None and two > one


def test_added_rss_needs_a_feed_per_graph(tiny_model):
    with pytest.raises(ValueError, match="2 graphs for 1 feeds"):
        added_rss("ort", [tiny_model, tiny_model], tiny_feeds(1), threads=1)


@pytest.mark.slow
def test_auto_on_openvino_records_what_each_count_adds_and_keeps_the_bound(quant_bundles, tmp_path):
    """Through the CLI, budget on OpenVINO: every bucket count auto considered past one scale is
    recorded with its measured memory ratio; one past --bucket-memory is marked and not kept."""
    pytest.importorskip("openvino")
    from typer.testing import CliRunner

    from edgekit.cli import app

    root = Path(shutil.copytree(quant_bundles["flow"], tmp_path / "flow"))
    r = CliRunner().invoke(
        app,
        [
            "quantize",
            str(root),
            "--step-buckets",
            "auto",
            "--runtime",
            "openvino",
            "--calib-samples",
            "4",
            "--eval-samples",
            "4",
            "--threads",
            "1",
            "--json",
        ],
        catch_exceptions=False,
    )
    assert r.exit_code in (0, 4), r.output
    doc = json.loads(r.stdout)
    tried = doc["step_buckets"]["tried"]
    assert tried[0]["n"] == 1 and all(isinstance(t["memory_ratio"], float) and t["memory_ratio"] > 0 for t in tried[1:])
    kept = doc["step_buckets"]["n"]
    over = [t for t in tried if t.get("skipped")]
    assert all(t["memory_ratio"] > 1.2 and t["skipped"] == "memory > 1.2x" and t["n"] > kept for t in over)
    assert all(t["memory_ratio"] <= 1.2 for t in tried[1:] if not t.get("skipped"))
    assert over == tried[-1:] or not over  # nothing larger is tried once a count is past the bound
    manifest = Bundle.load(root).manifest["quantization"]
    assert manifest["config"]["bucket_memory"] == 1.2 and manifest["step_buckets"]["tried"] == tried


def test_bucket_memory_must_be_a_ratio(tmp_path):
    from typer.testing import CliRunner

    from edgekit.cli import app

    r = CliRunner().invoke(app, ["quantize", str(tmp_path), "--bucket-memory", "0.5"])
    assert (
        r.exit_code == 2
        and "--bucket-memory 0.5" in r.output
        and "[1, 100]" in r.output
        and "Traceback" not in r.output
    )
