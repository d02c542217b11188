import json
import os

import pytest

from edgekit.bundle import MANIFEST, SCHEMA, STAGING_PREFIX, Bundle, bucket_binding, sha256_file
from edgekit.errors import BundleError
from edgekit.spec import TensorSpec

IO = {"tokens": TensorSpec((1, 4), "int64", 0, 5)}
OUT = {"logits": TensorSpec((1, 4, 4), "float32")}


def make_bundle(root, payload=b"graph-bytes"):
    b = Bundle.new(
        root,
        model={"name": "m", "kind": "masked", "meta": {"vocab_size": 4, "mask_id": 4, "seq_len": 4}},
        inputs=IO,
        outputs=OUT,
        decode_defaults={},
    )
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
    b = Bundle.new(
        tmp_path / "b",
        model={
            "name": "m",
            "kind": "masked",
            "source": "demo-masked",
            "meta": {"conditioning": {"class_id": {"uncond": 8}}},
        },
        inputs={"tokens": TensorSpec((3, 4), "int64", 0, 5), "class_id": TensorSpec((3,), "int64", 0, 8)},
        outputs=OUT,
        decode_defaults={"steps": 8},
    )
    assert b.batch == 3 and b.source == "demo-masked" and b.condition_sampler is None
    assert b.conditioning == {"class_id": {"uncond": 8}} and b.decode_defaults == {"steps": 8}
    assert (
        b.engines == {} and b.fused == {} and b.verification == {} and b.quantization is None and b.flow_quality is None
    )
    assert not b.has("fp32") and b.artifact_names == ()
    # What a stage reads is a copy: changing it never changes the manifest behind the stage's back.
    b.decode_defaults["steps"] = 1
    b.conditioning["class_id"]["uncond"] = 0
    assert b.decode_defaults == {"steps": 8} and b.conditioning == {"class_id": {"uncond": 8}}
    b.record_entry("engines", "cpu/int8", {"path": "engines/cpu/x.ort"})
    b.record("quantization", {"profile": "cpu"})
    assert b.engines["cpu/int8"].path == "engines/cpu/x.ort" and b.engines["cpu/int8"].target == "cpu"
    assert b.quantization.profile == "cpu" and b.quantization.as_recorded == {"profile": "cpu"}


def _with_int8_buckets(root):
    """A bundle with an int8 model of 3 step buckets and what quantize and build record of it."""
    b = make_bundle(root)
    for name, payload in (("int8", b"q0"), ("int8-bucket-1", b"q1"), ("int8-bucket-2", b"q2")):
        staged = b.staging_path(f"{name}.onnx")
        staged.write_bytes(payload)
        b.add_artifact(name, staged, made_by="quantize", config={}, suffix=".onnx")
    graphs = [(a, b.artifact(a).sha256) for a in ("int8", "int8-bucket-1", "int8-bucket-2")]
    b.record(
        "quantization",
        {
            "profile": "cpu",
            "passed": True,
            "config": {"profile": "cpu", "exclude": ["fc2"]},
            "arithmetic": {"isa": "avx2", "validated_on": "avx512-vnni", "scheme": {"name": "u8s8-pair"}},
            "speed": {"measured": True, "isa": "avx2", "runtime": "ort", "int8_speedup": 1.4},
            "fallback": [{"label": "blocks.0.fc2", "node": "/fc2/MatMul"}],
            "budget": {"eval": {"samples": 8, "seed": 3, "decode": {"steps": 6}}},
            "step_buckets": {
                "n": 3,
                "by": "mask share",
                "boundaries": [0.25, 0.75],
                "artifacts": ["int8", "int8-bucket-1", "int8-bucket-2"],
                "binding": bucket_binding("mask share", [0.25, 0.75], graphs),
            },
        },
    )
    b.record_entry(
        "engines",
        "cpu/int8",
        {
            "path": "engines/cpu/int8-a.ort",
            "sha256": "a" * 64,
            "runtime": "ort",
            "precision": "int8",
            "source": "int8",
            "portable": False,
            "device": "x86_64: Test CPU",
            "session_seconds": {"compile": 1.5},
            "external_data": {"path": "engines/cpu/w.data", "sha256": "b" * 64},
            "buckets": {
                "by": "mask share",
                "boundaries": [0.25, 0.75],
                "engines": [
                    {"path": "engines/cpu/int8-b.ort", "metadata": {"path": "engines/cpu/int8-b.plan.json"}},
                    {"path": "engines/cpu/int8-c.ort"},
                ],
            },
        },
    )
    b.record_entry(
        "engines",
        "gpu/fp16",
        {"path": "engines/gpu/fp16.plan", "runtime": "trt", "precision": "fp16", "target": "jetson"},
    )
    return b


