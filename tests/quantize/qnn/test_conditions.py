"""``quantize --profile qnn`` decodes the conditions it is given, as the other profiles do (issue
#25.2, #31.1): with ``--cond-data`` the HTP backend sees exactly the held-out rows of the file,
the summary has the same keys as the cpu profile's, and its warnings reach ``--json``."""

from __future__ import annotations

import json

import numpy as np
import pytest

from edgekit.bundle import Bundle
from tests.tiny_models import tiny_flow_spec

pytest.importorskip("onnxruntime_qnn")


@pytest.fixture(scope="module")
def tiny_flow_b1(tmp_path_factory):
    pytest.importorskip("torch")
    from edgekit.export.to_bundle import export_bundle

    spec = tiny_flow_spec(batch=1)
    return export_bundle(spec, tmp_path_factory.mktemp("qnncond") / "flow", source=spec.name).root


def test_cond_data_rows_are_the_ones_the_htp_decodes(tiny_flow_b1, tmp_path, monkeypatch):
    import shutil

    from typer.testing import CliRunner

    from edgekit.cli import app
    from edgekit.runtimes.qnn import QnnRuntime

    root = tmp_path / "flow"
    shutil.copytree(tiny_flow_b1, root)
    rng = np.random.default_rng(5)
    rows = rng.integers(0, 8, (6, 4)).astype(np.int64)  # 6 real token rows: 2 calibrate, then 2 held out
    np.savez(tmp_path / "cond.npz", tokens=rows)
    seen: list[np.ndarray] = []
    real_run = QnnRuntime.run
    monkeypatch.setattr(
        QnnRuntime, "run", lambda self, feeds: (seen.append(np.array(feeds["tokens"])), real_run(self, feeds))[1]
    )
    r = CliRunner().invoke(
        app,
        [
            "quantize",
            str(root),
            "--profile",
            "qnn",
            "--calib-samples",
            "2",
            "--eval-samples",
            "2",
            "--cond-data",
            str(tmp_path / "cond.npz"),
            "--budget",
            "snr_db=0",
            "--budget",
            "check_margin=-100",
            "--no-fallback",
            "--json",
        ],
    )
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)
    held = doc["conditions"]["heldout_rows"]
    want = rows[held[0] : held[1]]
    assert doc["conditions"]["source"].startswith("--cond-data")
    decoded = {tuple(s.reshape(-1)) for s in seen}
    assert decoded and decoded <= {tuple(r) for r in want} | {
        (8, 8, 8, 8)
    }  # the file's held-out rows (and CFG's null row)
    assert {tuple(r) for r in want} <= decoded
    stored = np.load(Bundle.load(root).path_of("conditions"))["tokens"]
    np.testing.assert_array_equal(stored, want)  # check decodes these by default
    # the same summary keys as the cpu profile writes
    assert {"conditions", "preprocess", "warnings", "speed", "sizes", "selection", "budget"} <= set(doc)
    assert doc["speed"]["measured"] is False and "emulated" in doc["speed"]["reason"]
