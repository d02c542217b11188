"""`edgekit build --target <snapdragon> --runtime aihub`: a compile job on Qualcomm AI Hub for the
target's device, the context binary downloaded into the bundle as an engine with its job ids,
QAIRT version and device; a step-bucketed int8 model compiled per bucket to DLCs and linked into
one context binary; jobs recorded before waiting and collected with --resume. The client is an
autospec of the real qai_hub module (tests/fakes/aihub.py): no network."""

from __future__ import annotations

import json

import pytest
from build_helpers import add_model, tiny_model
from typer.testing import CliRunner

from edgekit.builder import build_bundle
from edgekit.bundle import Bundle, bucket_binding, sha256_file
from edgekit.cli import app
from edgekit.errors import EdgekitError, TargetUnavailable
from tests.fakes.aihub import QAIRT, FakeHub

TARGET = "snapdragon-8-gen-3"
S24 = "Samsung Galaxy S24 (Family)"


def test_build_compiles_on_ai_hub_and_records_the_context_binary(tiny_bundle, monkeypatch):
    hub = FakeHub(monkeypatch)
    bundle = tiny_bundle()
    lines: list[str] = []
    doc = build_bundle(bundle.root, TARGET, "fp16", runtime="aihub", progress=lines.append)
    assert (doc["key"], doc["status"]) == (f"{TARGET}/fp16@aihub", "built")
    (compile_call,) = hub.calls("submit_compile_job")
    (job_id,) = hub.submitted("compile")
    assert (
        compile_call["device"].name == S24
        and compile_call["options"] == "--target_runtime qnn_context_binary --truncate_64bit_io"
    )
    assert hub.uploads[job_id] == bundle.path_of("fp32").read_bytes()  # the bundle's fp32 model (static shapes already)
    e = doc["engine"]
    assert (e["runtime"], e["format"], e["runtime_version"], e["portable"]) == (
        "aihub",
        "qnn_context_binary",
        QAIRT,
        False,
    )
    assert e["aihub"]["compile_jobs"] == [job_id] and e["aihub"]["link_job"] is None
    assert (e["aihub"]["device"], e["aihub"]["chipset"], e["aihub"]["qairt"]) == (
        S24,
        "qualcomm-snapdragon-8gen3",
        QAIRT,
    )
    assert e["aihub"]["model_id"] == f"m{job_id[1:]}" and e["source"] == "fp32"
    path = bundle.root / e["path"]
    assert (
        path.suffix == ".bin"
        and path.read_bytes() == f"QNN context binary of {job_id}".encode()
        and sha256_file(path) == e["sha256"]
    )
    engines = Bundle.load(bundle.root).engines
    assert (
        f"{TARGET}/fp16@aihub" in engines and f"{TARGET}/fp16" not in engines
    )  # the local qnn build keeps its own key
    book = json.loads((bundle.root / "aihub" / "jobs.json").read_text())["jobs"]
    assert [(j["id"], j["kind"], j["state"]) for j in book] == [(job_id, "compile", "succeeded")]
    assert any(f"job {job_id}" in line and "submitted" in line for line in lines)
    assert any(line.endswith("OPTIMIZING_MODEL") for line in lines) and any(line.endswith("SUCCESS") for line in lines)
    again = build_bundle(bundle.root, TARGET, "fp16", runtime="aihub")
    assert again["status"] == "up-to-date" and hub.client.submit_compile_job.call_count == 1


def test_step_buckets_compile_to_dlcs_and_link_into_one_context_binary(tiny_bundle, monkeypatch):
    hub = FakeHub(monkeypatch)
    bundle = tiny_bundle(int8=tiny_model(), profile="qnn")
    add_model(bundle, "int8-bucket-1", tiny_model(scale=0.5), {"profile": "qnn"})
    names = ["int8", "int8-bucket-1"]
    binding = bucket_binding(
        "mask_share", [0.5], [(n, bundle.artifact(n).sha256) for n in names]
    )  # as quantize records it
    bundle.record(
        "quantization",
        {
            "profile": "qnn",
            "step_buckets": {"n": 2, "by": "mask_share", "boundaries": [0.5], "artifacts": names, "binding": binding},
        },
    )
    bundle.save()
    doc = build_bundle(bundle.root, TARGET, "int8", runtime="aihub")
    compiles = hub.calls("submit_compile_job")
    ids = hub.submitted("compile")
    assert [c["options"] for c in compiles] == ["--target_runtime qnn_dlc --truncate_64bit_io"] * 2
    assert [hub.uploads[i] for i in ids] == [
        bundle.path_of("int8").read_bytes(),
        bundle.path_of("int8-bucket-1").read_bytes(),
    ]
    (link,) = hub.calls("submit_link_job")
    assert [m.model_id for m in link["models"]] == [f"m{i[1:]}" for i in ids] and link["device"].name == S24
    kinds = [(e[0], e[1]) for e in hub.events]
    # Both compiles submitted before either was waited on; the link only once both succeeded.
    assert kinds[:2] == [("submit", "compile")] * 2 and kinds.index(("submit", "link")) > kinds.index(
        ("status", "compile")
    )
    e = doc["engine"]
    (link_id,) = hub.submitted("link")
    assert e["aihub"]["link_job"] == link_id and e["aihub"]["compile_jobs"] == ids
    assert e["aihub"]["graphs"] == [f"graph_m{i[1:]}" for i in ids]
    assert e["buckets"]["boundaries"] == [0.5] and e["buckets"]["engines"] == []  # one file holds every bucket's graph
    assert (bundle.root / e["path"]).read_bytes() == f"QNN context binary of {link_id}".encode()


