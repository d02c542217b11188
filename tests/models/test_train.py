import json

import pytest
from typer.testing import CliRunner

from edgekit.cli import app

torch = pytest.importorskip("torch")


@pytest.mark.slow  # trains twice: minutes on a loaded 2-core machine
def test_train_demo_is_reproducible_and_loads(tmp_path):
    from safetensors.torch import load_file

    from edgekit.models import load_spec
    from edgekit.models.demo import ar_demo

    runner = CliRunner()
    paths = []
    for run in ("a", "b"):
        r = runner.invoke(
            app, ["train-demo", "--steps", "3", "--models", "ar-demo", "--out", str(tmp_path / run), "--json"]
        )
        assert r.exit_code == 0, r.output
        doc = json.loads(r.stdout)
        assert doc["models"]["ar-demo"]["seconds"] > 0
        paths.append(tmp_path / run / "ar-demo.safetensors")
    a, b = (load_file(str(p)) for p in paths)
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)  # same seed, same weights
    spec = ar_demo(batch=1, weights=paths[0])
    assert spec.kind == "ar" and load_spec("ar-demo").kind == "ar"


@pytest.mark.slow  # trains one step: over a minute on a loaded 2-core machine
def test_train_demo_never_overwrites_the_shipped_weights_by_default(tmp_path, monkeypatch):
    """Issue #15: the default output is a new folder; the package's weights need --overwrite-shipped."""
    import hashlib

    from edgekit.models.demo import WEIGHTS_DIR

    shipped = WEIGHTS_DIR / "ar-demo.safetensors"
    before = hashlib.sha256(shipped.read_bytes()).hexdigest()
    monkeypatch.chdir(tmp_path)
    runner = CliRunner()
    r = runner.invoke(app, ["train-demo", "--steps", "1", "--models", "ar-demo"])
    assert r.exit_code == 0, r.output
    assert (tmp_path / "edgekit-weights" / "ar-demo.safetensors").is_file()
    assert hashlib.sha256(shipped.read_bytes()).hexdigest() == before
    r = runner.invoke(app, ["train-demo", "--steps", "1", "--models", "ar-demo", "--out", str(WEIGHTS_DIR)])
    assert r.exit_code == 2 and "--overwrite-shipped" in r.stderr
    assert hashlib.sha256(shipped.read_bytes()).hexdigest() == before
