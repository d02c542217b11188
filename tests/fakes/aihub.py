"""A Qualcomm AI Hub without the network: ``unittest.mock.create_autospec`` over the real
``qai_hub`` module, so every call edgekit makes is checked against the installed client's own
signatures (a renamed or missing argument is a TypeError here, as it would be there). The jobs it
hands back are autospecs of the client's job classes; their statuses are the client's real
``JobStatus`` states, moving through a running state to SUCCESS or FAILED; their results are the
client's documented formats (tests/fixtures/aihub/, made by the client's own converters).
The client's exception classes, ``Device``, ``ClientConfig`` and ``JobStatus`` stay real.
"""

from __future__ import annotations

import inspect
import json
import tempfile
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any
from unittest import mock

import numpy as np
import qai_hub
from qai_hub.util.dataset_entries_converters import dataset_entries_to_h5, h5_to_dataset_entries

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "aihub"
State = qai_hub.JobStatus.State
RUNNING = {
    "compile": State.OPTIMIZING_MODEL,
    "link": State.LINKING_MODELS,
    "profile": State.MEASURING_PERFORMANCE,
    "inference": State.RUNNING_INFERENCE,
}
QAIRT = "2.37.1.250807"


def fixture(name: str) -> Any:
    return json.loads((FIXTURES / name).read_text())


def _bound(method: Callable, args: tuple, kwargs: Mapping[str, Any]) -> dict[str, Any]:
    """A call's arguments by name, with the real method's defaults (the autospec has checked them)."""
    bound = inspect.signature(method).bind(None, *args, **kwargs)
    bound.apply_defaults()
    return dict(bound.arguments)


def h5_round_trip(data: Mapping[str, list[np.ndarray]]) -> dict[str, list[np.ndarray]]:
    """``data`` written and read back as the client's dataset h5 (what download_output_data reads)."""
    import h5py

    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "outputs.h5"
        with h5py.File(path, "w") as h5f:
            dataset_entries_to_h5(dict(data), h5f)
        with h5py.File(path, "r") as h5f:
            return h5_to_dataset_entries(h5f)


