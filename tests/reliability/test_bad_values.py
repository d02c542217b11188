"""Bad values and bounds found by attacking the CLI (issue #19, items 5-8 and 12): each is one line
with the documented exit code, found before anything is allocated or written; no NaN reaches a
manifest, no bad bundle is written."""

import json
import shutil
import textwrap

import numpy as np
import pytest
from typer.testing import CliRunner

from edgekit.bundle import MANIFEST, Bundle
from edgekit.cli import app

runner = CliRunner()


def invoke(*args):
    return runner.invoke(app, [str(a) for a in args])


def one_line(r, code, *needles):
    """Exit ``code``, no traceback, exactly one ``error:`` line (progress lines may precede it)
    holding every needle."""
    assert r.exit_code == code, r.output
    errors = [line for line in r.stderr.splitlines() if line.startswith("error:")]
    assert "Traceback" not in r.output and len(errors) == 1, r.stderr
    for needle in needles:
        assert needle in errors[0], r.stderr


@pytest.fixture
def tiny_masked(tiny_bundles, tmp_path):
    return shutil.copytree(tiny_bundles["masked"], tmp_path / "masked")


# ---- 5: NaN/Inf outputs fail export verification ---------------------------------------------------
FACTORIES = textwrap.dedent("""
    import sys
    import dataclasses
    import torch
    from tests.tiny_models import tiny_masked_spec

    class NaNOut(torch.nn.Module):
        def __init__(self, inner):
            super().__init__()
            self.inner = inner

        def forward(self, tokens, class_id):
            out = self.inner(tokens, class_id)
            return torch.where(out > 0, out, torch.full_like(out, float("nan")))

    def nan_model(batch=2):
        spec = tiny_masked_spec(batch)
        return dataclasses.replace(spec, module=NaNOut(spec.module))

    def not_a_module(batch=2):
        return dataclasses.replace(tiny_masked_spec(batch), module=lambda *a: None)

    def bad_meta(batch=2):
        spec = tiny_masked_spec(batch)
        return dataclasses.replace(spec, meta=dict(spec.meta, made={1, 2}))

    def bad_defaults(batch=2):
        return dataclasses.replace(tiny_masked_spec(batch), decode_defaults={"steps": "ten"})

    def huge_steps(batch=2):
        return dataclasses.replace(tiny_masked_spec(batch), decode_defaults={"steps": 10**9})

    def ansi_name(batch=2):
        return dataclasses.replace(tiny_masked_spec(batch), name="\\x1b[2J\\x1b[31mpwned")

    def exits(batch=2):
        sys.exit(0)
""")


@pytest.fixture
def factories(tmp_path):
    path = tmp_path / "factories.py"
    path.write_text(FACTORIES)
    return path


def test_nan_outputs_fail_verification_with_the_count(factories, tmp_path):
    r = invoke("export", f"{factories}:nan_model", "-o", tmp_path / "b")
    one_line(r, 1, "non-finite outputs", "logits:", "NaN/Inf values")
    assert not (tmp_path / "b").exists()


@pytest.mark.parametrize(
    "factory,needle",
    [
        ("not_a_module", "not a torch.nn.Module"),
        ("bad_meta", "meta is not plain JSON data"),
        ("bad_defaults", "steps='ten' is invalid"),
        ("huge_steps", "steps=1000000000 is invalid; valid: an integer in [1, 10000]"),
        ("ansi_name", "printable characters"),
        ("exits", "called sys.exit(0)"),
    ],
)
def test_bad_factory_results_never_make_a_bundle(factories, tmp_path, factory, needle):
    r = invoke("export", f"{factories}:{factory}", "-o", tmp_path / "b")
    one_line(r, r.exit_code if r.exit_code in (1, 2) else -1, needle)
    assert "\x1b" not in r.stderr  # escapes are shown as repr, never raw
    assert not (tmp_path / "b").exists()


def test_opset_beyond_onnx_is_one_line(tmp_path):
    r = invoke("export", "tests.tiny_models:tiny_flow_spec", "-o", tmp_path / "b", "--opset", "999")
    one_line(r, 1, "--opset 999 is newer than this onnx")
    assert not (tmp_path / "b").exists()


