"""CLI conventions a new user relies on (issue #15): --version, help that shows what to type,
usage errors on one line, one JSON document on stdout even for an error, and hints that name
options which exist and work."""

from __future__ import annotations

import json
import re

import pytest
from typer.testing import CliRunner

from edgekit.cli import app

runner = CliRunner()
COMMANDS = sorted(__import__("typer").main.get_command(app).commands)


def invoke(*args):
    return runner.invoke(app, [str(a) for a in args])


def test_version():
    from edgekit import __version__

    r = invoke("--version")
    assert r.exit_code == 0 and r.stdout.strip() == f"edgekit {__version__}"


@pytest.mark.parametrize("command", COMMANDS)
def test_help_shows_what_to_type_not_python_types(command):
    r = invoke(command, "--help")
    assert r.exit_code == 0, r.output
    for python_type in ("<bool>", "<str>", "<int>", "<float>", "<path>", "<list[", "{bundle}", "{model}", "{archive}"):
        assert python_type not in r.stdout, (command, python_type)
    assert "Example" in r.stdout  # every command shows an example


def test_every_resume_option_says_the_same_thing_in_the_same_words():
    """--resume had drifted into three wordings ("AI Hub: collect the jobs ...", "With --runtime
    aihub: collect the inference jobs ..." with no "instead")."""
    root = __import__("typer").main.get_command(app)
    helps = {
        name: p.help for name, cmd in root.commands.items() for p in cmd.params if "--resume" in getattr(p, "opts", ())
    }
    assert {"build", "check", "profile"} <= helps.keys()
    pattern = re.compile(
        r"With --runtime aihub: collect the [a-z ]+ an earlier, interrupted (\w+) submitted "
        r"\(the bundle's aihub/jobs\.json\) instead of submitting new ones\."
    )
    for name, text in helps.items():
        m = pattern.fullmatch(text or "")
        assert m and m.group(1) == name, (name, text)


def test_help_text_keeps_extras_in_brackets():
    """Rich read `edgekit[qnn]` as a markup tag and printed "needs edgekit" (issue #31): every help
    text escapes a lowercase [tag], and the rendered help shows the extra."""
    group = __import__("typer").main.get_command(app)
    tag = re.compile(r"(?<!\\)\[[a-z#/@][^\[]*?\]")
    for name, cmd in group.commands.items():
        for text in [cmd.help or "", cmd.epilog or "", *(getattr(p, "help", "") or "" for p in cmd.params)]:
            assert not tag.search(text), (name, tag.search(text).group(0))
    wide = {"COLUMNS": "300", "TERMINAL_WIDTH": "300"}
    for command in ("quantize", "demo"):
        r = runner.invoke(app, [command, "--help"], env=wide)
        assert "edgekit[qnn]" in r.stdout.replace("\n", " "), command


def test_choice_options_list_their_choices_in_help():
    from typing import get_args

    from edgekit.cli.options import GraphForm
    from edgekit.spec import GRAPHS

    assert get_args(GraphForm) == GRAPHS  # export's and run's --graph: the forms the bundle knows
    wide = {"COLUMNS": "200", "TERMINAL_WIDTH": "200"}
    r = runner.invoke(app, ["run", "--help"], env=wide)
    assert "[euler|midpoint|heun|rk4]" in r.stdout and "[host|step|unrolled]" in r.stdout
    r = runner.invoke(app, ["quantize", "--help"], env=wide)
    assert "[cpu|trt|qnn]" in r.stdout


@pytest.mark.parametrize(
    "args,needle",
    [
        (["run", "nowhere", "--bogus"], "No such option: --bogus"),
        (["run"], "Missing argument 'BUNDLE'"),
        (["run", "nowhere", "--solver", "verlet"], "'verlet' is not one of 'euler', 'midpoint', 'heun', 'rk4'"),
        (["profile", "nowhere", "--iters", "zero"], "Invalid value for '--iters'"),
    ],
)
def test_usage_errors_are_one_line_exit_2_and_one_json_document(args, needle):
    r = invoke(*args)
    assert r.exit_code == 2 and r.stdout == ""
    assert r.stderr.count("\n") == 1 and needle in r.stderr and "╭" not in r.stderr
    r = invoke(*args, "--json")
    assert r.exit_code == 2
    doc = json.loads(r.stdout)  # exactly one document: json.loads fails on anything more
    assert doc["exit_code"] == 2 and needle in doc["error"]


