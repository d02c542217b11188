"""QuantizeConfig's sample counts: given, or auto from how many tokens a row's decode decides."""

from __future__ import annotations

import pytest

from edgekit.quantize.config import QuantizeConfig, auto_samples


@pytest.mark.parametrize(
    ("kind", "tokens", "batch", "counts"),
    [
        ("masked", 64, 8, (8, 16)),  # the demos: unchanged (16 rows of 64 tokens: 1,024 decisions)
        ("masked", 16, 2, (8, 16)),  # short rows: capped at 8 and 16
        ("masked", 256, 1, (4, 4)),  # aMUSEd-256: 4 rows hold 1,024 decisions
        ("ar", 1024, 1, (4, 4)),  # never under 4 rows
        ("ar", 128, 1, (4, 8)),
        ("ar", 256, 3, (6, 6)),  # whole graph batches: a batch's rows cost one decode either way
        ("flow", None, 2, (8, 16)),  # an SNR over frames: no decisions to count
    ],
)
def test_auto_samples_hold_enough_token_decisions_and_no_more(kind, tokens, batch, counts):
    assert auto_samples(kind, tokens, batch) == counts


def test_given_counts_are_kept_and_only_the_missing_one_is_auto():
    given = QuantizeConfig(calib_samples=2, eval_samples=3)
    assert given.with_samples("masked", 256, 1) == (given, None)
    cfg, said = QuantizeConfig(calib_samples=2).with_samples("masked", 256, 1)
    assert cfg.samples == (2, 4)
    assert said is not None and "256 token decisions a row" in said and "--eval-samples" in said
    with pytest.raises(ValueError, match="with_samples"):
        QuantizeConfig().samples  # noqa: B018 - the property raises until resolved


@pytest.mark.parametrize("bad", [0, -1, True, 1.5])
def test_a_bad_count_is_refused_but_none_is_auto(bad):
    QuantizeConfig(calib_samples=None, eval_samples=None)
    with pytest.raises(Exception, match="--eval-samples"):
        QuantizeConfig(eval_samples=bad)