# ---- 6: --cond values ------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "value,needle",
    [
        ("3", "value 3 is outside the valid range"),  # class_id in [0, 3]: 3 is the uncond class? high is 4
        ("1000", "value 1000 is outside the valid range"),
        ("-1", "value -1 is outside the valid range"),
        ("nan", "is not finite"),
        ("inf", "is not finite"),
        ("1.5", "must be an integer"),
    ],
)
def test_cond_numbers_out_of_range(tiny_masked, value, needle):
    spec = Bundle.load(tiny_masked).inputs["class_id"]
    if value == "3" and spec.high > 3:
        value, needle = str(int(spec.high)), f"value {int(spec.high)} is outside the valid range"
    r = invoke("run", tiny_masked, "--cond", f"class_id={value}", "--steps", "2")
    one_line(r, 2, f"class_id={value}", needle, f"valid: int64 in [{spec.low}, {spec.high})")


def _npy(tmp_path, name, arr=None, raw=None, **kw):
    path = tmp_path / name
    if raw is not None:
        path.write_bytes(raw)
    else:
        np.save(path, arr, **kw)
    return path


def test_cond_files_that_are_not_plain_numbers(tiny_masked, tmp_path):
    header_8tib = (
        b"\x93NUMPY\x01\x00"
        + b"{'descr': '<i8', 'fortran_order': False, 'shape': (1099511627776,), }".ljust(118)
        + b"\n"
    )
    cases = {
        "empty": _npy(tmp_path, "empty.npy", raw=b""),
        "strings": _npy(tmp_path, "s.npy", np.array(["a", "b"])),
        "structured": _npy(tmp_path, "st.npy", np.zeros(2, dtype=[("a", "i8")])),
        "pickled": _npy(tmp_path, "p.npy", np.array([{"a": 1}, None], dtype=object), allow_pickle=True),
        "huge header": _npy(tmp_path, "h.npy", raw=header_8tib),
        "nan": _npy(tmp_path, "n.npy", np.array([np.nan, 1.0])),
        "out of range": _npy(tmp_path, "o.npy", np.array([0, 99], np.int64)),
        "garbage": _npy(tmp_path, "g.npy", raw=b"\x93NUMPY\x09\x00garbage"),
    }
    for what, path in cases.items():
        r = invoke("run", tiny_masked, "--cond", f"class_id={path}", "--steps", "2")
        assert r.exit_code == 2, (what, r.output)
        one_line(r, 2, str(path))


# ---- 7: upper bounds before allocating ------------------------------------------------------------
@pytest.mark.parametrize(
    "args,needle",
    [
        (["--batch", "1000000000"], "--batch 1000000000 is out of bounds"),
        (["--steps", "1000000000"], "steps=1000000000 is invalid"),
        (["--threads", "100000"], "--threads 100000 is out of bounds; valid: an integer from 0 to 1024"),
        (["--seed", "-1"], "--seed -1 is out of bounds; valid: an integer from 0 to 4294967295"),
    ],
)
def test_upper_bounds(tiny_masked, args, needle):
    r = invoke("run", tiny_masked, "--cond", "class_id=1", *args)
    assert r.exit_code in (1, 2)
    one_line(r, r.exit_code, needle)


def test_flow_steps_bound(tiny_bundles):
    r = invoke("run", tiny_bundles["flow"], "--cond", "tokens=1", "--steps", "1000000000")
    one_line(r, 2, "steps=1000000000 is invalid")


def test_manifest_steps_bound(tiny_masked):
    doc = json.loads((tiny_masked / MANIFEST).read_text())
    doc["decode_defaults"]["steps"] = 10**9
    (tiny_masked / MANIFEST).write_text(json.dumps(doc))
    r = invoke("run", tiny_masked, "--cond", "class_id=1")
    one_line(r, 1, "field decode_defaults.steps: expected an integer from 1 to 10000, found integer 1000000000")


