"""Shared fixtures: demo bundles exported once per session (batch 2: small and fast)."""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile
from pathlib import Path

import pytest

from tests.external_data import external_bundles, protobuf_limit  # noqa: F401  (a tiny model through a 2 GB model's code paths)
from tests.qnn_graphs import qnn_graphs  # noqa: F401  (the HTP runtime and lint tests' module fixture)
from tests.tiny_models import tiny_bundles, tiny_fallback_bundle, tiny_int8_bundles, tiny_qnn_bundles, tiny_specs  # noqa: F401  (session fixtures shared by export/, run/ and the qnn tests)

os.environ.setdefault("HYPOTHESIS_STORAGE_DIRECTORY", "/tmp/edgekit-hypothesis")
# Which bundles this user exported (so the code their manifests name may run): a session's own
# record, never the user's (edgekit._userhooks.state_dir).
os.environ["EDGEKIT_STATE_DIR"] = tempfile.mkdtemp(prefix="edgekit-test-state-")
atexit.register(shutil.rmtree, os.environ["EDGEKIT_STATE_DIR"], True)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """`slow` tests first (CI runs them with -m "" on two xdist workers): a few of them take minutes
    (a docs page walked end to end), and started last they left one worker running alone for the
    final ten minutes. Longest first is the classic fix for that tail; the order within each group
    is kept."""
    items.sort(key=lambda item: item.get_closest_marker("slow") is None)


@pytest.fixture(scope="session")
def demo_bundles(tmp_path_factory) -> dict[str, Path]:
    """{kind: bundle dir} for the three built-in demo models, exported with batch 2."""
    pytest.importorskip("torch")
    from edgekit.export.to_bundle import export_bundle
    from edgekit.models import load_spec

    root = tmp_path_factory.mktemp("bundles")
    out = {}
    for name in ("masked-demo", "flow-demo", "ar-demo"):
        bundle = export_bundle(load_spec(name, batch=2), root / name, source=name)
        out[bundle.kind] = bundle.root
    return out


@pytest.fixture
def masked(demo_bundles, tmp_path) -> Path:
    """A private copy of the masked demo bundle (stages that add artifacts or engines write to it)."""
    return Path(shutil.copytree(demo_bundles["masked"], tmp_path / "masked"))
