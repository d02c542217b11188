import json

import pytest
from typer.testing import CliRunner

from edgekit.cli import app

torch = pytest.importorskip("torch")


def test_train_demo_is_reproducible_and_loads(tmp_path):
    from safetensors.torch import load_file

    from edgekit.models import load_spec
    from edgekit.models.demo import ar_demo

    runner = CliRunner()
    paths = []
    for run in ("a", "b"):
        r = runner.invoke(app, ["train-demo", "--steps", "3", "--models", "ar-demo", "--out", str(tmp_path / run), "--json"])
        assert r.exit_code == 0, r.output
        doc = json.loads(r.stdout)
        assert doc["models"]["ar-demo"]["seconds"] > 0
        paths.append(tmp_path / run / "ar-demo.safetensors")
    a, b = (load_file(str(p)) for p in paths)
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)  # same seed, same weights
    spec = ar_demo(batch=1, weights=paths[0])
    assert spec.kind == "ar" and load_spec("ar-demo").kind == "ar"