def test_stage_errors_with_json_print_one_document(tmp_path):
    r = invoke("inspect", tmp_path / "missing", "--json")
    assert r.exit_code == 1
    doc = json.loads(r.stdout)
    assert doc == {"error": doc["error"], "exit_code": 1} and "does not exist" in doc["error"]


# ---- every hint names an option that exists, and running it works -------------------------------
VALUES = {
    "--steps": "2",
    "--schedule": "linear",
    "--temperature": "0",
    "--choice-temperature": "1",
    "--guidance": "1",
    "--solver": "euler",
    "--grid": "uniform",
    "--sway": "-1",
    "--top-k": "2",
    "--length": "4",
    "--graph": None,
    "--spacing": "1",
}


def _hinted_options(message: str) -> list[str]:
    """The options a hint offers: 'its decode options are --a, --b' or 'valid: x, y' of --graph."""
    m = re.search(r"decode options are ((?:--[a-z-]+(?:, )?)+)", message)
    if m:
        return [o.strip() for o in m.group(1).split(",")]
    m = re.search(r"--graph '\w+' is not available .*; valid: ([a-z, ]+)", message)
    return [f"--graph={g.strip()}" for g in m.group(1).split(",")] if m else []


@pytest.mark.parametrize(
    "kind,bad",
    [
        ("ar", ["--solver", "heun"]),
        ("ar", ["--graph", "step"]),
        ("ar", ["--steps", "4"]),
        ("masked", ["--solver", "heun"]),
        ("masked", ["--top-k", "3"]),
        ("flow", ["--schedule", "linear"]),
    ],
)
def test_every_hint_names_options_that_work(demo_bundles, tiny_bundles, kind, bad):
    bundle = demo_bundles["ar"] if kind == "ar" else tiny_bundles[kind]
    cond = {"ar": [], "masked": ["--cond", "class_id=1"], "flow": ["--cond", "tokens=1"]}[kind]  # tiny: no demo set
    r = invoke("run", bundle, *bad, *cond)
    assert r.exit_code == 2, r.output
    assert " a ar " not in r.stderr
    hinted = _hinted_options(r.stderr)
    assert hinted, r.stderr
    for option in hinted:
        if "=" in option:
            args = option.split("=")
        else:
            assert option in VALUES, f"the hint names {option}, which `edgekit run` does not take"
            args = [option, VALUES[option]]
        ok = invoke("run", bundle, *args, *cond, "--json")
        assert ok.exit_code == 0, (option, ok.output)


def test_a_target_warning_is_printed_once(tiny_bundles, caplog):
    """`run --target android-arm64` on an x86 host warns once (it printed every warning twice:
    the runtime logged it and the report printed it)."""
    r = invoke("run", tiny_bundles["masked"], "--cond", "class_id=1", "--target", "android-arm64")
    assert r.exit_code == 0, r.output
    assert r.stderr.count("speed and power are this host's") == 1
    assert not [rec for rec in caplog.records if rec.levelname == "WARNING" and "this host" in rec.getMessage()]


# ---- chaining masked -> flow from the CLI ------------------------------------------------------
def test_masked_tokens_chain_into_the_flow_decoder(demo_bundles, tmp_path):
    """`run -o tokens.npz` then `--cond tokens=tokens.npz` (and `FILE.npz:KEY`), whatever the
    row counts: a file's rows are all decoded, in calls of the graph's batch."""
    import numpy as np

    tokens = tmp_path / "tokens.npz"
    r = invoke("run", demo_bundles["masked"], "-o", tokens, "--json")
    assert r.exit_code == 0, r.output
    r = invoke(
        "run",
        demo_bundles["flow"],
        "--solver",
        "euler",
        "--steps",
        "2",
        "--cond",
        f"tokens={tokens}",
        "-o",
        tmp_path / "f.npz",
        "--json",
    )
    assert r.exit_code == 0, r.output
    frames = np.load(tmp_path / "f.npz")
    assert np.array_equal(frames["cond_tokens"], np.load(tokens)["tokens"])
    five = tmp_path / "five.npz"  # 5 rows for a batch-2 graph: 3 calls, the last one padded
    np.savez(five, seqs=np.concatenate([np.load(tokens)["tokens"]] * 3)[:5])
    r = invoke(
        "run",
        demo_bundles["flow"],
        "--solver",
        "euler",
        "--steps",
        "2",
        "--cond",
        f"tokens={five}:seqs",
        "-o",
        tmp_path / "g.npz",
        "--json",
    )
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)
    # NFE is the solver's evaluations per decode (euler x 2), not the graph calls of 3 batches (issue #31)
    assert doc["batch"] == 5 and doc["decode_calls"] == 3 and doc["nfe"] == 2 and doc["runtime_calls"] == 3 * 2
    g = np.load(tmp_path / "g.npz")
    assert g["frames"].shape[0] == 5
    assert np.array_equal(g["frames"][:2], frames["frames"])  # call 0 is the same decode as before
    r = invoke("run", demo_bundles["flow"], "--cond", f"tokens={five}")
    assert r.exit_code == 2 and "has no array 'tokens'; valid: seqs" in r.stderr


