"""Every field of a real manifest mutated, in type and in value, under every command that reads it
(issue #45, point 2): the bundle is a tiny masked model quantized with two step buckets (so
``quantization.config``, which ``debug --fix`` re-quantizes with, and ``quantization.step_buckets``
are there) and built for the cpu target (bucketed engines). Each reading command ends with exit 0,
or one ``error:`` line and its documented exit code; never a traceback, never past a time limit.

The full sweep of wrong *types* over every field runs in-process on ``Bundle.load`` and
``debug.fix.recorded_config`` (milliseconds each); the CLI runs a hypothesis sample of type and
value mutations (a few seconds each: every command decodes)."""

from __future__ import annotations

import copy
import json
import shutil

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from edgekit.bundle import MANIFEST, Bundle
from edgekit.cli import app
from edgekit.errors import EXIT_CHECK_FAILED, EXIT_ERROR, EXIT_OK, EXIT_UNAVAILABLE, EXIT_USAGE, EdgekitError
from tests.reliability.test_cli_fuzz import time_limit

runner = CliRunner()
LIMIT_S = 90  # one command on the tiny model takes a second or two; past this it is a hang
DOCUMENTED = {EXIT_OK, EXIT_ERROR, EXIT_USAGE, EXIT_UNAVAILABLE, EXIT_CHECK_FAILED}
# Every command that reads the bundle, as cheap as it goes: one graph batch, one measured decode.
COMMANDS = {
    "inspect": ["inspect"],
    "run": ["run", "--precision", "int8", "--cond", "class_id=1"],
    "check": ["check"],
    "debug": [
        "debug",
        "--fix",
        "--rows",
        "1",
    ],  # --fix reads quantization.config first (the gate passes: no trial runs)
    "build": ["build", "--target", "cpu", "--precision", "auto"],
    "profile": [
        "profile",
        "--precision",
        "fp32,int8",
        "--iters",
        "1",
        "--min-seconds",
        "0",
        "--warmup",
        "0",
        "--power",
        "off",
        "--cond",
        "class_id=1",
    ],
    "lint": ["lint", "--target", "cpu"],
}
WRONG_TYPES = [None, True, 7, 2.5, "x", [1], {"k": 1}]
# Values of the right type that are still wrong: out of every bound, empty, huge, hostile text.
WRONG_VALUES = {
    int: [-1, 0, 10**12, 2**63],
    float: [float("nan"), float("inf"), -1e308, -0.0],
    str: ["", "x" * 5000, "\x1b[31mred", "../../etc/passwd", "/etc/passwd", "\udcff", "zz9", "int8-bucket-1", "fp32"],
    list: [[], [None], ["x", None], [1.0] * 300, [[1]]],
    dict: [{}, {"k": None}, {"": ""}],
}


@pytest.fixture(scope="module")
def base(tiny_bundles, tmp_path_factory):
    """(bundle dir, its manifest): quantized with 2 step buckets, cpu int8 engines built; every
    command above runs clean on it."""
    from edgekit.builder import build_bundle
    from edgekit.quantize import QuantizeConfig, quantize_bundle

    root = shutil.copytree(tiny_bundles["masked"], tmp_path_factory.mktemp("mutations") / "masked")
    loose = {"check_margin": -100.0, "lockstep_token_agreement": 0.0, "event_accuracy_drop": 1.0}
    quantize_bundle(
        root, QuantizeConfig(calib_samples=2, eval_samples=2, isa="avx2", step_buckets=2, fallback=False, budget=loose)
    )
    build_bundle(root, "cpu", "int8")
    doc = json.loads((root / MANIFEST).read_text())
    assert doc["quantization"]["step_buckets"]["artifacts"] == ["int8", "int8-bucket-1"]
    assert doc["engines"]["cpu/int8"]["buckets"]["binding"]
    for name, args in COMMANDS.items():
        r = runner.invoke(app, [args[0], str(root), *args[1:]])
        assert r.exit_code in (EXIT_OK, EXIT_CHECK_FAILED), (name, r.output)
    return root, doc


def _fields(doc, where=()):
    """Every field path of ``doc`` (object members, and the first and last item of each list)."""
    out = []
    if isinstance(doc, dict):
        items = list(doc.items())
    else:
        items = list(enumerate(doc))
        items = items[:1] + items[-1:] if len(items) > 1 else items
    for key, value in items:
        path = (*where, key)
        out.append(path)
        if isinstance(value, (dict, list)):
            out += _fields(value, path)
    return out


