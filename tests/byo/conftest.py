"""Bring-your-own models exported once per session through the CLI (tests/byo/models.py)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from edgekit.cli import app

MODELS = Path(__file__).resolve().parent / "models.py"
EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "custom_model.py"
runner = CliRunner()


def invoke(*args):
    return runner.invoke(app, [str(a) for a in args], catch_exceptions=False)


def invoke_json(*args, code: int = 0) -> dict:
    r = invoke(*args, "--json")
    assert r.exit_code == code, r.output
    return json.loads(r.stdout)


def flow_cond_rows(n: int = 12, seed: int = 0) -> dict[str, np.ndarray]:
    """Real-looking conditions for ``masked_flow``: an encoder output and binary frame masks
    (each row's first 3..8 frames valid), not uniform draws."""
    rng = np.random.default_rng(seed)
    lengths = rng.integers(3, 9, n)
    return {
        "enc": rng.standard_normal((n, 6, 8)).astype(np.float32),
        "frame_mask": np.arange(8)[None, :] < lengths[:, None],
    }


def grid_cond_rows(n: int = 10, seed: int = 1) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {
        "class_id": rng.integers(0, 4, n),
        "text": rng.standard_normal((n, 3, 8)).astype(np.float32),
        "style": rng.integers(0, 5, (n, 2)).astype(np.int32),
    }


@pytest.fixture(scope="session")
def byo_bundles(tmp_path_factory) -> dict[str, Path]:
    """{factory name: fp32 bundle dir} for the three test models and the README's example."""
    pytest.importorskip("torch")
    root = tmp_path_factory.mktemp("byo")
    out = {}
    for name, ref in (
        ("grid_masked", f"{MODELS}:grid_masked"),
        ("masked_flow", f"{MODELS}:masked_flow"),
        ("grn_masked", f"{MODELS}:grn_masked"),
        ("example", f"{EXAMPLE}:make_model"),
    ):
        r = invoke("export", ref, "-o", root / name, "--batch", "2")
        assert r.exit_code == 0, r.output
        out[name] = root / name
    return out
