"""A candidate's held-out decode stops once flow's pooled ``snr_db`` cannot reach the budget
(``edgekit.quantize.early_stop``): the bound, when it stops, what its rows say, and the CLI run
where --method auto's two all-INT8 candidates both stop."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest

from edgekit.evaluate.scores import snr_db
from edgekit.quantize.early_stop import EARLY_MIN_ROWS, Hopeless, SnrWatch, compare_on_common_rows, rows_snr_db


def rows(n: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal((n, 3, 5)).astype(np.float32)


def feed(watch: SnrWatch, outputs: np.ndarray, batch: int) -> int:
    """Batches of ``outputs`` into ``watch`` as decode_rows hands them over; the rows decoded."""
    padded = -(-len(outputs) // batch) * batch
    out = np.concatenate([outputs, np.repeat(outputs[-1:], padded - len(outputs), axis=0)])
    for i in range(padded // batch):
        watch.after_batch(i, out[i * batch : (i + 1) * batch])
    return len(watch.row_power)


def test_a_hopeless_candidate_stops_after_the_fewest_rows_with_its_rows_metrics():
    ref = rows(16)
    noisy = ref + 0.3 * rows(16, seed=1)  # ~10 dB on every row: 30 dB is out of reach after one row
    watch = SnrWatch(ref, 30.0)
    with pytest.raises(Hopeless) as stop:
        feed(watch, noisy, batch=1)
    m = stop.value.metrics
    assert m["rows_judged"] == EARLY_MIN_ROWS == len(watch.row_power) and m["rows"] == 16
    # snr_db over the rows decoded, as budget.compare computes it on them
    assert m["snr_db"] == pytest.approx(snr_db(ref[:EARLY_MIN_ROWS], noisy[:EARLY_MIN_ROWS], floor=1e-30))
    # the bound: all 16 rows' signal over the error so far (no error on the rest)
    noise = float(np.sum((noisy[:EARLY_MIN_ROWS].astype(np.float64) - ref[:EARLY_MIN_ROWS]) ** 2))
    assert m["snr_db_bound"] == pytest.approx(10 * np.log10(float(np.sum(ref.astype(np.float64) ** 2)) / noise))
    assert m["snr_db"] <= m["snr_db_bound"] < 30.0
    assert m["gt_snr_drop_db"] is None and "after 4 of 16 held-out rows" in m["stopped_early"]


def test_a_candidate_that_can_still_make_it_decodes_every_row():
    ref = rows(16)
    # Bad on the first rows, exact after: the bound stays over the limit, and the whole set passes.
    out = ref.copy()
    out[:2] += 0.01 * rows(2, seed=2)
    watch = SnrWatch(ref, 30.0)
    assert feed(watch, out, batch=1) == 16
    assert rows_snr_db(watch.row_power) == pytest.approx(snr_db(ref, out, floor=1e-30))


def test_never_before_min_rows_nor_after_the_last_and_padding_rows_are_dropped():
    ref = rows(5)
    noisy = ref + rows(5, seed=3)  # ~0 dB
    # min_rows past the set: every row decoded, no stop (the last row ends the set anyway)
    watch = SnrWatch(ref, 30.0, min_rows=8)
    assert feed(watch, noisy, batch=2) == 5  # three batches of 2, the last padded: 5 rows kept
    # batch 2: the first check is after 2 rows, the stop after the batch that reaches min_rows
    watch = SnrWatch(ref, 30.0, min_rows=3)
    with pytest.raises(Hopeless):
        feed(watch, noisy, batch=2)
    assert len(watch.row_power) == 4


def test_two_candidates_compare_on_the_rows_both_decoded():
    a = {"rows_judged": 2, "row_power": [[10.0, 1.0], [10.0, 1.0]]}  # 10 dB on 2 rows
    b = {"row_power": [[10.0, 0.1], [10.0, 0.1], [10.0, 10.0]]}  # 20 dB on its first 2
    sa, sb, k = compare_on_common_rows(a, b)
    assert k == 2 and sa == pytest.approx(10.0) and sb == pytest.approx(20.0)
    assert compare_on_common_rows({"row_power": [[1, 1]]}, {"row_power": [[1, 1]]}) is None  # neither stopped


def test_quantize_stops_both_hopeless_all_int8_candidates_and_says_so(demo_bundles, tmp_path):
    """An SNR budget no INT8 model meets (80 dB): --method auto's minmax and percentile all-INT8
    candidates each stop after EARLY_MIN_ROWS of the 8 held-out rows, are compared on those rows,
    and the record says where they stopped; the budget's verdict is the same (missed: exit 4)."""
    from typer.testing import CliRunner

    from edgekit.cli import app

    flow = shutil.copytree(demo_bundles["flow"], tmp_path / "flow")
    args = ["quantize", str(flow), "--calib-samples", "2", "--eval-samples", "8", "--max-fallback", "0"]
    r = CliRunner().invoke(app, [*args, "--budget", "snr_db=80", "--json"], catch_exceptions=False)
    assert r.exit_code == 4, r.output
    doc = json.loads(r.stdout)
    tried = doc["method_choice"]["tried"]
    assert [t["method"] for t in tried] == ["minmax", "percentile"]
    assert [t["rows_judged"] for t in tried] == [EARLY_MIN_ROWS, EARLY_MIN_ROWS]
    assert all(t["snr_db"] < 80 and "under the budget's 80 dB" in t["stopped_early"] for t in tried)
    assert f"on the {EARLY_MIN_ROWS} held-out rows both decoded" in doc["method_choice"]["why"]
    assert "stopped after 4 of 8 held-out rows" in r.stderr
    # A budget the model meets: every row decoded, nothing stopped.
    r = CliRunner().invoke(app, [*args, "--budget", "snr_db=0", "--json"], catch_exceptions=False)
    assert r.exit_code in (0, 4), r.output
    doc = json.loads(r.stdout)
    assert all("rows_judged" not in t for t in doc["method_choice"]["tried"])
    assert "stopped after" not in r.stderr