# ---- 8: NaN options ------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "args,needle",
    [
        (["--temperature", "nan"], "temperature=nan is invalid"),
        (["--choice-temperature", "nan"], "choice_temperature=nan is invalid"),
        (["--guidance", "inf"], "guidance=inf is invalid"),
    ],
)
def test_nan_decode_options(tiny_masked, args, needle):
    r = invoke("run", tiny_masked, "--cond", "class_id=1", *args)
    one_line(r, 2, needle)


def test_nan_budget_is_refused_before_quantizing(tiny_masked):
    before = (tiny_masked / MANIFEST).read_text()
    r = invoke("quantize", tiny_masked, "--budget", "token_agreement=nan")
    one_line(r, 2, "must be a finite number")
    assert (tiny_masked / MANIFEST).read_text() == before and "NaN" not in before


def test_nan_never_reaches_a_manifest(tiny_masked):
    b = Bundle.load(tiny_masked)
    b.manifest["quantization"] = {"x": float("nan")}
    with pytest.raises(Exception) as info:
        b.save()
    assert "Out of range float values are not JSON compliant" in str(info.value)
    assert "NaN" not in (tiny_masked / MANIFEST).read_text()


# ---- 12: malformed manifests -----------------------------------------------------------------------
@pytest.mark.parametrize(
    "mutate",
    [
        lambda d: d["model"].update(name=["not", "a", "string"]),
        lambda d: d.update(decode_defaults=[1, 2]),
        lambda d: d.update(engines="nope"),
        lambda d: d["artifacts"]["fp32"].update(bytes="12"),
        lambda d: d["artifacts"]["fp32"].pop("sha256"),
        lambda d: d["model"].update(name="\x1b[31mred"),
        lambda d: d["model"].pop("kind"),
    ],
)
def test_malformed_manifests_are_one_line(tiny_masked, mutate):
    doc = json.loads((tiny_masked / MANIFEST).read_text())
    mutate(doc)
    (tiny_masked / MANIFEST).write_text(json.dumps(doc))
    for cmd in (["inspect"], ["run", "--cond", "class_id=1"], ["build", "--target", "cpu"]):
        r = invoke(cmd[0], tiny_masked, *cmd[1:])
        one_line(r, 1, "manifest")
        assert "\x1b" not in r.stderr


def test_deeply_nested_manifest_is_one_line(tiny_masked):
    (tiny_masked / MANIFEST).write_text("[" * 100_000 + "]" * 100_000)
    r = invoke("inspect", tiny_masked)
    one_line(r, 1, "nested too deeply")


def test_corrupt_onnx_with_updated_hash_is_one_line(tiny_masked):
    from edgekit.bundle import sha256_file

    b = Bundle.load(tiny_masked)
    path = b.path_of("fp32")
    path.write_bytes(b"\x08\x07garbage" * 50)
    doc = json.loads((tiny_masked / MANIFEST).read_text())
    doc["artifacts"]["fp32"].update(sha256=sha256_file(path), bytes=path.stat().st_size)
    (tiny_masked / MANIFEST).write_text(json.dumps(doc))
    for cmd in (
        ["build", "--target", "cpu"],
        ["quantize", "--calib-samples", "1", "--eval-samples", "1"],
        ["debug", "--candidate", "ort:fp32", "--reference", "openvino:fp32"],  # issue #45: a DecodeError in debug
        ["run", "--cond", "class_id=1"],
        ["lint"],
    ):
        r = invoke(cmd[0], tiny_masked, *cmd[1:])
        one_line(r, 1)
    # profile reports a variant it cannot load as "not measured" and goes on with the others.
    r = invoke(
        "profile",
        tiny_masked,
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
    )
    assert "Traceback" not in r.output and "not a model ONNX Runtime can load" in r.output, r.output


def test_quantize_sample_counts_are_bounded(tiny_masked):
    r = invoke("quantize", tiny_masked, "--calib-samples", "1000000000")
    one_line(r, 2, "--calib-samples 1000000000 is out of bounds; valid: an integer from 1 to 4096")
    assert "int8" not in Bundle.load(tiny_masked).manifest["artifacts"]
