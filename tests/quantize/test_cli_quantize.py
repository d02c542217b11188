"""`edgekit quantize` through the typer app. Runs once /tmp/edgekit-cli/quantize.py is merged
into edgekit/cli.py (until then typer answers "No such command")."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from edgekit.cli import app

pytest.importorskip("onnxruntime")
runner = CliRunner()
FAST = ["--calib-samples", "2", "--eval-samples", "2"]
# Two held-out rows measure nothing reliably: these tests check the command, not the model.
LOOSE = ["--budget", "lockstep_token_agreement=0", "--budget", "event_accuracy_drop=1", "--budget", "check_margin=-100"]


def invoke(*args):
    return runner.invoke(app, [str(a) for a in args], catch_exceptions=False)


def test_quantize_json_is_one_document(masked):
    r = invoke("quantize", masked, *FAST, "--no-fallback", *LOOSE, "--json")
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)
    assert doc["schema"] == "edgekit.quantize/1" and doc["passed"] is True
    assert doc["calibration"]["samples"] == 2 and doc["budget"]["limits"]["lockstep_token_agreement"] == 0.0
    assert doc["artifact"]["int8"].startswith("int8-")
    # The process's peak memory against the FP32 weights (quantize/memory.py), in the one document.
    mem = doc["memory"]
    assert mem["peak_rss_bytes"] > 0 and mem["fp32_weight_bytes"] > 0 and mem["activation_bytes"] > 0
    assert mem["ratio"] == pytest.approx(mem["peak_rss_bytes"] / mem["fp32_weight_bytes"])
    assert isinstance(mem["within_goal"], bool)


def test_quantize_prints_a_readable_summary(masked):
    r = invoke("quantize", masked, *FAST, "--profile", "trt", "--exclude", "head", "--no-fallback", *LOOSE)
    assert r.exit_code == 0, r.output
    out = r.stdout
    for needle in (
        "trt / minmax",
        "kept in float",
        "attention core",
        "--exclude head",
        "accuracy vs budget",
        "lockstep_token_agreement",
        "ground truth, FP32 vs INT8",
        "range drift",
        "mask share",
        "peak memory",
        "wrote",
    ):
        assert needle in out, needle
    r = invoke("run", masked, "--precision", "int8", "--json")  # what was written runs
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout)["precision"] == "int8"


def test_budget_miss_exits_4_with_one_line(masked):
    r = invoke(
        "quantize",
        masked,
        *FAST,
        "--no-fallback",
        "--budget",
        "event_accuracy_drop=-1",  # INT8 a whole 1.0 more accurate than FP32: unreachable
    )
    assert r.exit_code == 4
    last = r.stderr.strip().splitlines()[-1]
    assert last.startswith("error:") and "misses the accuracy budget" in last and "event_accuracy_drop" in last
    assert "try --method percentile" in r.stderr  # made with minmax ranges: percentile is the next to try
    assert "Traceback" not in r.output


def test_a_miss_with_percentile_ranges_suggests_entropy_not_what_it_used(masked, monkeypatch):
    # --method auto may have chosen percentile already: the hint must not send the user back to it.
    import edgekit.quantize as quantize

    real = quantize.quantize_bundle

    def made_with_percentile(*args, **kwargs):
        return real(*args, **kwargs) | {"method": "percentile"}

    monkeypatch.setattr(quantize, "quantize_bundle", made_with_percentile)
    r = invoke("quantize", masked, *FAST, "--no-fallback", "--budget", "event_accuracy_drop=-1")
    assert r.exit_code == 4 and "try --method entropy" in r.stderr and "--method percentile" not in r.stderr


def test_a_budget_miss_prints_its_notes_before_the_error_and_records_them(masked, monkeypatch):
    """budget_notes (near-ties; tested in test_budget.py) stood in for: what it says is one
    warning line each before the error, and the manifest's quantization.notes."""
    import edgekit.quantize.result as result
    from edgekit.bundle import Bundle

    seen = []

    def notes(checks, metrics):
        seen.append([c["key"] for c in checks if c["passed"] is False])
        return ["lockstep_token_agreement 0.98: 100% of its flips are near-ties (stand-in)"]

    monkeypatch.setattr(result, "budget_notes", notes)
    r = invoke("quantize", masked, *FAST, "--no-fallback", "--budget", "event_accuracy_drop=-1")
    assert r.exit_code == 4 and len(seen) == 1 and "event_accuracy_drop" in seen[0]
    lines = r.stderr.strip().splitlines()
    assert lines[-2] == "warning: lockstep_token_agreement 0.98: 100% of its flips are near-ties (stand-in)"
    assert lines[-1].startswith("error:")
    assert Bundle.load(masked).quantization.as_recorded["notes"] == [notes([], {})[0]]


