"""An int8 model that is not the one quantize made (issue #44, point 5): ``quantize`` records the
sha256 of every file it wrote, ``int8_match`` compares, ``inspect`` shows it, ``check``, ``build``
and ``profile`` warn (in their JSON too) and ``check --strict`` fails. The model is swapped the two
ways a user does it: through the Bundle API (the issue's scenario) and by copying another file
over it (and editing the manifest so that it still loads)."""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from edgekit import manifest
from edgekit.bundle import MANIFEST, Bundle
from edgekit.cli import app
from edgekit.errors import EXIT_CHECK_FAILED, EXIT_ERROR, EXIT_OK, BundleError
from edgekit.int8_match import DIFFERS, MATCHES, NOT_RECORDED, int8_match, int8_warnings
from edgekit.manifest import sha256_file, sha256_seen

onnx = pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")

runner = CliRunner()
# The tiny model's random weights: every gated metric reported only, so the verdict is the warnings'.
THRESHOLDS = '[masked]\ntoken_agreement = "off"\nlogits_kl = "off"\ntop1_agreement = "off"\n'
PROFILE = ["--precision", "fp32,int8", "--iters", "1", "--min-seconds", "0", "--warmup", "0", "--power", "off"]


@pytest.fixture
def quantized(tiny_int8_bundles, tmp_path) -> Path:
    return Path(shutil.copytree(tiny_int8_bundles["embedded"], tmp_path / "b"))


@pytest.fixture
def external(tiny_int8_bundles, tmp_path) -> Path:
    return Path(shutil.copytree(tiny_int8_bundles["external"], tmp_path / "ext"))


def _another_model(src: Path, dest: Path) -> Path:
    """``src`` with one int8 weight nudged: another model, of the same inputs and outputs."""
    model = onnx.load(str(src))
    init = next(i for i in model.graph.initializer if i.data_type == onnx.TensorProto.INT8 and len(i.dims) == 2)
    w = onnx.numpy_helper.to_array(init).copy()
    w.flat[0] = 0 if w.flat[0] != 0 else 1
    init.CopyFrom(onnx.numpy_helper.from_array(w, init.name))
    onnx.save(model, str(dest))
    return dest


def _swap_through_api(root: Path) -> tuple[str, str]:
    """The issue's scenario: the int8 model replaced with ``add_artifact``. (old, new) sha256."""
    bundle = Bundle.load(root)
    old = bundle.artifact("int8").sha256
    staged = _another_model(bundle.path_of("int8"), bundle.staging_path("int8.onnx"))
    new = bundle.add_artifact("int8", staged, made_by="user", config={}, suffix=".onnx").sha256
    bundle.save()
    return old, new


def _copy_over(root: Path, rel: str, data: bytes, side_of: str | None = None) -> None:
    """Another file copied over the bundle's file ``rel``, and the manifest edited so it loads."""
    (root / rel).write_bytes(data)
    doc = json.loads((root / MANIFEST).read_text())
    entry = doc["artifacts"]["int8"]
    if side_of is not None:
        entry = next(s for s in entry["side_files"] if s["path"] == rel)
    entry["sha256"], entry["bytes"] = hashlib.sha256(data).hexdigest(), len(data)
    (root / MANIFEST).write_text(json.dumps(doc))


def _invoke(*args: object) -> object:
    return runner.invoke(app, [str(a) for a in args])


# ---- the answer ------------------------------------------------------------------------------------
def test_quantize_records_every_file_it_wrote_and_they_match(quantized, external):
    for root in (quantized, external):
        bundle = Bundle.load(root)
        art = bundle.artifact("int8")
        files = bundle.quantization.int8_files["int8"]
        assert [f.path for f in files] == list(art.files)
        assert files[0].sha256 == sha256_file(bundle.path_of("int8")) and files[0].bytes == art.bytes
        assert int8_match(bundle).status == MATCHES
    assert len(Bundle.load(external).quantization.int8_files["int8"]) == 2  # the graph and its weights file


def test_a_model_replaced_through_the_bundle_api_differs(quantized):
    old, new = _swap_through_api(quantized)
    bundle = Bundle.load(quantized)  # loads: the artifacts section hashes whatever is there
    m = int8_match(bundle)
    assert (m.status, m.artifact, m.file, m.recorded, m.actual) == (
        DIFFERS,
        "int8",
        bundle.artifact("int8").path,
        old,
        new,
    )
    line = m.warning(bundle.root)
    assert bundle.artifact("int8").path in line and f"`edgekit quantize {bundle.root}` or restore the file" in line


