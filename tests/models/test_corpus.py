import numpy as np
import pytest

from edgekit.models.corpus import Corpus, CorpusConfig, default_corpus, demo_conditions, score


@pytest.fixture(scope="module")
def corpus():
    return default_corpus()


def test_true_samples_are_valid_and_deterministic(corpus):
    rng = np.random.default_rng(3)
    classes = rng.integers(0, 8, 64)
    tokens = corpus.sample_tokens(classes, rng)
    assert tokens.shape == (64, 64) and tokens.dtype == np.int64
    m = corpus.token_metrics(tokens, classes)
    assert m["validity"] == 1.0 and m["event_accuracy"] == 1.0
    assert 0.3 < m["nll_per_token"] < 1.5
    again = Corpus(CorpusConfig()).sample_tokens(classes, np.random.default_rng(3))
    # Same process seed, same sampling seed: same corpus in another process or machine.
    assert np.array_equal(corpus.sample_tokens(classes, np.random.default_rng(3)), again)


def test_class_condition_matters(corpus):
    rng = np.random.default_rng(4)
    classes = rng.integers(0, 8, 32)
    tokens = corpus.sample_tokens(classes, rng)
    assert corpus.token_metrics(tokens, (classes + 1) % 8)["validity"] < 0.2


def test_single_slip_voids_sequence_but_not_events(corpus):
    rng = np.random.default_rng(5)
    classes = rng.integers(0, 8, 16)
    tokens = corpus.sample_tokens(classes, rng)
    broken = tokens.copy()
    broken[:, 30] = (broken[:, 30] + 17) % 64  # a foreign unit mid-run
    m = corpus.token_metrics(broken, classes)
    assert m["validity"] < 0.2
    assert 0.8 < m["event_accuracy"] < 1.0
    assert corpus.token_metrics(rng.integers(0, 64, (16, 64)), classes)["event_accuracy"] < 0.5


def test_exact_nll_on_a_hand_built_sequence():
    c = Corpus(CorpusConfig(seq_len=6))
    cls = 0
    u0 = int(np.flatnonzero(c.initial[cls])[0])
    u1 = int(np.flatnonzero(c.transition[cls, u0])[0])
    d0 = int(c.dmin[u0])
    seq = np.array([u0] * d0 + [u1] * (6 - d0))
    # the last run is cut by the sequence end: survival P(D >= len), not P(D = len)
    last = 6 - d0
    lo = int(c.dmin[u1])
    surv = 1.0 if last <= lo else (1 - c.p_short[u1] if last == lo + 1 else 0.0)
    expected = -(
        np.log(c.initial[cls, u0]) + np.log(c.p_short[u0]) + np.log(c.transition[cls, u0, u1]) + np.log(surv or 1e-300)
    )
    got = c.sequence_nll(seq[None], np.array([cls]))[0]
    if surv == 0.0:
        assert np.isinf(got)
    else:
        assert got == pytest.approx(expected)


def test_frames_metrics(corpus):
    rng = np.random.default_rng(6)
    cond = demo_conditions("corpus-frames", 4, seed=0)
    clean = corpus.clean_frames(cond["tokens"])
    assert clean.shape == (4, 128, 80)
    assert score("corpus-frames", clean, cond)["snr_db"] > 200  # exact
    noisy = corpus.noisy_frames(cond["tokens"], rng)
    snr = score("corpus-frames", noisy, cond)["snr_db"]
    assert 20 < snr < 40
    wrong = corpus.clean_frames(np.roll(cond["tokens"], 7, axis=1))
    assert score("corpus-frames", wrong, cond)["snr_db"] < snr - 10


def test_demo_conditions_are_held_out_and_seeded():
    a = demo_conditions("corpus-tokens", 8, seed=1)["class_id"]
    assert np.array_equal(a, demo_conditions("corpus-tokens", 8, seed=1)["class_id"])
    assert a.dtype == np.int64 and a.max() < 8
    with pytest.raises(ValueError, match="unknown ground-truth task"):
        demo_conditions("nope", 1, 0)
