"""Step-bucket graphs are bound to their boundaries (issue #45, point 7): quantize records a
sha256 of the position axis, the edges and each bucket's (graph, file sha256) in order
(``bundle.bucket_binding``); a manifest whose bucket graphs were swapped consistently
(paths and hashes moved together, every file still verifying: 0<->1 used to pass check) or whose
edges were edited is refused, and so are engines built from the buckets."""

from __future__ import annotations

import copy
import json
import shutil

import pytest
from typer.testing import CliRunner

from edgekit.bundle import MANIFEST, Bundle
from edgekit.cli import app
from edgekit.errors import BundleError

runner = CliRunner()
RUN = ["--precision", "int8", "--cond", "class_id=1"]


@pytest.fixture(scope="module")
def bucketed(tiny_bundles, tmp_path_factory):
    from edgekit.builder import build_bundle
    from edgekit.quantize import QuantizeConfig, quantize_bundle

    root = shutil.copytree(tiny_bundles["masked"], tmp_path_factory.mktemp("binding") / "masked")
    loose = {"check_margin": -100.0, "lockstep_token_agreement": 0.0, "event_accuracy_drop": 1.0}
    quantize_bundle(
        root, QuantizeConfig(calib_samples=2, eval_samples=2, isa="avx2", step_buckets=2, fallback=False, budget=loose)
    )
    build_bundle(root, "cpu", "int8")
    return root


def _edited(src, dest, change):
    root = shutil.copytree(src, dest)
    doc = json.loads((root / MANIFEST).read_text())
    change(doc)
    (root / MANIFEST).write_text(json.dumps(doc))
    return root


def _swap_entries(doc):
    a = doc["artifacts"]
    a["int8"], a["int8-bucket-1"] = a["int8-bucket-1"], a["int8"]


def _swap_files(doc):  # only the file fields: each entry keeps its own config
    a, b = doc["artifacts"]["int8"], doc["artifacts"]["int8-bucket-1"]
    for key in ("path", "sha256", "bytes"):
        a[key], b[key] = b[key], a[key]


def _move_edge(doc):
    doc["quantization"]["step_buckets"]["boundaries"] = [0.1]


def _drop_binding(doc):
    del doc["quantization"]["step_buckets"]["binding"]


def test_the_intact_bucketed_bundle_runs_and_its_record_is_bound(bucketed):
    buckets = Bundle.load(bucketed).step_buckets()
    assert buckets.graphs == ("int8", "int8-bucket-1") and len(buckets.binding) == 64
    assert runner.invoke(app, ["run", str(bucketed), *RUN]).exit_code == 0
    assert runner.invoke(app, ["run", str(bucketed), "--target", "cpu", *RUN]).exit_code == 0


@pytest.mark.parametrize("change", [_swap_entries, _swap_files, _move_edge, _drop_binding])
def test_a_swap_or_an_edited_edge_is_refused_by_every_reader(bucketed, tmp_path, change):
    root = _edited(bucketed, tmp_path / "b", change)
    Bundle.load(root)  # every file still matches its hash: only the binding tells
    with pytest.raises(BundleError, match="step buckets"):
        Bundle.load(root).step_buckets()
    for args in (
        ["run", str(root), *RUN],
        ["check", str(root)],
        ["debug", str(root)],
        ["build", str(root), "--target", "cpu", "--precision", "int8", "--rebuild"],
    ):
        r = runner.invoke(app, args)
        assert r.exit_code == 1 and "Traceback" not in r.output, (args, r.output)
        assert r.stderr.count("error:") == 1 and "step buckets" in r.stderr, (args, r.stderr)


def _swap_engines(doc):
    top, sub = doc["engines"]["cpu/int8"], doc["engines"]["cpu/int8"]["buckets"]["engines"][0]
    for key in ("path", "sha256", "bytes"):
        top[key], sub[key] = sub[key], top[key]


def _move_engine_edge(doc):
    doc["engines"]["cpu/int8"]["buckets"]["boundaries"] = [0.1]


@pytest.mark.parametrize("change", [_swap_engines, _move_engine_edge])
def test_bucket_engines_swapped_or_edited_are_not_loaded(bucketed, tmp_path, change):
    root = _edited(bucketed, tmp_path / "b", change)
    r = runner.invoke(app, ["run", str(root), "--target", "cpu", *RUN])
    assert r.exit_code in (1, 3) and "Traceback" not in r.output and r.stderr.count("error:") == 1, r.output
    assert "step bucket engines do not match the boundaries" in r.stderr, r.stderr


def test_the_binding_covers_order_edges_and_hashes():
    from edgekit.bundle import bucket_binding

    graphs = [("int8", "a" * 64), ("int8-bucket-1", "b" * 64)]
    base = bucket_binding("t", [0.5], graphs)
    assert base == bucket_binding("t", [0.5], copy.deepcopy(graphs))
    assert base != bucket_binding("t", [0.5], graphs[::-1])
    assert base != bucket_binding("t", [0.25], graphs)
    assert base != bucket_binding("mask share", [0.5], graphs)
    assert base != bucket_binding("t", [0.5], [("int8", "b" * 64), ("int8-bucket-1", "a" * 64)])