def test_a_file_copied_over_is_refused_at_load_and_differs_once_the_manifest_is_edited(quantized, tmp_path):
    rel = Bundle.load(quantized).artifact("int8").path
    other = _another_model(quantized / rel, tmp_path / "other.onnx").read_bytes()
    shutil.copyfile(tmp_path / "other.onnx", quantized / rel)
    with pytest.raises(BundleError, match="does not match its recorded sha256"):
        Bundle.load(quantized)
    m = int8_match(Bundle.load(quantized, verify=False))  # what it says of the file on disk
    assert (m.status, m.file, m.actual) == (DIFFERS, rel, hashlib.sha256(other).hexdigest())
    _copy_over(quantized, rel, other)
    m = int8_match(Bundle.load(quantized))
    assert (m.status, m.file, m.actual) == (DIFFERS, rel, hashlib.sha256(other).hexdigest())


def test_a_weights_file_copied_over_differs(external):
    bundle = Bundle.load(external)
    side = bundle.artifact("int8").side_files[0]
    data = bytearray((external / side["path"]).read_bytes())
    data[0] ^= 0xFF
    _copy_over(external, side["path"], bytes(data), side_of="int8")
    m = int8_match(Bundle.load(external))
    assert (m.status, m.file, m.recorded, m.actual) == (
        DIFFERS,
        side["path"],
        side["sha256"],
        hashlib.sha256(data).hexdigest(),
    )
    assert side["path"] in m.warning("B")


def test_each_step_bucket_graph_is_compared(tiny_int8_bundles, tmp_path):
    root = Path(shutil.copytree(tiny_int8_bundles["buckets"], tmp_path / "buckets"))
    bundle = Bundle.load(root)
    assert set(bundle.quantization.int8_files) == {"int8", "int8-bucket-1"}
    assert int8_match(bundle).status == MATCHES
    staged = _another_model(bundle.path_of("int8-bucket-1"), bundle.staging_path("b1.onnx"))  # weights inline
    bundle.add_artifact("int8-bucket-1", staged, made_by="user", config={}, suffix=".onnx", side_files=[])
    bundle.save()
    m = int8_match(Bundle.load(root))
    assert (m.status, m.artifact) == (DIFFERS, "int8-bucket-1")
    assert m.file == Bundle.load(root).artifact("int8-bucket-1").path


def test_a_bundle_of_an_older_edgekit_is_not_recorded_and_no_int8_is_none(quantized, tiny_bundles):
    doc = json.loads((quantized / MANIFEST).read_text())
    del doc["quantization"]["int8_files"]
    (quantized / MANIFEST).write_text(json.dumps(doc))
    assert int8_match(Bundle.load(quantized)).status == NOT_RECORDED
    assert int8_match(Bundle.load(tiny_bundles["masked"])) is None


def test_a_record_of_the_wrong_type_is_one_line_naming_the_field(quantized):
    doc = json.loads((quantized / MANIFEST).read_text())
    doc["quantization"]["int8_files"] = {"int8": "int8.onnx"}
    (quantized / MANIFEST).write_text(json.dumps(doc))
    with pytest.raises(BundleError, match=r"field quantization\.int8_files\.int8: expected a list"):
        Bundle.load(quantized)


def test_a_verified_bundle_is_answered_without_reading_its_files_again(external, monkeypatch):
    bundle = Bundle.load(external)  # hashes every file once
    reads = []
    real = hashlib.sha256
    monkeypatch.setattr(manifest.hashlib, "sha256", lambda *a: reads.append(1) or real(*a))
    assert int8_match(bundle).status == MATCHES and reads == []
    path = bundle.path_of("int8")
    assert sha256_seen(path) == sha256_file(path) and len(reads) == 1  # sha256_file always reads
    path.write_bytes(path.read_bytes() + b"\0")  # another size: read again
    assert sha256_seen(path) == real(path.read_bytes()).hexdigest() and len(reads) == 2


# ---- the commands ----------------------------------------------------------------------------------
def test_inspect_shows_it_for_people_and_in_json(quantized):
    r = _invoke("inspect", quantized, "--json")
    assert r.exit_code == EXIT_OK, r.output
    doc = json.loads(r.stdout)
    assert doc["int8_match"]["status"] == MATCHES and doc["warnings"] == []
    assert "the one `edgekit quantize` made" in _invoke("inspect", quantized).stdout

    old, new = _swap_through_api(quantized)
    r = _invoke("inspect", quantized, "--json")
    assert r.exit_code == EXIT_OK, r.output
    doc = json.loads(r.stdout)
    path = Bundle.load(quantized).artifact("int8").path
    assert doc["int8_match"] == {
        "status": DIFFERS,
        "artifact": "int8",
        "file": path,
        "recorded_sha256": old,
        "actual_sha256": new,
    }
    assert len(doc["warnings"]) == 1 and path in doc["warnings"][0]
    assert "warning:" in r.stderr and "restore the file" in r.stderr


