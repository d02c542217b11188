"""`profile --compare-ar` with what the README makes (issue #15): the masked bundle exported at
--batch 4, the AR baseline at the default batch 1. The AR rows are decoded in several calls of
its graph batch; a variant that cannot run is a row saying why, the others are still reported."""

from __future__ import annotations

import pytest

from edgekit.profile import ProfileConfig, profile_bundle
from edgekit.profile.table import ar_table, not_measured_lines, summary_rows
from tests.profile.conftest import FAST
from tests.tiny_models import tiny_ar_spec, tiny_masked_spec

pytest.importorskip("torch")


@pytest.fixture(scope="module")
def pair(tmp_path_factory):
    from edgekit.export.to_bundle import export_bundle

    root = tmp_path_factory.mktemp("pair")
    masked = export_bundle(tiny_masked_spec(batch=4), root / "masked", source="tiny-masked").root
    ar = export_bundle(tiny_ar_spec(batch=1), root / "ar", source="tiny-ar").root
    return masked, ar


def test_compare_ar_decodes_the_ar_rows_in_several_calls(pair):
    masked, _ = pair  # the AR bundle is the sibling `ar`, as the README lays them out
    doc = profile_bundle(
        masked, ProfileConfig(compare_ar=True, sweep_lengths=(), measure=FAST, power="off", cond={"class_id": "1"})
    )
    ar = doc["compare_ar"]["variants"][0]
    assert ar["available"] and ar["decode"]["rows"] == 4 == doc["variants"][0]["decode"]["rows"]
    assert ar["decode"]["runtime_calls"] == 4 * 12  # 4 calls of 1 row, 12 tokens each
    assert doc["compare_ar"]["speedups"][0]["speedup"] > 0
    assert any("4 calls of 1 rows" in n for n in doc["compare_ar"]["notes"])


def test_a_variant_that_cannot_run_is_a_row_saying_why(pair):
    """torch cannot rebuild these models (their source is no known model): the torch variants,
    NAR and AR, become 'not measured' lines naming the bundle; the ort ones are reported."""
    masked, ar = pair
    doc = profile_bundle(
        masked,
        ProfileConfig(
            runtimes=("ort", "torch"),
            compare_ar=True,
            sweep_lengths=(),
            measure=FAST,
            power="off",
            cond={"class_id": "1"},
        ),
    )
    status = {v["id"]: v["available"] for v in doc["variants"] + doc["compare_ar"]["variants"]}
    assert status == {"ort fp32": True, "torch fp32": False, "AR ort fp32": True}
    lines = not_measured_lines(doc)
    assert len(lines) == 1 and lines[0].startswith("torch fp32: not measured: ") and str(masked) in lines[0]
    columns, rows = ar_table(doc)
    assert [r[0] for r in rows] == ["ort fp32"]  # no error text inside a table cell
    assert summary_rows(doc)["variants"]["columns"] == ["metric", "ort fp32", "AR ort fp32"]


def token_mean(output, cond):
    """A user's --metric hook for models without ground truth (higher = better)."""
    return {"token_mean": float(output.mean())}


def test_the_frontier_decodes_the_ar_rows_in_several_calls_too(pair):
    """The frontier scores AR on the same rows as the masked model: a batch-1 AR graph decodes
    the masked bundle's 4 rows in 4 calls there too (it stopped with 'graph batch 1 does not fit')."""
    from pathlib import Path

    masked, _ = pair
    hook = f"{Path(__file__).resolve()}:token_mean"
    doc = profile_bundle(
        masked,
        ProfileConfig(
            compare_ar=True,
            sweep_lengths=(),
            measure=FAST,
            power="off",
            cond={"class_id": "1"},
            frontier_steps=(1, 2),
            frontier_n=6,
            metric_hook=hook,
        ),
    )
    f = doc["compare_ar"]["frontier"]
    assert f["available"] and f["rows"] == 4 and f["n"] == 6
    assert sorted({p["model"] for p in f["points"]}) == ["ar", "masked"]
    assert all("token_mean" in p["quality"] for p in f["points"])
