"""A stage that fails leaves no file the manifest does not list (issue #45, point 6): `build
--precision auto` on a manifest with a NaN in ``quantization.speed`` wrote
``engines/cpu/fp32-*.onnx``, then could not save the manifest and left the engine unlisted. The
manifest is now refused when it loads, and whatever makes a writing stage fail after it moved
files into the bundle, ``_lock.writes_bundle`` takes them away again."""

from __future__ import annotations

import json
import shutil

import pytest
from typer.testing import CliRunner

from edgekit import bundle as bundle_module
from edgekit._lock import bundle_files
from edgekit.bundle import MANIFEST, Bundle
from edgekit.cli import app
from edgekit.errors import BundleError

runner = CliRunner()


@pytest.fixture(scope="module")
def quantized(tiny_bundles, tmp_path_factory):
    """The tiny masked bundle with an int8 model (cpu profile), built for nothing yet."""
    from edgekit.quantize import QuantizeConfig, quantize_bundle

    root = shutil.copytree(tiny_bundles["masked"], tmp_path_factory.mktemp("leftovers") / "masked")
    quantize_bundle(root, QuantizeConfig(calib_samples=2, eval_samples=2, isa="avx2", budget={"check_margin": -100.0}))
    return root


@pytest.fixture
def work(quantized, tmp_path):
    return shutil.copytree(quantized, tmp_path / "masked")


def _listed_or_old(root, before):
    """Files now in ``root`` that the manifest does not list and that were not there before."""
    doc = json.loads((root / MANIFEST).read_text())
    from edgekit.manifest import live_paths

    return sorted(bundle_files(root) - before - live_paths(doc) - {MANIFEST, ".edgekit.lock"})


def test_the_issues_nan_speed_is_refused_before_anything_is_built(work):
    doc = json.loads((work / MANIFEST).read_text())
    doc["quantization"]["speed"] = {"measured": True, "isa": "avx2", "runtime": "ort", "int8_speedup": float("nan")}
    (work / MANIFEST).write_text(json.dumps(doc))
    before = bundle_files(work)
    r = runner.invoke(app, ["build", str(work), "--precision", "auto"])
    assert r.exit_code == 1 and "field quantization.speed.int8_speedup: expected a finite number" in r.stderr, r.output
    assert bundle_files(work) == before and not (work / "engines").exists()


def test_a_build_whose_manifest_cannot_be_written_leaves_no_engine(work, monkeypatch):
    """The commit itself fails (a value JSON cannot hold, a full disk at the rename): the engine
    moved into engines/ goes with the failed stage."""

    def refuse(path, doc):
        raise BundleError(f"refusing to write {path}: Out of range float values are not JSON compliant: nan")

    monkeypatch.setattr(bundle_module, "write_json_atomic", refuse)
    before = bundle_files(work)
    r = runner.invoke(app, ["build", str(work), "--precision", "auto"])
    assert r.exit_code == 1 and "refusing to write" in r.stderr, r.output
    assert bundle_files(work) == before and not (work / "engines").exists()
    Bundle.load(work)


def test_a_quantize_that_fails_after_moving_its_graph_in_leaves_nothing_unlisted(work, monkeypatch):
    def refuse(path, doc):
        raise BundleError(f"refusing to write {path}")

    monkeypatch.setattr(bundle_module, "write_json_atomic", refuse)
    before = bundle_files(work)
    r = runner.invoke(
        app,
        [
            "quantize",
            str(work),
            "--calib-samples",
            "2",
            "--eval-samples",
            "2",
            "--budget",
            "check_margin=-100",
            "--isa",
            "avx2",
            "--method",
            "entropy",
        ],
    )
    assert r.exit_code == 1, r.output
    assert _listed_or_old(work, before) == [] and bundle_files(work) == before
    Bundle.load(work)  # the old int8 model, every hash intact


def test_an_error_between_install_and_save_takes_the_engine_away(work, monkeypatch):
    """A stage that raises after it installed an engine (here: the manifest entry is recorded,
    then the save raises an internal error): nothing unlisted stays, and the error is the one
    the user sees."""
    calls = []

    def boom(self):
        calls.append(1)
        raise RuntimeError("internal error after install")

    monkeypatch.setattr(Bundle, "save", boom)
    before = bundle_files(work)
    with pytest.raises(RuntimeError, match="after install"):
        from edgekit.builder import build_bundle

        build_bundle(work, "cpu", "fp32")
    assert calls and bundle_files(work) == before


def test_files_that_were_there_before_the_stage_are_never_swept(work, monkeypatch):
    (work / "notes.txt").write_text("mine, unlisted")

    def refuse(path, doc):
        raise BundleError("refusing to write")

    monkeypatch.setattr(bundle_module, "write_json_atomic", refuse)
    runner.invoke(app, ["build", str(work), "--target", "cpu"])
    assert (work / "notes.txt").read_text() == "mine, unlisted"
