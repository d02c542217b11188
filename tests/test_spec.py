"""ModelSpec's conditioning forms (issue #31): the README's short forms (a number, a nested list,
"same", None) and the wrapped ``{"uncond": X}`` become the one form every reader takes; a wrong
one is refused when the factory returns it, naming the valid forms. The AR step's cache forms,
told apart by their IO names, and the loop's cache feeds for each."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from edgekit.errors import EdgekitError
from edgekit.spec import ModelSpec, TensorSpec, ar_cache_feeds, ar_cache_form, kind_io, normalize_uncond

ROW = TensorSpec((2, 3), "float32")


@pytest.mark.parametrize(
    "fill,stored",
    [
        (0, {"uncond": 0}),
        (0.5, {"uncond": 0.5}),
        (np.int64(7), {"uncond": 7}),
        ([0.0, 0.1, 0.2], {"uncond": [0.0, 0.1, 0.2]}),
        ((1, 2, 3), {"uncond": [1, 2, 3]}),
        (np.zeros(3, np.float32), {"uncond": [0.0, 0.0, 0.0]}),
        ("same", {"uncond": "same"}),
        (None, None),
        ({"uncond": 3}, {"uncond": 3}),
        ({"uncond": None}, None),
        ({"uncond": "same"}, {"uncond": "same"}),
        (True, {"uncond": 1}),
    ],
)
def test_every_documented_form_becomes_uncond(fill, stored):
    out = normalize_uncond("m", "c", fill, ROW)
    assert out == stored
    assert json.loads(json.dumps(out)) == out  # plain JSON for the manifest


@pytest.mark.parametrize(
    "fill,needle",
    [
        ("zero", "is 'zero'; valid: a number"),
        ({"unconditional": 0}, "has keys ['unconditional']; valid: {\"uncond\": value}"),
        ([0.0, 1.0], "has shape [2]; valid: a number or a nested list of one row's shape [3]"),
        (float("nan"), "must hold finite numbers"),
        (object(), "valid: a number"),
    ],
)
def test_a_wrong_form_is_refused_naming_the_valid_ones(fill, needle):
    with pytest.raises(EdgekitError) as err:
        normalize_uncond("m", "c", fill, ROW)
    assert needle in str(err.value) and "meta['conditioning']['c']" in str(err.value)


def test_model_spec_stores_the_normalized_form():
    spec = ModelSpec(
        name="m",
        kind="flow",
        module=None,
        inputs={
            "x": TensorSpec((2, 4, 3), "float32"),
            "t": TensorSpec((2,), "float32"),
            "spk": ROW,
            "mask": TensorSpec((2, 4), "bool"),
        },
        outputs={"v": TensorSpec((2, 4, 3), "float32")},
        meta={"channels": 3, "frames": 4, "conditioning": {"spk": 0.0, "mask": "same"}},
    )
    assert spec.meta["conditioning"] == {"spk": {"uncond": 0.0}, "mask": {"uncond": "same"}}


FACTORY = """
import dataclasses
from tests.byo.models import grid_masked

def make(batch=2):
    spec = grid_masked(batch)
    # the README's short forms: a number, a nested list of one row's shape, "same"
    cond = {"class_id": 4, "text": [[0.0] * 8, [0.0] * 8, [0.1] * 8], "style": "same"}
    return dataclasses.replace(spec, meta={**spec.meta, "conditioning": cond})

def bad(batch=2):
    spec = grid_masked(batch)
    cond = {**spec.meta["conditioning"], "class_id": "null"}
    return dataclasses.replace(spec, meta={**spec.meta, "conditioning": cond})
"""


def test_export_accepts_the_readme_forms_and_guidance_runs(tmp_path, monkeypatch):
    """A bare number was silently dropped (uncond None) and `run --guidance 2` failed later."""
    pytest.importorskip("torch")
    from edgekit.cli import app

    monkeypatch.syspath_prepend(str(Path(__file__).resolve().parents[1]))
    (tmp_path / "short.py").write_text(textwrap.dedent(FACTORY))
    runner = CliRunner()
    r = runner.invoke(app, ["export", f"{tmp_path / 'short.py'}:make", "-o", str(tmp_path / "b"), "--json"])
    assert r.exit_code == 0, r.output
    manifest = json.loads((tmp_path / "b" / "edgekit.json").read_text())
    assert manifest["model"]["meta"]["conditioning"]["class_id"] == {"uncond": 4}
    assert manifest["model"]["meta"]["conditioning"]["style"] == {"uncond": "same"}
    from tests.byo.conftest import grid_cond_rows

    np.savez(tmp_path / "cond.npz", **grid_cond_rows(n=2))
    r = runner.invoke(
        app,
        [
            "run",
            str(tmp_path / "b"),
            "--guidance",
            "2",
            "--cond-data",
            str(tmp_path / "cond.npz"),
            "-o",
            str(tmp_path / "out.npz"),
            "--json",
        ],
    )
    assert r.exit_code == 0, r.output
    r = runner.invoke(app, ["export", f"{tmp_path / 'short.py'}:bad", "-o", str(tmp_path / "c"), "--json"])
    assert (
        r.exit_code == 1
        and "meta['conditioning']['class_id'] is 'null'; valid: a number" in json.loads(r.stdout)["error"]
    )
    assert not (tmp_path / "c" / "edgekit.json").exists()


LAYERS_IO = (
    ["token", "pos", "k_cache_0", "v_cache_0", "k_cache_1", "v_cache_1", "attn_mask", "class_id"],
    ["logits", "k_new", "v_new"],
)


def test_the_ar_cache_forms_are_told_apart_by_their_io_names():
    assert ar_cache_form(*LAYERS_IO) == "layers"
    assert ar_cache_form(["token", "pos", "k_cache", "v_cache", "attn_mask"], ["logits", "k_new", "v_new"]) == "loop"
    assert ar_cache_form(["token", "pos", "k_cache", "v_cache"], ["logits", "k_cache_out", "v_cache_out"]) == "graph"
    state_in, state_out = kind_io("ar", *LAYERS_IO)
    assert state_in == ("token", "pos", "k_cache_0", "v_cache_0", "k_cache_1", "v_cache_1", "attn_mask")
    assert state_out == ("logits", "k_new", "v_new")
    assert kind_io("masked", ["tokens"], ["logits"]) == (("tokens",), ("logits",))


def test_the_layers_forms_cache_feeds_are_views_of_the_loops_arrays():
    """The loop feeds each layer's slice of its one stacked array, without a copy (contiguous, so
    ORT and OpenVINO bind it as it is); the stacked forms get the arrays themselves."""
    k = np.arange(2 * 3 * 2 * 5 * 4, dtype=np.float32).reshape(2, 3, 2, 5, 4)  # [n_layer, B, H, Lmax, hd]
    v = -k
    feeds = ar_cache_feeds(LAYERS_IO[0], k, v)
    assert list(feeds) == ["k_cache_0", "v_cache_0", "k_cache_1", "v_cache_1"]
    for name, arr in feeds.items():
        layer, stacked = int(name[-1]), k if name[0] == "k" else v
        assert np.shares_memory(arr, stacked) and arr.flags.c_contiguous and np.array_equal(arr, stacked[layer])
    k[1, :, :, 3] = 7.0  # the loop writes a slot: the next call's view shows it
    assert np.all(feeds["k_cache_1"][:, :, 3] == 7.0)
    stacked_feeds = ar_cache_feeds(["token", "k_cache", "v_cache"], k, v)
    assert stacked_feeds["k_cache"] is k and stacked_feeds["v_cache"] is v
