"""A new backend from the files docs/ARCHITECTURE.md names ("A new backend"), and nothing else:
its ``Runtime`` (``runtimes/base.py``), its one ``register_backend`` call (``runtimes/registry.py``:
with ``open_file`` and ``DebugHooks``), its builder entry (``builder/stage.py``) and its lint entry
(``lint/graph.py``). Then `edgekit run`, `edgekit profile`, `edgekit check` and `edgekit debug`
take it through the CLI like a built-in one, and its help lists it."""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from edgekit.builder.stage import BUILDERS, NoBuilder
from edgekit.cli import app
from edgekit.lint.graph import RUNTIME_LINT, NoLint
from edgekit.runtimes.base import BaseRuntime, model_files_of
from edgekit.runtimes.registry import Backend, DebugHooks, Requirement, register_backend, unregister_backend

NAME = "fakenp"
CAPTURE = "graph outputs added to a copy of the ONNX, run by the fake backend"
COND = ["--cond", "class_id=1"]  # the tiny masked model has no demo evaluation set


class NumpyRuntime(BaseRuntime):
    """The bundle's ONNX run by ONNX Runtime, its outputs handed over as numpy arrays the caller
    owns: a backend of its own to edgekit (name, device, settings, timing note, files)."""

    name = NAME

    def __init__(self, path: Path, threads: int = 0):
        import onnxruntime as ort

        options = ort.SessionOptions()
        options.intra_op_num_threads = threads
        self._session = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
        from edgekit.runtimes._specs import ort_session_specs

        super().__init__(*ort_session_specs(self._session, path))
        self.device = "numpy (fake NPU)"
        self.settings = {"wrapped": "onnxruntime", "threads": threads}
        self.timing_note = "a fake backend: ONNX Runtime's latency"
        self.session_info = {"seconds": 0.0, "precompiled": False}
        self.model_files = model_files_of(path)

    def _run_impl(self, feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        names = list(self.outputs)
        return {n: np.array(v) for n, v in zip(names, self._session.run(names, dict(feeds)))}

    def _close_impl(self) -> None:
        self._session = None


@pytest.fixture
def fake_backend(monkeypatch):
    backend = register_backend(
        Backend(
            name=NAME,
            title="fake numpy",
            help="a test's own backend",
            precisions=("fp32",),
            artifacts={"fp32": "fp32"},
            lacks="the fake runs fp32 only",
            open=lambda bundle, precision, threads: NumpyRuntime(bundle.path_of("fp32"), threads),
            requires=Requirement("numpy", "pip install numpy"),
            open_file=lambda path, options: NumpyRuntime(path, options.threads),
            debug=DebugHooks(capture=CAPTURE),
        )
    )
    monkeypatch.setitem(BUILDERS, NAME, NoBuilder("the fake backend runs the bundle's ONNX as it is"))
    monkeypatch.setitem(RUNTIME_LINT, NAME, NoLint("the fake backend runs any graph ONNX Runtime runs"))
    yield backend
    unregister_backend(NAME)


def invoke(*args):
    return CliRunner().invoke(app, [str(a) for a in args], catch_exceptions=False)


def test_run_profile_and_check_take_a_registered_backend(fake_backend, tiny_bundles, tmp_path):
    bundle = tiny_bundles["masked"]

    r = invoke("run", bundle, "--runtime", NAME, *COND, "--seed", 3, "-o", tmp_path / "fake.npz", "--json")
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)
    assert (doc["runtime"], doc["device"], doc["timing_note"]) == (
        NAME,
        "numpy (fake NPU)",
        "a fake backend: ONNX Runtime's latency",
    )
    assert doc["runtime_settings"] == {"wrapped": "onnxruntime", "threads": 0} and doc["session"] == {
        "seconds": 0.0,
        "precompiled": False,
    }
    r = invoke("run", bundle, "--runtime", "ort", *COND, "--seed", 3, "-o", tmp_path / "ort.npz", "--json")
    assert r.exit_code == 0, r.output
    np.testing.assert_array_equal(np.load(tmp_path / "fake.npz")["tokens"], np.load(tmp_path / "ort.npz")["tokens"])

    r = invoke(
        "profile",
        bundle,
        "--runtime",
        f"ort,{NAME}",
        "--precision",
        "fp32",
        *COND,
        "--iters",
        2,
        "--min-seconds",
        0,
        "--warmup",
        1,
        "--power",
        "off",
        "--json",
    )
    assert r.exit_code == 0, r.output
    variants = {v["id"]: v for v in json.loads(r.stdout)["variants"]}
    fake = variants[f"{NAME} fp32"]
    assert fake["device"] == "numpy (fake NPU)" and fake["timing_note"] == "a fake backend: ONNX Runtime's latency"
    assert fake["memory"]["model_bytes"] == variants["ort fp32"]["memory"]["model_bytes"] > 0  # the files it loaded

    r = invoke("check", bundle, "--reference", "ort:fp32", "--candidate", f"{NAME}:fp32", "--n", 2, *COND, "--json")
    assert r.exit_code == 0, r.output
    check = json.loads(r.stdout)
    assert check["passed"] and check["candidate"] == f"{NAME}:fp32" and check["reference"] == "ort:fp32"


def test_debug_taps_a_registered_backend(fake_backend, tiny_bundles, tmp_path):
    """`edgekit debug` opens, taps and replays the fake through its registry entry alone: every
    tensor the reference computes comes out of the fake's tapped copy, the taps change none of its
    outputs, and fp32 against fp32 adds no noise anywhere."""
    rows = tmp_path / "rows.npz"
    np.savez(rows, class_id=np.array([1, 2]))  # the tiny masked model has no demo evaluation set
    r = invoke(
        "debug",
        tiny_bundles["masked"],
        "--reference",
        "ort:fp32",
        "--candidate",
        f"{NAME}:fp32",
        "--cond-data",
        rows,
        "--n",
        2,
        "--json",
    )
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)
    assert doc["candidate"] == f"{NAME}:fp32" and doc["devices"]["candidate"] == "numpy (fake NPU)"
    assert doc["capture"]["candidate"] == CAPTURE and doc["capture"]["tensors"] > 3
    assert doc["capture"]["outputs_changed_by_taps"] < 1e-4  # float rounding of other fusions at most
    assert doc["passed"] and not doc["entry"]["crossed_threshold"]
    assert all(
        float(db) > 100 for step in doc["sqnr"]["per_step"] for db in step
    )  # the same kernels: no added noise ("inf")


def test_the_cli_lists_and_checks_it_like_a_built_in_one(fake_backend, tiny_bundles):
    r = CliRunner().invoke(app, ["run", "--help"], env={"COLUMNS": "400"})
    assert f"{NAME} (a test's own backend)" in r.stdout
    r = invoke("run", tiny_bundles["masked"], "--runtime", NAME, "--precision", "int8", *COND)
    assert r.exit_code == 2 and f"--runtime {NAME} has no int8 (the fake runs fp32 only); valid: fp32" in r.stderr