class FakeHub:
    """``hub.module`` stands for ``qai_hub``; ``hub.client`` for the ``Client`` edgekit makes.

    ``polls``: status reads a job stays running; ``fail``: {job kind or device name: message};
    ``profiles``: {device name: profile fixture file}; ``network(feeds) -> outputs``: the device's
    network for inference jobs (per sample, inputs as the dataset carries them)."""

    def __init__(
        self,
        monkeypatch,
        *,
        polls: int = 1,
        network: Callable[[dict[str, np.ndarray]], dict[str, np.ndarray]] | None = None,
    ):
        self.module = mock.create_autospec(qai_hub)
        for name in ("Error", "UserError", "InternalError", "Device", "JobStatus", "ClientConfig", "ModelMetadataKey"):
            setattr(self.module, name, getattr(qai_hub, name))
        self.module.__version__ = qai_hub.__version__
        self.client = self.module.Client.return_value
        self.devices = [qai_hub.Device(**d) for d in fixture("devices.json")]
        self.jobs: dict[str, Any] = {}
        self.models: dict[str, Any] = {}
        self.uploads: dict[str, bytes] = {}  # job id -> the model bytes it was given
        self.events: list[tuple[str, ...]] = []
        self.fail: dict[str, str] = {}
        self.profiles: dict[str, str] = {}
        self.polls = polls
        self.network = network
        self.client.get_devices.side_effect = self._get_devices
        self.client.submit_compile_job.side_effect = self._compile
        self.client.submit_link_job.side_effect = self._link
        self.client.submit_inference_job.side_effect = self._inference
        self.client.get_job.side_effect = lambda job_id, job_type=None: self.jobs[job_id]
        self.client.get_model.side_effect = lambda model_id: self.models[model_id]
        monkeypatch.setattr("edgekit.runtimes.aihub.client.qai_hub", lambda: self.module)
        monkeypatch.setattr("edgekit.runtimes.aihub.jobs.POLL_SECONDS", 0.0)
        monkeypatch.setenv("QAI_HUB_API_TOKEN", "test-token")

    # ---- what edgekit submitted ------------------------------------------------------------------
    def calls(self, method: str) -> list[dict[str, Any]]:
        """Every call of ``client.<method>`` with its arguments by name (defaults filled in)."""
        real = getattr(qai_hub.Client, method)
        return [_bound(real, c.args, c.kwargs) for c in getattr(self.client, method).call_args_list]

    def submitted(self, kind: str | None = None) -> list[str]:
        return [e[2] for e in self.events if e[0] == "submit" and (kind is None or e[1] == kind)]

    # ---- the service -----------------------------------------------------------------------------
    def _get_devices(self, name: str = "", os: str = "", attributes: Any = None) -> list[qai_hub.Device]:
        return [d for d in self.devices if not name or d.name == name]

    def _model(self, model_id: str, graphs: list[str]) -> Any:
        model = mock.create_autospec(qai_hub.Model, instance=True)
        model.model_id = model_id
        model.metadata = {
            qai_hub.ModelMetadataKey.QAIRT_SDK_VERSION: QAIRT,
            qai_hub.ModelMetadataKey.QNN_CONTEXT_BIN_HEXAGON_VERSION: "v75",
            qai_hub.ModelMetadataKey.QNN_CONTEXT_BIN_SOC_MODEL: "57",
            qai_hub.ModelMetadataKey.QNN_CONTEXT_BIN_GRAPH_NAMES: ",".join(graphs),
        }
        self.models[model_id] = model
        return model

    def _job(self, cls: type, kind: str, device: qai_hub.Device) -> Any:
        job = mock.create_autospec(cls, instance=True)
        job_id = f"j{kind[0]}{len(self.jobs) + 1:03d}"
        job.job_id, job.name, job.device = job_id, f"{kind} job", device
        reads = [0]
        message = self.fail.get(kind) or self.fail.get(device.name)

        def status() -> qai_hub.JobStatus:
            self.events.append(("status", kind, job_id))
            reads[0] += 1
            if reads[0] <= self.polls:
                return qai_hub.JobStatus(RUNNING[kind])
            return qai_hub.JobStatus(State.FAILED, message) if message else qai_hub.JobStatus(State.SUCCESS)

        job.get_status.side_effect = status
        self.jobs[job_id] = job
        self.events.append(("submit", kind, job_id, device.name))
        return job

    def _target(self, job: Any, graphs: list[str]) -> None:
        model = self._model(f"m{job.job_id[1:]}", graphs)
        job.get_target_model.return_value = model

        def download(filename: str) -> str:
            path = (
                filename if filename.endswith(".bin") else filename + ".bin"
            )  # the client adds the model type's extension
            Path(path).write_bytes(b"QNN context binary of " + job.job_id.encode())
            return path

        job.download_target_model.side_effect = download

    def _compile(self, *args: Any, **kwargs: Any) -> Any:
        a = _bound(qai_hub.Client.submit_compile_job, args, kwargs)
        job = self._job(qai_hub.CompileJob, "compile", a["device"])
        src = Path(a["model"])
        self.uploads[job.job_id] = (
            src / "model.onnx" if src.is_dir() else src
        ).read_bytes()  # read now: the upload happens in submit
        self._target(job, [f"graph_{job.job_id}"])
        return job

    def _link(self, *args: Any, **kwargs: Any) -> Any:
        a = _bound(qai_hub.Client.submit_link_job, args, kwargs)
        job = self._job(qai_hub.LinkJob, "link", a["device"])
        self._target(job, [f"graph_{m.model_id}" for m in a["models"]])
        return job

    def _inference(self, *args: Any, **kwargs: Any) -> Any:
        a = _bound(qai_hub.Client.submit_inference_job, args, kwargs)
        kind = "profile" if a["inputs"] is None else "inference"
        job = self._job(qai_hub.InferenceJob, kind, a["device"])
        if kind == "profile":
            job.download_profile.side_effect = lambda filename=None: fixture(
                self.profiles.get(a["device"].name, "profile_npu.json")
            )
        else:
            inputs = a["inputs"]
            samples = len(next(iter(inputs.values())))
            outs = [self.network({k: v[i] for k, v in inputs.items()}) for i in range(samples)]
            # Compiled graphs name their outputs output_0, ... in the graph's order.
            data = h5_round_trip({f"output_{j}": [o[n] for o in outs] for j, n in enumerate(outs[0])})
            job.download_output_data.side_effect = lambda filename=None: data
        return job