def test_the_sections_stages_read_come_back_typed(tmp_path):
    b = _with_int8_buckets(tmp_path / "b")
    q = b.quantization
    assert (q.profile, q.passed, q.config["exclude"], q.fallback) == ("cpu", True, ["fc2"], ("blocks.0.fc2",))
    assert (q.arithmetic.isa, q.arithmetic.validated_on, q.arithmetic.scheme) == ("avx2", "avx512-vnni", "u8s8-pair")
    assert (q.speed.measured, q.speed.isa, q.speed.runtime, q.speed.int8_speedup) == (True, "avx2", "ort", 1.4)
    assert (q.budget_eval.samples, q.budget_eval.seed, q.budget_eval.decode) == (8, 3, {"steps": 6})
    buckets = b.step_buckets()
    assert buckets.graphs == ("int8", "int8-bucket-1", "int8-bucket-2") and buckets.boundaries == (0.25, 0.75)
    assert (
        buckets.n == 3
        and buckets.by == "mask share"
        and buckets.hashes == tuple(b.artifact(a).sha256 for a in buckets.graphs)
    )
    assert buckets.binding == b.manifest["quantization"]["step_buckets"]["binding"]
    assert b.step_buckets("fp32") is None
    cpu = b.engine_for("ort", "int8")
    assert cpu.key == "cpu/int8" and cpu.target == "cpu" and cpu.source == "int8" and not cpu.portable
    assert cpu.compile_seconds == 1.5 and cpu.bucketed and cpu.bucket_boundaries == (0.25, 0.75)
    # Every file the engine is, its bucket engines' and their sidecars' included (what pack copies, build removes).
    assert cpu.files == (
        "engines/cpu/int8-a.ort",
        "engines/cpu/w.data",
        "engines/cpu/int8-b.ort",
        "engines/cpu/int8-b.plan.json",
        "engines/cpu/int8-c.ort",
    )
    assert b.engine_for("trt", "fp16").target == "jetson" and b.engine_for("trt", "int8") is None
    # Typed views are copies too: what a stage does to one never reaches the manifest.
    q.config["exclude"].append("fc3")
    cpu.as_recorded["path"] = "elsewhere"
    assert b.quantization.config["exclude"] == ["fc2"] and b.engines["cpu/int8"].path == "engines/cpu/int8-a.ort"


def test_step_buckets_whose_graph_is_gone_are_one_line(tmp_path):
    b = _with_int8_buckets(tmp_path / "b")
    b.remove_artifact("int8-bucket-2")
    with pytest.raises(
        BundleError, match=r"step buckets name graph 'int8-bucket-2', which is not in the manifest"
    ) as err:
        b.step_buckets()
    assert "--step-buckets 3" in err.value.hint


def test_a_subset_names_only_what_it_keeps(tmp_path):
    b = _with_int8_buckets(tmp_path / "b")
    b.record_entry("fused", "step", {"graph": "step", "artifact": "fused-step", "baked": {"steps": 4}})
    packed = b.subset(["fp32", "int8"], ["gpu/fp16"], packed={"target": "jetson"})
    assert list(packed["artifacts"]) == ["fp32", "int8"] and list(packed["engines"]) == ["gpu/fp16"]
    assert packed["packed"] == {"target": "jetson"} and "fused" in packed
    scratch = b.subset(["fp32"], None, fused=False)
    assert list(scratch["artifacts"]) == ["fp32"] and "engines" not in scratch and "fused" not in scratch
    assert set(b.manifest["artifacts"]) == {
        "fp32",
        "int8",
        "int8-bucket-1",
        "int8-bucket-2",
    }  # the bundle's own is untouched


def test_sections_of_another_shape_read_as_absent(tmp_path):
    """Keys the schema leaves untyped (written by an older or newer edgekit) never break a stage."""
    b = make_bundle(tmp_path / "b")
    b.record(
        "quantization",
        {
            "profile": 3,
            "config": ["x"],
            "arithmetic": "avx2",
            "speed": [],
            "fallback": 7,
            "step_buckets": {"n": "three", "artifacts": ["int8"]},
        },
    )
    b.record_entry("engines", "cpu/fp32", {"path": "engines/cpu/x.ort", "buckets": [], "cpu_isa": "avx2", "qnn": 1})
    b.record_entry("verification", "fp32", {"outputs": {"logits": {"max_abs": "big"}}})
    q, e, v = b.quantization, b.engines["cpu/fp32"], b.verification["fp32"]
    assert (q.profile, q.config, q.arithmetic, q.speed, q.fallback, q.step_buckets) == (None, {}, None, None, (), None)
    assert not e.bucketed and e.cpu_isa is None and e.qnn == {} and e.files == ("engines/cpu/x.ort",)
    assert (
        not v.passed and not v.outputs["logits"].passed and v.outputs["logits"].max_abs != v.outputs["logits"].max_abs
    )  # nan