# ---- long stretches say what they are doing on stderr -------------------------------------------
def test_check_and_the_first_budget_run_report_progress_on_stderr(tiny_bundles, demo_bundles, tmp_path):
    import shutil

    flow = shutil.copytree(tiny_bundles["flow"], tmp_path / "flow")  # the quality table is written into it
    manifest = flow / "edgekit.json"  # other tests may have measured it in the shared bundle: start without
    doc = json.loads(manifest.read_text())
    doc.pop("flow_quality", None)
    manifest.write_text(json.dumps(doc))
    r = invoke("run", flow, "--cond", "tokens=1", "--latency-budget-ms", "1000", "--json")
    assert r.exit_code == 0, r.output
    assert "measuring every solver and step count" in r.stderr and "per-NFE latency" in r.stderr
    json.loads(r.stdout)  # progress stays off stdout
    r = invoke("run", flow, "--cond", "tokens=1", "--latency-budget-ms", "1000")
    assert "measuring every solver" not in r.stderr  # stored now: the second run does not measure it
    r = invoke("check", demo_bundles["masked"], "--reference", "torch", "--candidate", "ort:fp32", "--n", "2")
    # each line stamped with the time the command has run (issue #31: slow steps say something)
    assert re.search(
        r"· \[\d+:\d\d\] opening torch:fp32 and ort:fp32 \(torch rebuilds the model from its source\)", r.stderr
    )
    assert re.search(r"· \[\d+:\d\d\] decoding batch 1/1 \(2 rows\) with both variants", r.stderr)


def test_edgekit_alone_prints_the_help():
    r = invoke()
    assert r.exit_code == 2 and "Usage: edgekit" in r.output and "export" in r.output and "error:" not in r.output


# ---- --runtime / --precision: one definition, from the runtime registry (issue #25) -------------
def _commands_with(option: str) -> dict[str, object]:
    commands = __import__("typer").main.get_command(app).commands
    return {name: cmd for name, cmd in commands.items() if any(option in p.opts for p in cmd.params)}


def test_every_runtime_is_in_every_runtime_help_and_accepted_by_every_command_that_takes_one(tmp_path):
    from edgekit.runtimes.registry import names
    from edgekit.vocabulary import PRECISIONS

    wide = {"COLUMNS": "400", "TERMINAL_WIDTH": "400"}
    for option, values in (("--runtime", names()), ("--precision", PRECISIONS)):
        commands = _commands_with(option)
        assert (
            {"run", "check", "profile", "loadtest"} <= set(commands)
            if option == "--runtime"
            else {"run", "profile", "build"} <= set(commands)
        )
        for name, cmd in commands.items():
            (param,) = [p for p in cmd.params if option in p.opts]
            for value in values:
                assert f"{value} (" in param.help, (name, option, value)  # the help users see
            shown = runner.invoke(app, [name, "--help"], env=wide).stdout
            assert all(value in shown for value in values), (name, option)
            required = [p for p in cmd.params if getattr(p, "required", False) and not p.opts[0].startswith("-")]
            for value in values:
                r = invoke(name, *[tmp_path / "missing"] * len(required), option, value)
                assert "is unknown" not in r.stderr, (name, option, value, r.stderr)  # the name got past parsing
            r = invoke(name, *[tmp_path / "missing"] * len(required), option, "nonesuch")
            assert (
                r.exit_code == 2
                and r.stderr.count("\n") == 1
                and f"{option} 'nonesuch' is unknown; valid: {', '.join(values)}" in r.stderr
            )