def test_an_interrupted_build_keeps_its_job_and_resume_collects_it(tiny_bundle, monkeypatch):
    hub = FakeHub(monkeypatch, polls=10**6)
    bundle = tiny_bundle()

    def interrupt(seconds: float) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr("edgekit.runtimes.aihub.jobs.time.sleep", interrupt)
    lines: list[str] = []
    with pytest.raises(KeyboardInterrupt):
        build_bundle(bundle.root, TARGET, "fp16", runtime="aihub", progress=lines.append)
    (job_id,) = hub.submitted("compile")
    assert "keep running on AI Hub" in lines[-1] and "--resume" in lines[-1]
    assert Bundle.load(bundle.root).engines == {} and not list(bundle.root.glob(".staging-*"))
    monkeypatch.undo()
    hub = _same_hub(hub, monkeypatch)
    with pytest.raises(EdgekitError, match=rf"compile job {job_id} .* is still open"):
        build_bundle(bundle.root, TARGET, "fp16", runtime="aihub")
    hub.polls = 0
    doc = build_bundle(bundle.root, TARGET, "fp16", runtime="aihub", resume=True)
    assert doc["engine"]["aihub"]["compile_jobs"] == [job_id] and hub.client.submit_compile_job.call_count == 1


def _same_hub(hub: FakeHub, monkeypatch) -> FakeHub:
    """The same fake service again after monkeypatch.undo() (its jobs live on)."""
    monkeypatch.setattr("edgekit.runtimes.aihub.client.qai_hub", lambda: hub.module)
    monkeypatch.setattr("edgekit.runtimes.aihub.jobs.POLL_SECONDS", 0.0)
    monkeypatch.setenv("QAI_HUB_API_TOKEN", "test-token")
    return hub


def test_a_failed_compile_says_why_in_one_line_and_records_nothing(tiny_bundle, monkeypatch):
    hub = FakeHub(monkeypatch)
    hub.fail["compile"] = "Tensor 'logits' has an unsupported type.\nCompiler log follows"
    bundle = tiny_bundle()
    with pytest.raises(
        EdgekitError,
        match=(
            r"AI Hub compile job \w+ \(Samsung Galaxy S24 \(Family\)\) failed: Tensor 'logits' has an unsupported "
            r"type\. \(see "
        ),
    ):
        build_bundle(bundle.root, TARGET, "fp16", runtime="aihub")
    assert Bundle.load(bundle.root).engines == {}


def test_without_a_configured_client_nothing_is_sent(tiny_bundle, monkeypatch, tmp_path):
    hub = FakeHub(monkeypatch)
    monkeypatch.delenv("QAI_HUB_API_TOKEN")
    monkeypatch.setenv("QAIHUB_CLIENT_INI", str(tmp_path / "absent.ini"))
    bundle = tiny_bundle()
    with pytest.raises(TargetUnavailable, match="no Qualcomm AI Hub client is configured"):
        build_bundle(bundle.root, TARGET, "fp16", runtime="aihub")
    assert hub.client.submit_compile_job.call_count == 0


def test_the_cli_takes_the_runtime_and_refuses_one_the_target_does_not_build(tiny_bundle, monkeypatch):
    FakeHub(monkeypatch)
    bundle = tiny_bundle()
    r = CliRunner().invoke(
        app, ["build", str(bundle.root), "--target", TARGET, "--precision", "fp16", "--runtime", "aihub", "--json"]
    )
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout)["key"] == f"{TARGET}/fp16@aihub"  # one document: the client's prints stayed off stdout
    r = CliRunner().invoke(
        app, ["build", str(bundle.root), "--target", TARGET, "--precision", "fp16", "--runtime", "trt"]
    )
    assert (
        r.exit_code == 2
        and "--runtime trt is not one target snapdragon-8-gen-3 builds for; valid: qnn, aihub" in r.stderr
    )
