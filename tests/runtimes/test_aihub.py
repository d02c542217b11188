"""The AI Hub backend's own pieces, with no network: whether a client is configured (its config
file or the token variable), the client's result formats read into figures, the inference
dataset and its outputs, and the job book that never loses a job."""

from __future__ import annotations

import json

import numpy as np
import pytest

from edgekit.errors import EdgekitError, TargetUnavailable, UsageError
from edgekit.runtimes import open_runtime
from edgekit.runtimes.aihub import client as hub_client
from edgekit.runtimes.aihub.jobs import FAILED, OPEN, SUCCEEDED, JobBook
from edgekit.runtimes.registry import backend
from tests.fakes.aihub import FakeHub, fixture

INI = "[api]\napi_token = abc\napi_url = https://workbench.aihub.qualcomm.com\nweb_url = https://workbench.aihub.qualcomm.com\n"


# ---- configuration --------------------------------------------------------------------------------
def test_configured_by_the_token_variable_or_the_clients_own_file(tmp_path):
    ini = tmp_path / "client.ini"
    assert (
        hub_client.configuration({"QAI_HUB_API_TOKEN": "t", "QAIHUB_CLIENT_INI": str(ini)}).source
        == "$QAI_HUB_API_TOKEN"
    )
    missing = hub_client.configuration({"QAIHUB_CLIENT_INI": str(ini)})
    assert not missing.configured and missing.problem == f"no {ini} and no $QAI_HUB_API_TOKEN"
    ini.write_text("[api]\napi_token = abc\n")  # what the client would refuse: no api_url, web_url
    partial = hub_client.configuration({"QAIHUB_CLIENT_INI": str(ini)})
    assert not partial.configured and partial.problem == f"{ini} has no [api] api_url, web_url"
    ini.write_text(INI)
    full = hub_client.configuration({"QAIHUB_CLIENT_INI": str(ini)})
    assert full.configured and full.source == str(ini) and full.problem is None