def _get(doc, path):
    for key in path:
        doc = doc[key]
    return doc


def _mutated(doc, path, value, delete=False):
    out = copy.deepcopy(doc)
    parent = _get(out, path[:-1])
    if delete:
        del parent[path[-1]]
    else:
        parent[path[-1]] = value
    return out


def _write(root, doc):
    (root / MANIFEST).write_text(json.dumps(doc))  # json writes NaN/Infinity as a careless editor would


def _clean(r, what):
    """Exit 0, or exactly one error line and a documented exit code; no traceback."""
    assert r.exception is None or isinstance(r.exception, SystemExit), (what, repr(r.exception))
    assert "Traceback" not in r.output, (what, r.output[-2000:])
    assert r.exit_code in DOCUMENTED, (what, r.exit_code, r.output[-2000:])
    errors = [line for line in r.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == (0 if r.exit_code == 0 else 1), (what, r.stderr[-2000:])


# ---- every field x every wrong type, in-process ------------------------------------------------------
def test_every_field_with_every_wrong_type_loads_or_is_one_line_and_fix_config_too(base, tmp_path):
    """``Bundle.load`` and what ``debug --fix`` builds its quantize config from, over every field
    and every JSON type it does not have: a one-line error naming the manifest, or values every
    reader takes (the recorded config builds; the step buckets parse)."""
    from edgekit.debug.fix import recorded_config
    from edgekit.runtimes.engines import find_engine

    root, doc = base
    work = shutil.copytree(root, tmp_path / "b")
    failures, cases = [], 0
    for path in _fields(doc):
        if path == ("schema",):
            continue
        for value in WRONG_TYPES:
            if type(value) is type(_get(doc, path)):
                continue
            cases += 1
            _write(work, _mutated(doc, path, value))
            try:
                b = Bundle.load(work, verify=False)
                if b.quantization and b.quantization.config:
                    recorded_config(b)
                b.step_buckets()
                if path[0] == "engines":  # what run/check/profile --target read of an engine entry
                    find_engine(work, "cpu", "int8")
            except EdgekitError as exc:
                if "\n" in str(exc):
                    failures.append(f"{path} = {value!r}: two lines: {exc}")
            except Exception as exc:  # noqa: BLE001 - the point: every escape is named
                failures.append(f"{path} = {value!r}: {type(exc).__name__}: {exc}")
    assert cases > 500 and failures == [], "\n".join(failures[:20])


@pytest.mark.parametrize(
    "path,value,field",
    [
        (("quantization", "config"), [1, 2], "quantization.config: expected null or an object"),
        (("quantization", "config", "exclude"), 5, "quantization.config.exclude: expected a list of string items"),
        (("quantization", "config", "overrides"), [1], "quantization.config.overrides[0]: expected an object"),
        (("quantization", "config", "budget"), [1], "quantization.config.budget: expected an object"),
        (("quantization", "config", "decode"), "x", "quantization.config.decode: expected an object"),
        (("quantization", "config", "percentile"), "x", "quantization.config.percentile: expected a number"),
        (("quantization", "config", "percentile"), 500.0, "quantization.config.percentile: 500.0 is invalid"),
        (("quantization", "config", "profile"), "zz", "quantization.config.profile: 'zz' is unknown"),
        (
            ("quantization", "config", "budget"),
            {"snr_db": 30},
            "quantization.config.budget: snr_db does not apply to the masked model",
        ),
        (("quantization", "config", "isa"), "zz9", "quantization.config.isa: expected one of host, avx2"),
        (("quantization", "arithmetic", "isa"), "zz9", "quantization.arithmetic.isa: expected null or one of avx2"),
        (
            ("quantization", "step_buckets", "boundaries"),
            ["x", None],
            "quantization.step_buckets.boundaries[0]: expected a number",
        ),
        (
            ("quantization", "speed", "int8_speedup"),
            float("nan"),
            "quantization.speed.int8_speedup: expected a finite number",
        ),
        (
            ("quantization", "budget", "eval", "seed"),
            -1,
            "quantization.budget.eval.seed: expected an integer from 0 to 4294967295",
        ),
        (("decode_defaults", "steps"), 10**9, "decode_defaults.steps: expected an integer from 1 to 10000"),
    ],
)
def test_the_issues_manifest_fields_are_one_line_naming_the_field(base, tmp_path, path, value, field):
    """The issue's cases (``debug --fix`` built its config from these unchecked): one line that
    names the manifest field, never an option the user did not pass (no "--isa 'zz9'")."""
    root, doc = base
    work = shutil.copytree(root, tmp_path / "b")
    _write(work, _mutated(doc, path, value))
    r = runner.invoke(app, ["debug", str(work), "--fix"])
    _clean(r, path)
    assert r.exit_code == EXIT_ERROR and f"field {field}" in r.stderr, r.stderr
    assert "--isa" not in r.stderr and "--profile" not in r.stderr and "--budget" not in r.stderr
    assert "prepare graph" not in r.stderr and "check's gate" not in r.stderr  # refused before any work


def test_a_huge_recorded_profile_under_every_reading_command_is_clean(base, tmp_path):
    """A sample the hypothesis test once drew (CI, stop 60): lint found the 5,000-character profile
    wrong for the target and exited 4 with its table but no ``error:`` line."""
    root, doc = base
    work = shutil.copytree(root, tmp_path / "b")
    _write(work, _mutated(doc, ("quantization", "profile"), "x" * 5000))
    for name, args in COMMANDS.items():
        with time_limit(LIMIT_S):
            r = runner.invoke(app, [args[0], str(work), *args[1:]])
        _clean(r, (name, "quantization.profile"))
    assert r.exit_code == EXIT_CHECK_FAILED and "lint failed: 1 error-level finding(s)" in r.stderr, r.stderr


# ---- a hypothesis sample through every reading command ----------------------------------------------
def _values_for(original):
    kind = float if isinstance(original, float) else type(original)
    return [v for v in WRONG_TYPES if type(v) is not type(original)] + WRONG_VALUES.get(kind, [])


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture], database=None)
@given(data=st.data())
def test_every_reading_command_on_a_mutated_manifest_is_clean(base, tmp_path_factory, data):
    root, doc = base
    fields = [p for p in _fields(doc) if p != ("schema",)]
    path = data.draw(st.sampled_from(fields), label="field")
    original = _get(doc, path)
    delete = data.draw(st.booleans(), label="delete") if isinstance(path[-1], str) else False
    value = None if delete else data.draw(st.sampled_from(_values_for(original)), label="value")
    work = tmp_path_factory.mktemp("mut") / "masked"
    shutil.copytree(root, work)
    _write(work, _mutated(doc, path, value, delete))
    for name, args in COMMANDS.items():
        with time_limit(LIMIT_S):
            r = runner.invoke(app, [args[0], str(work), *args[1:]])
        _clean(r, (name, path, "deleted" if delete else value))