def test_check_warns_and_check_strict_fails(quantized, tmp_path):
    thresholds = tmp_path / "t.toml"
    thresholds.write_text(THRESHOLDS)
    args = ["check", quantized, "--n", "2", "--thresholds", thresholds]
    r = _invoke(*args, "--strict", "--json")  # unchanged: nothing to say, strict passes
    assert r.exit_code == EXIT_OK, r.output
    doc = json.loads(r.stdout)
    assert doc["warnings"] == [] and doc["int8_match"]["status"] == MATCHES and doc["passed"]

    _swap_through_api(quantized)
    path = Bundle.load(quantized).artifact("int8").path
    r = _invoke(*args, "--json")
    assert r.exit_code == EXIT_OK, r.output
    doc = json.loads(r.stdout)
    assert doc["passed"] and doc["int8_match"]["status"] == DIFFERS
    assert path in doc["warnings"][0] and "warning:" in r.stderr and path in r.stderr

    r = _invoke(*args, "--strict", "--json", "--junit", tmp_path / "j.xml")
    assert r.exit_code == EXIT_CHECK_FAILED, r.output
    doc = json.loads(r.stdout)
    assert not doc["passed"] and doc["failed"] == ["warnings"]
    row = next(x for x in doc["rows"] if x["metric"] == "warnings")
    assert row["value"] == 1 and row["gated"] and not row["passed"] and path in row["reason"]
    assert '<failure message="warnings:' in (tmp_path / "j.xml").read_text()
    # Variants that do not read the int8 model say nothing of it (check, profile: fp32 only).
    assert int8_warnings(Bundle.load(quantized), ["fp32"]) == (None, [])
    assert int8_warnings(Bundle.load(quantized), ["fp32", "int8"])[1] == doc["warnings"]


def test_check_strict_passes_a_bundle_of_an_older_edgekit(quantized, tmp_path):
    doc = json.loads((quantized / MANIFEST).read_text())
    del doc["quantization"]["int8_files"]
    (quantized / MANIFEST).write_text(json.dumps(doc))
    (tmp_path / "t.toml").write_text(THRESHOLDS)
    r = _invoke("check", quantized, "--n", "2", "--thresholds", tmp_path / "t.toml", "--strict", "--json")
    assert r.exit_code == EXIT_OK, r.output
    assert json.loads(r.stdout)["int8_match"]["status"] == NOT_RECORDED


def test_build_warns_for_int8_and_auto(quantized):
    r = _invoke("build", quantized, "--target", "cpu", "--precision", "int8", "--json")
    assert r.exit_code == EXIT_OK, r.output
    assert json.loads(r.stdout)["warnings"] == []

    _swap_through_api(quantized)
    path = Bundle.load(quantized).artifact("int8").path
    for precision in ("int8", "auto"):
        r = _invoke("build", quantized, "--target", "cpu", "--precision", precision, "--rebuild", "--json")
        assert r.exit_code == EXIT_OK, r.output
        warnings = json.loads(r.stdout)["warnings"]
        assert len(warnings) == 1 and path in warnings[0] and "restore the file" in r.stderr
    r = _invoke("build", quantized, "--target", "cpu", "--precision", "fp32", "--json")  # reads no int8
    assert r.exit_code == EXIT_OK and json.loads(r.stdout)["warnings"] == []


def test_profile_warns(external, tmp_path):
    r = _invoke("profile", external, *PROFILE, "--json")
    assert r.exit_code == EXIT_OK, r.output
    assert not [w for w in json.loads(r.stdout)["warnings"] if "restore the file" in w]

    side = Bundle.load(external).artifact("int8").side_files[0]["path"]
    data = bytearray((external / side).read_bytes())
    data[-1] ^= 0x01  # a weight's last bit: the model still runs
    _copy_over(external, side, bytes(data), side_of="int8")
    r = _invoke("profile", external, *PROFILE, "--json")
    assert r.exit_code == EXIT_OK, r.output
    warnings = json.loads(r.stdout)["warnings"]
    assert side in warnings[0] and "restore the file" in warnings[0]
    assert "restore the file" in _invoke("profile", external, *PROFILE).stderr


def test_a_tampered_file_is_still_an_error_not_a_warning(quantized, tmp_path):
    rel = Bundle.load(quantized).artifact("int8").path
    shutil.copyfile(_another_model(quantized / rel, tmp_path / "o.onnx"), quantized / rel)
    for cmd in (["inspect"], ["check", "--n", "2"]):
        r = _invoke(cmd[0], quantized, *cmd[1:])
        assert r.exit_code == EXIT_ERROR and "does not match its recorded sha256" in r.stderr, r.output
