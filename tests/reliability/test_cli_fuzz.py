"""The CLI under attack (issue #19's "done means"): option values drawn from what broke it —
huge, negative, NaN/Inf, wrong types, control characters — for the commands that read a bundle.
Every case ends under a time limit with exit 0/1/2/4, no traceback, at most one `error:` line,
and the bundle still loads with every hash."""

import json
import math
import shutil
import signal
from contextlib import contextmanager

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from edgekit.bundle import Bundle
from edgekit.cli import app

runner = CliRunner()
LIMIT_S = 60  # any case slower than this is a hang (a good tiny decode takes well under a second)
FUZZ = settings(
    max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture], database=None
)

ints = st.sampled_from(["0", "-1", "1", "2", "3", "1000000000", "99999999999999999999", "1e9", "nan", "abc", ""])
floats = st.sampled_from(["0", "-1", "1.5", "nan", "-nan", "inf", "-inf", "1e308", "1e-320", "abc", ""])
conds = st.sampled_from(["1", "-1", "1000", "nan", "inf", "1.5", "x", "", "/nonexistent.npy", "\x1b[31m"])


@contextmanager
def time_limit(seconds: int):
    def hang(signum, frame):
        raise TimeoutError(f"case ran past {seconds} s: a hang")

    previous = signal.signal(signal.SIGALRM, hang)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


def check(r, bundle):
    assert r.exit_code in (0, 1, 2, 4), (r.exit_code, r.output)
    assert "Traceback" not in r.output, r.output
    assert sum(line.startswith("error:") for line in r.stderr.splitlines()) <= 1, r.stderr
    assert "\x1b[31m" not in r.stderr
    Bundle.load(bundle)


@pytest.fixture(scope="module")
def bundle(tiny_bundles, tmp_path_factory):
    return shutil.copytree(tiny_bundles["masked"], tmp_path_factory.mktemp("fuzz") / "masked")


@FUZZ
@given(steps=ints, temperature=floats, choice=floats, batch=ints, seed=ints, threads=ints, cond=conds)
def test_run_options(bundle, steps, temperature, choice, batch, seed, threads, cond):
    args = [
        "run",
        str(bundle),
        "--steps",
        steps,
        "--temperature",
        temperature,
        "--choice-temperature",
        choice,
        "--batch",
        batch,
        "--seed",
        seed,
        "--threads",
        threads,
        "--cond",
        f"class_id={cond}",
    ]
    with time_limit(LIMIT_S):
        r = runner.invoke(app, args)
    check(r, bundle)
    if r.exit_code == 0:  # only sane values got through
        assert 1 <= int(steps) <= 10_000 and int(seed) >= 0 and math.isfinite(float(temperature))


@FUZZ
@given(
    decode=st.lists(
        st.tuples(st.sampled_from(["steps", "temperature", "guidance", "schedule", "bogus"]), floats | ints), max_size=3
    ),
    budget=st.lists(st.tuples(st.sampled_from(["token_agreement", "snr_db", "bogus"]), floats), max_size=2),
    threads=ints,
    samples=ints,
)
def test_quantize_options_fail_fast(bundle, decode, budget, threads, samples):
    """Only bad values here (good ones would quantize for real): each is refused before any work."""
    args = ["quantize", str(bundle), "--calib-samples", samples, "--threads", threads]
    args += [a for k, v in decode for a in ("--decode", f"{k}={v}")]
    args += [a for k, v in budget for a in ("--budget", f"{k}={v}")]
    bad = any(v in ("nan", "-nan", "inf", "-inf", "abc", "", "1e308") for _, v in budget) or any(
        k == "bogus" for k, _ in decode
    )
    if not bad:
        return
    with time_limit(LIMIT_S):
        r = runner.invoke(app, args)
    check(r, bundle)
    assert r.exit_code in (1, 2)
    assert "prepare graph" not in r.stderr  # refused before the work starts
    assert "int8" not in Bundle.load(bundle).manifest["artifacts"]


@FUZZ
@given(
    target=st.sampled_from(["cpu", "nope", "../x", "", "android-arm64"]),
    precision=st.sampled_from(["fp32", "int8", "fp16", "x"]),
)
def test_build_options(bundle, target, precision):
    with time_limit(LIMIT_S):
        r = runner.invoke(app, ["build", str(bundle), "--target", target, "--precision", precision])
    check(r, bundle)
    assert not (bundle.parent / "x").exists()


@pytest.mark.parametrize("args", [["run", "{b}", "--batch", "0"], ["quantize", "{b}", "--calib-samples", "0"]])
def test_typer_usage_errors_exit_2_without_traceback(bundle, args):
    """Issue #19 item 9: a usage error is one line on stderr, exit 2, never a traceback or a box;
    with --json, stdout is exactly one JSON document naming the error."""
    argv = [a.format(b=bundle) for a in args]
    r = runner.invoke(app, argv)
    assert r.exit_code == 2 and "Traceback" not in r.output
    assert r.stderr.strip().count("\n") == 0 and "╭" not in r.stderr, r.stderr
    j = runner.invoke(app, [*argv, "--json"])
    assert j.exit_code == 2
    doc = json.loads(j.stdout)
    assert doc["exit_code"] == 2 and doc["error"]