def test_the_default_file_is_the_clients(tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.delenv("QAIHUB_CLIENT_INI", raising=False)
    monkeypatch.delenv("QAI_HUB_API_TOKEN", raising=False)
    assert hub_client.configuration().config_file == str(tmp_path / ".qai_hub" / "client.ini")
    (tmp_path / ".qai_hub").mkdir()
    (tmp_path / ".qai_hub" / "client.ini").write_text(INI)
    assert hub_client.configuration().configured


def test_no_client_configured_is_exit_3_with_the_line_that_configures_one(tmp_path, monkeypatch):
    monkeypatch.setenv("QAIHUB_CLIENT_INI", str(tmp_path / "none.ini"))
    monkeypatch.delenv("QAI_HUB_API_TOKEN", raising=False)
    with pytest.raises(TargetUnavailable) as err:
        hub_client.connect()
    assert (
        err.value.exit_code == 3
        and "qai-hub configure --api_token" in str(err.value)
        and "QAI_HUB_API_TOKEN" in str(err.value)
    )


def test_a_token_in_the_environment_makes_the_clients_config(monkeypatch):
    hub = FakeHub(monkeypatch)
    assert hub_client.connect() is hub.client
    config = hub.module.Client.call_args.kwargs["config"]
    assert config.api_token == "test-token"
    hub.client.set_verbose.assert_called_once_with(
        False
    )  # edgekit prints progress; the client's bars would corrupt --json


def test_the_runtime_is_not_opened_in_this_process(tiny_bundles):
    from edgekit.bundle import Bundle

    with pytest.raises(UsageError, match="runs on Qualcomm AI Hub's hosted devices as jobs") as err:
        open_runtime(Bundle.load(tiny_bundles["masked"]), "aihub", "fp16")
    assert "--runtime aihub --devices" in str(err.value)
    assert backend("aihub").requires.install == "pip install 'edgekit[aihub]'"


# ---- devices ----------------------------------------------------------------------------------------
def test_devices_by_exact_name_and_the_closest_names_for_a_typo(monkeypatch):
    FakeHub(monkeypatch)
    client = hub_client.connect()
    device = hub_client.find_device(client, "Samsung Galaxy S24 (Family)")
    assert hub_client.chipset_of(device) == "qualcomm-snapdragon-8gen3"
    with pytest.raises(
        UsageError, match=r"AI Hub has no device named 'Galaxy S24'; closest: Samsung Galaxy S24 \(Family\)"
    ):
        hub_client.find_device(client, "Galaxy S24")


# ---- the client's result formats ------------------------------------------------------------------------
def test_profile_figures_from_the_clients_profile_dict():
    f = hub_client.profile_figures(fixture("profile_npu.json"))
    assert f["per_call_ms"] == pytest.approx(0.805)  # estimated_inference_time is in microseconds
    assert f["per_call"]["n"] == 6 and f["per_call"]["median_ms"] == pytest.approx(0.803)
    assert f["peak_memory_bytes"] == [4_194_304, 12_582_912] and f["first_load_ms"] == pytest.approx(181.0)
    assert f["ops"] == {"total": 4, "NPU": 4, "GPU": 0, "CPU": 0} and f["npu_share"] == 1.0 and f["off_npu"] == []
    fb = hub_client.profile_figures(fixture("profile_cpu_fallback.json"))
    assert fb["npu_share"] == 0.5 and fb["ops"]["CPU"] == 2
    assert [op["name"] for op in fb["off_npu"]] == ["head", "softmax"]


def test_inference_dataset_and_outputs():
    feeds = [{"tokens": np.full((2, 4), i, np.int64), "t": np.full((2,), i, np.float32)} for i in range(3)]
    data = hub_client.device_feeds(feeds, ["tokens", "t"])
    assert list(data) == ["tokens", "t"] and len(data["tokens"]) == 3
    assert (
        data["tokens"][2].dtype == np.int32 and data["tokens"][2][0, 0] == 2
    )  # --truncate_64bit_io: int64 IO is int32 there
    assert data["t"][1].dtype == np.float32
    outs = {"output_0": [np.full((2, 4), i, np.float16) for i in range(3)]}
    per_call = hub_client.device_outputs(outs, ["logits"], 3)  # the compiled graph's names: by order
    assert per_call[1]["logits"].dtype == np.float32 and per_call[1]["logits"][0, 0] == 1
    assert hub_client.device_outputs({"logits": outs["output_0"]}, ["logits"], 3)[2]["logits"][0, 0] == 2
    with pytest.raises(EdgekitError, match="samples per output for 4 inputs"):
        hub_client.device_outputs(outs, ["logits"], 4)


# ---- the job book ------------------------------------------------------------------------------------
def _submit(book: JobBook, hub: FakeHub, device: str = "Samsung Galaxy S24 (Family)"):
    return book.submit(
        "profile",
        device,
        {"kind": "profile", "device": device, "model": "m1"},
        lambda: hub.client.submit_inference_job("model.bin", device=hub.module.Device(device), profile=True),
    )


def test_a_job_is_in_the_book_before_anything_waits_and_ctrl_c_leaves_it_running(monkeypatch, tmp_path):
    hub = FakeHub(monkeypatch, polls=100)
    lines: list[str] = []
    book = JobBook(tmp_path, "profile", hub_client.connect(), say=lines.append)
    h = _submit(book, hub)
    doc = json.loads((tmp_path / "aihub" / "jobs.json").read_text())
    assert [(j["id"], j["state"], j["command"]) for j in doc["jobs"]] == [(h.id, OPEN, "profile")]
    assert hub.events[-1][0] == "submit"  # recorded before any status was read
    h.job.get_status.side_effect = KeyboardInterrupt
    with pytest.raises(KeyboardInterrupt):
        book.wait([h])
    assert f"AI Hub jobs {h.id} keep running on AI Hub" in lines[-1] and "--resume" in lines[-1]
    assert json.loads(book.path.read_text())["jobs"][0]["state"] == OPEN


def test_an_open_job_is_never_submitted_again_and_resume_collects_it(monkeypatch, tmp_path):
    hub = FakeHub(monkeypatch)
    client = hub_client.connect()
    first = _submit(JobBook(tmp_path, "profile", client), hub)
    with pytest.raises(
        EdgekitError, match=rf"job {first.id} .* is still open .*: edgekit does not submit it again"
    ) as err:
        _submit(JobBook(tmp_path, "profile", client), hub)
    assert "--resume" in str(err.value)
    assert hub.client.submit_inference_job.call_count == 1
    book = JobBook(tmp_path, "profile", client, resume=True)
    again = _submit(book, hub)
    assert again.reused and again.id == first.id and hub.client.submit_inference_job.call_count == 1
    book.wait([again])
    assert again.record["state"] == SUCCEEDED and json.loads(book.path.read_text())["jobs"][0]["state"] == SUCCEEDED
    # Finished: a plain run asks for a new job (the user's explicit new request), --resume reuses the old.
    assert _submit(JobBook(tmp_path, "profile", client), hub).id != first.id


def test_a_failed_job_says_its_own_message_in_one_line_and_is_not_resubmitted(monkeypatch, tmp_path):
    hub = FakeHub(monkeypatch)
    hub.fail["profile"] = "Failed to profile the model.\n\n[ERROR] QnnContext_createFromBinary: 1002\n    at line 7"
    lines: list[str] = []
    client = hub_client.connect()
    book = JobBook(tmp_path, "profile", client, say=lines.append)
    h = _submit(book, hub)
    book.wait([h])
    assert h.record["state"] == FAILED and h.failed == "Failed to profile the model."
    assert lines[-1].endswith(f"job {h.id} (Samsung Galaxy S24 (Family)): failed: Failed to profile the model.")
    with pytest.raises(
        EdgekitError,
        match=(
            rf"AI Hub profile job {h.id} \(Samsung Galaxy S24 \(Family\)\) failed: Failed to profile the model\. "
            r"\(see "
        ),
    ):
        book.require_success([h])
    resumed = JobBook(tmp_path, "profile", client, resume=True)
    assert _submit(resumed, hub).failed and hub.client.submit_inference_job.call_count == 1


def test_a_client_error_is_one_line(monkeypatch, tmp_path):
    hub = FakeHub(monkeypatch)
    hub.client.submit_inference_job.side_effect = hub.module.UserError("Samsung Galaxy S99 is not available.\nmore")
    with pytest.raises(EdgekitError) as err:
        _submit(JobBook(tmp_path, "profile", hub_client.connect()), hub, device="Samsung Galaxy S99")
    assert str(err.value).startswith(
        "AI Hub: submitting the profile job (Samsung Galaxy S99): Samsung Galaxy S99 is not available. ("
    )
    assert not (tmp_path / "aihub" / "jobs.json").exists()  # nothing was submitted, nothing recorded
