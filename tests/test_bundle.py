import json
import os

import pytest

from edgekit.bundle import MANIFEST, SCHEMA, STAGING_PREFIX, Bundle, sha256_file
from edgekit.errors import BundleError
from edgekit.spec import TensorSpec

IO = {"tokens": TensorSpec((1, 4), "int64", 0, 5)}
OUT = {"logits": TensorSpec((1, 4, 4), "float32")}


def make_bundle(root, payload=b"graph-bytes"):
    b = Bundle.new(root, model={"name": "m", "kind": "masked", "meta": {}}, inputs=IO, outputs=OUT, decode_defaults={})
    staged = b.staging_path("fp32.onnx")
    staged.write_bytes(payload)
    b.add_artifact("fp32", staged, made_by="test", config={"opset": 18}, suffix=".onnx")
    b.save()
    return b


def test_round_trip(tmp_path):
    b = make_bundle(tmp_path / "b")
    loaded = Bundle.load(tmp_path / "b")
    assert loaded.manifest["schema"] == SCHEMA
    assert loaded.inputs == IO and loaded.outputs == OUT
    art = loaded.artifact("fp32")
    assert art.sha256 == sha256_file(loaded.path_of("fp32")) and art.bytes == len(b"graph-bytes")
    assert art.path == f"fp32-{art.sha256[:8]}.onnx"
    assert loaded.manifest["provenance"]["python"]
    assert b.manifest == loaded.manifest


def test_tampered_artifact_is_refused(tmp_path):
    b = make_bundle(tmp_path / "b")
    b.path_of("fp32").write_bytes(b"graph-bytez")  # same size, other content
    with pytest.raises(BundleError, match="does not match its recorded sha256"):
        Bundle.load(tmp_path / "b")


def test_missing_artifact_and_manifest(tmp_path):
    b = make_bundle(tmp_path / "b")
    b.path_of("fp32").unlink()
    with pytest.raises(BundleError, match="missing"):
        Bundle.load(tmp_path / "b")
    with pytest.raises(BundleError, match="does not exist"):
        Bundle.load(tmp_path / "nope")


def test_unknown_schema_and_bad_json(tmp_path):
    make_bundle(tmp_path / "b")
    path = tmp_path / "b" / MANIFEST
    doc = json.loads(path.read_text())
    doc["schema"] = "edgekit.bundle/99"
    path.write_text(json.dumps(doc))
    with pytest.raises(BundleError, match="edgekit.bundle/99"):
        Bundle.load(tmp_path / "b")
    path.write_text("{not json")
    with pytest.raises(BundleError, match="not valid JSON"):
        Bundle.load(tmp_path / "b")


def test_artifact_path_cannot_escape(tmp_path):
    make_bundle(tmp_path / "b")
    (tmp_path / "secret").write_bytes(b"x")
    path = tmp_path / "b" / MANIFEST
    doc = json.loads(path.read_text())
    doc["artifacts"]["fp32"]["path"] = "../secret"
    path.write_text(json.dumps(doc))
    with pytest.raises(BundleError, match="outside the bundle"):
        Bundle.load(tmp_path / "b")


def test_replacing_an_artifact_keeps_old_until_save(tmp_path):
    b = make_bundle(tmp_path / "b", b"one")
    old = b.path_of("fp32")
    staged = b.staging_path("fp32.onnx")
    staged.write_bytes(b"two")
    b.add_artifact("fp32", staged, made_by="test", config={}, suffix=".onnx")
    # Interrupted here: the manifest on disk still names the old, intact file.
    assert Bundle.load(tmp_path / "b").path_of("fp32") == old
    b.save()
    assert not old.exists()
    assert Bundle.load(tmp_path / "b").path_of("fp32").read_bytes() == b"two"


def test_manifest_write_is_atomic(tmp_path, monkeypatch):
    b = make_bundle(tmp_path / "b")
    before = (tmp_path / "b" / MANIFEST).read_text()

    def boom(*a, **k):
        raise OSError("disk full")

    monkeypatch.setattr(os, "replace", boom)
    b.manifest["decode_defaults"] = {"steps": 3}
    with pytest.raises(BundleError, match="disk full"):  # one line, not a traceback
        b.save()
    assert (tmp_path / "b" / MANIFEST).read_text() == before
    assert not list((tmp_path / "b").glob(f"{STAGING_PREFIX}*"))


def test_new_refuses_foreign_directory(tmp_path):
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "notes.txt").write_text("mine")
    with pytest.raises(BundleError, match="non-empty directory"):
        Bundle.new(tmp_path / "d", model={}, inputs=IO, outputs=OUT, decode_defaults={})


def test_reexport_replaces_old_artifacts(tmp_path):
    first = make_bundle(tmp_path / "b", b"one")
    old = first.path_of("fp32")
    second = make_bundle(tmp_path / "b", b"two")
    assert not old.exists() and second.path_of("fp32").read_bytes() == b"two"


def test_missing_artifact_names_next_command(tmp_path):
    b = make_bundle(tmp_path / "b")
    with pytest.raises(BundleError, match="edgekit quantize"):
        b.artifact("int8")


def test_bundle_says_what_it_holds(tmp_path):
    b = Bundle.new(tmp_path / "b", model={"name": "m", "kind": "masked", "source": "demo-masked",
                                          "meta": {"conditioning": {"class_id": {"uncond": 8}}}},
                   inputs={"tokens": TensorSpec((3, 4), "int64", 0, 5), "class_id": TensorSpec((3,), "int64", 0, 8)},
                   outputs=OUT, decode_defaults={"steps": 8})
    assert b.batch == 3 and b.source == "demo-masked" and b.condition_sampler is None
    assert b.conditioning == {"class_id": {"uncond": 8}} and b.decode_defaults == {"steps": 8}
    assert b.engines == {} and b.fused == {} and b.verification == {} and b.quantization is None and b.flow_quality is None
    assert not b.has("fp32") and b.artifact_names == ()
    # What a stage reads is a copy: changing it never changes the manifest behind the stage's back.
    b.decode_defaults["steps"] = 1
    b.conditioning["class_id"]["uncond"] = 0
    assert b.decode_defaults == {"steps": 8} and b.conditioning == {"class_id": {"uncond": 8}}
    b.record_entry("engines", "cpu/int8", {"path": "engines/cpu/x.ort"})
    b.record("quantization", {"profile": "cpu"})
    assert b.engines["cpu/int8"].path == "engines/cpu/x.ort" and b.engines["cpu/int8"].target == "cpu"
    assert b.quantization.profile == "cpu" and b.quantization.as_recorded == {"profile": "cpu"}