@pytest.mark.parametrize("section", ["config", "step_buckets", "arithmetic", "speed", "budget"])
def test_every_field_of_the_sections_debug_fix_and_the_runtimes_read_under_debug_fix(base, tmp_path, section):
    """The sections the issue found unchecked, every field of each given a wrong value of its own
    type and every wrong type, through ``debug --fix`` (which reads the config before any work)."""
    root, doc = base
    work = shutil.copytree(root, tmp_path / "b")
    paths = [p for p in _fields(doc) if p[:2] == ("quantization", section)]
    assert paths
    seen = 0
    for path in paths:
        values = _values_for(_get(doc, path))
        for value in (values[0], values[-1]):  # a wrong type and a wrong value of its type: each case may decode
            seen += 1
            _write(work, _mutated(doc, path, value))
            with time_limit(LIMIT_S):
                r = runner.invoke(app, ["debug", str(work), "--fix", "--rows", "1"])
            _clean(r, (path, value))
    assert seen


@pytest.mark.parametrize(
    ("field", "value", "says"),
    [
        (
            "low",
            10**12,
            "field io.inputs: expected tensor specs, found one that does not parse (class_id: low "
            "1000000000000 is not below high 4)",
        ),
        ("high", -1, "(class_id: low 0 is not below high -1)"),
        # a range the manifest takes but the graph cannot (class ids past its table): ORT's refusal, one line
        ("high", 10**12, "ort: running"),
    ],
)
def test_a_conditioning_range_the_graph_cannot_take_is_one_line(base, tmp_path, field, value, says):
    """hypothesis found `check` on ``io.inputs.class_id.low = 10**12`` ending in ORT's traceback: the
    conditions drawn in that range indexed past the class embedding's table."""
    root, doc = base
    work = shutil.copytree(root, tmp_path / "b")
    _write(work, _mutated(doc, ("io", "inputs", "class_id", field), value))
    with time_limit(LIMIT_S):
        r = runner.invoke(app, ["check", str(work)])
    _clean(r, (field, value))
    assert r.exit_code == EXIT_ERROR and says in r.stderr, r.stderr