def test_max_fallback_bounds_the_search_and_the_verdict_says_the_budget_failed(masked):
    """An unreachable budget: the search stops after --max-fallback nodes instead of floating every layer."""
    r = invoke("quantize", masked, *FAST, "--max-fallback", "2", "--budget", "event_accuracy_drop=-1", "--json")
    assert r.exit_code == 4, r.output
    doc = json.loads(r.stdout)
    assert doc["passed"] is False and len(doc["fallback"]) == 2


@pytest.mark.parametrize(
    "args,needle",
    [
        (["--profile", "gpu"], "'gpu' is not one of 'cpu', 'trt', 'qnn'"),  # typer choices (issue #15)
        (["--method", "kl"], "'kl' is not one of 'auto', 'minmax', 'entropy', 'percentile'"),
        (["--budget", "accuracy=1"], "valid keys"),
        (["--budget", "snr_db=20"], "does not apply to the masked model"),
        # a share over 1 no model meets: refused, not quantized for minutes to miss it (the fuzz found 1e308)
        (
            ["--budget", "token_agreement=1e308"],
            "lockstep_token_agreement is a share of decisions; give a limit in [0, 1]",
        ),
        (["--budget", "top1_agreement=-0.5"], "give a limit in [0, 1]"),
        (["--exclude", "blocks.9"], "matches no node"),
        (["--max-fallback", "-1"], "--max-fallback -1 is out of bounds; valid: an integer from 0 to"),
    ],
)
def test_usage_errors_exit_2_with_one_line(demo_bundles, args, needle):
    r = invoke("quantize", demo_bundles["masked"], *args)
    assert r.exit_code == 2, r.output
    last = r.stderr.strip().splitlines()[-1]  # progress lines may come first
    assert last.startswith("error:") and needle in last, r.stderr


def test_requantize_replaces_a_missing_int8_file(masked):
    """A deleted (or stale) int8 graph is what quantize replaces: the error's own hint for it is
    to re-run quantize, so quantize must not refuse for it. Every other artifact is still checked."""
    r = invoke("quantize", masked, *FAST, "--no-fallback", *LOOSE, "--json")
    assert r.exit_code == 0, r.output
    old = json.loads(r.stdout)["artifact"]["int8"]
    (masked / old).unlink()
    r = invoke("run", masked, "--precision", "int8")
    assert r.exit_code != 0 and "is missing" in r.output and f"edgekit quantize {masked}" in r.output
    r = invoke("quantize", masked, *FAST, "--no-fallback", *LOOSE, "--json")
    assert r.exit_code == 0, r.output
    assert (masked / json.loads(r.stdout)["artifact"]["int8"]).is_file()
    assert invoke("run", masked, "--precision", "int8").exit_code == 0
    fp32 = next(masked.glob("fp32-*.onnx"))
    fp32.write_bytes(fp32.read_bytes()[:-1])  # the graph quantize reads is verified as before
    r = invoke("quantize", masked, *FAST, "--no-fallback", *LOOSE)
    assert r.exit_code != 0 and "fp32" in r.output and "sha256" in r.output
