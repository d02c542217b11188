"""Every count and time option has one bound (``limits.BOUNDS``), the same in every command that
has it, checked before any work (issue #45, point 3): ``debug --n 10**9``, ``--rows 10**9``,
``profile --iters 10**9``, ``--min-seconds inf`` and negative seeds were unbounded runs or
tracebacks. Each is one line, exit 2; the stage configs hold code that builds them to the same."""

from __future__ import annotations

import shutil

import pytest
from typer.testing import CliRunner

from edgekit.check import CheckConfig
from edgekit.cli import app
from edgekit.debug import DebugConfig
from edgekit.errors import UsageError
from edgekit.limits import BOUNDS, check_option
from edgekit.probes.latency import MeasureConfig
from edgekit.profile import ProfileConfig
from edgekit.quantize import QuantizeConfig
from edgekit.run import RunRequest
from edgekit.stream import LoadConfig

runner = CliRunner()
BIG = "1000000000"


@pytest.fixture(scope="module")
def masked(tiny_bundles, tmp_path_factory):
    return shutil.copytree(tiny_bundles["masked"], tmp_path_factory.mktemp("bounds") / "masked")


# (command, option, bad values): every count and time option of check, debug, profile, quantize,
# loadtest and run.
CASES = [
    ("check", "--n", [BIG, "0"]),
    ("check", "--seed", ["-1", "4294967296"]),
    ("check", "--threads", ["100000", "-1"]),
    ("debug", "--n", [BIG]),
    ("debug", "--rows", [BIG, "0"]),
    ("debug", "--seed", ["-1"]),
    ("debug", "--threads", ["100000"]),
    ("debug", "--threshold", ["inf", "nan", "-inf"]),
    ("profile", "--iters", [BIG, "0"]),
    ("profile", "--min-seconds", ["inf", "nan", "-1", "1e9"]),
    ("profile", "--warmup", [BIG, "-1"]),
    ("profile", "--batch", [BIG]),
    ("profile", "--frontier-n", [BIG]),
    ("profile", "--latency-budget-ms", ["inf", "nan", "0"]),
    ("profile", "--seed", ["-1"]),
    ("profile", "--threads", ["100000"]),
    ("quantize", "--calib-samples", [BIG, "0"]),
    ("quantize", "--eval-samples", [BIG]),
    ("quantize", "--seed", ["-1"]),
    ("quantize", "--threads", ["100000"]),
    ("run", "--batch", [BIG]),
    ("run", "--seed", ["-1"]),
    ("run", "--threads", ["100000"]),
    ("run", "--latency-budget-ms", ["nan"]),
]
LOADTEST = [
    ("--streams", [BIG, "0"]),
    ("--deadline-ms", ["inf", "nan", "0", "-5"]),
    ("--duration-s", ["inf", "nan", "0"]),
    ("--steps", [BIG]),
    ("--seed", ["-1"]),
    ("--threads", ["100000"]),
]


def _refused_at_parse(r, flag):
    assert r.exit_code == 2, r.output
    assert "Traceback" not in r.output and r.stderr.count("\n") == 1, r.stderr
    assert f"{flag} " in r.stderr and "out of bounds" in r.stderr and "valid:" in r.stderr, r.stderr


@pytest.mark.parametrize("command,flag,value", [(c, f, v) for c, f, vs in CASES for v in vs])
def test_each_count_and_time_option_is_bounded_before_any_work(masked, command, flag, value):
    extra = ["--cond", "class_id=1"] if command in ("run", "profile") else []
    r = runner.invoke(app, [command, str(masked), flag, value, *extra])
    _refused_at_parse(r, flag)
    assert not any(p.name.startswith("int8") for p in masked.iterdir())  # quantize wrote nothing


@pytest.mark.parametrize("flag,value", [(f, v) for f, vs in LOADTEST for v in vs])
def test_loadtest_options_are_bounded_the_same_way(tiny_bundles, flag, value):
    r = runner.invoke(app, ["loadtest", str(tiny_bundles["masked"]), str(tiny_bundles["flow"]), flag, value])
    _refused_at_parse(r, flag)


def test_the_same_option_has_the_same_bound_in_every_command(masked):
    """--n, --seed and --threads: one message, one range, whichever command parses them."""
    messages = {}
    for command in ("check", "debug", "profile", "quantize", "run"):
        r = runner.invoke(app, [command, str(masked), "--seed", "-1"])
        messages[command] = r.stderr.split("(see")[0]
    assert len(set(messages.values())) == 1, messages
    assert "an integer from 0 to 4294967295" in messages["check"]


def test_the_bounds_are_in_range_at_their_edges():
    for name, b in BOUNDS.items():
        assert check_option("--x", int(b.high) if b.integer else b.high, name) == b.high
        if not b.above_low:
            assert check_option("--x", int(b.low) if b.integer else b.low, name) == b.low
        for bad in (b.high + 1, float("inf"), float("nan"), "7", True):
            with pytest.raises(UsageError, match="is out of bounds; valid: "):
                check_option("--x", bad, name)


def test_the_steps_bound_is_the_decode_loops_own():
    from edgekit.decode.dispatch import MAX_STEPS
    from edgekit.limits import MAX_STEPS as LIMITS_MAX_STEPS

    assert LIMITS_MAX_STEPS == MAX_STEPS


@pytest.mark.parametrize(
    "make,kw",
    [
        (CheckConfig, {"seed": -1}),
        (CheckConfig, {"n": 10**9}),
        (DebugConfig, {"rows": 10**9}),
        (DebugConfig, {"threshold_db": float("nan")}),
        (MeasureConfig, {"min_seconds": float("inf")}),
        (MeasureConfig, {"iters": 10**9, "max_iters": 10**10}),
        (ProfileConfig, {"steps": (10**9,)}),
        (ProfileConfig, {"sweep_lengths": (10**9,)}),
        (QuantizeConfig, {"eval_seed": -1}),
        (RunRequest, {"seed": -1}),
        (LoadConfig, {"duration_s": float("inf")}),
    ],
    ids=lambda x: getattr(x, "__name__", str(x)),
)
def test_stage_configs_built_in_code_hold_the_same_bounds(make, kw):
    with pytest.raises(UsageError, match="out of bounds"):
        make(**kw)


def test_a_negative_seed_reaching_the_conditions_is_one_line(tiny_bundles):
    from edgekit.bundle import Bundle
    from edgekit.evaluate import conditions

    with pytest.raises(UsageError, match="--seed -1 is invalid"):
        conditions(Bundle.load(tiny_bundles["masked"]), {}, 2, -1, draw=True)
