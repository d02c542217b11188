"""Python a bundle's manifest names (issue #30, item 0): the condition sampler and the model source
`--runtime torch` rebuilds run only when this user exported the bundle here and the file is
unchanged; a copied or unpacked bundle, a code file inside the bundle folder or a changed file
needs --trust-code, said in one line before anything is imported. Also issue #31 item 5: a
``file.py:function`` factory imports a module beside it, from any working directory."""

import json
import shutil
import sys
import textwrap

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from edgekit._userhooks import TRUST_CODE, bundle_code_problem, load_bundle_callable
from edgekit.bundle import MANIFEST
from edgekit.cli import app
from edgekit.errors import EdgekitError

runner = CliRunner()

PAYLOAD = """\
import pathlib
pathlib.Path({marker!r}).write_text("pwned")

def f(*args, **kwargs):
    raise SystemExit("payload ran")
"""


def _plant(bundle, tmp_path, field):
    """An attacker's bundle: payload.py inside it, named by the manifest's ``field``."""
    marker = tmp_path / "pwned"
    (bundle / "payload.py").write_text(PAYLOAD.format(marker=str(marker)))
    doc = json.loads((bundle / MANIFEST).read_text())
    doc["model"][field] = f"{bundle / 'payload.py'}:f"
    (bundle / MANIFEST).write_text(json.dumps(doc))
    return marker


@pytest.fixture
def evil(tiny_bundles, tmp_path):
    return shutil.copytree(tiny_bundles["masked"], tmp_path / "evilb")


def _refused(r, what):
    assert r.exit_code == 1, r.output
    assert "Traceback" not in r.output and r.stderr.count("error:") == 1, r.output  # progress lines may precede it
    assert what in r.stderr and "--trust-code" in r.stderr and "payload.py" in r.stderr


@pytest.mark.parametrize(
    "argv",
    [
        ["check", "{b}", "--reference", "ort:fp32", "--candidate", "openvino:fp32", "--n", "2"],
        ["quantize", "{b}", "--calib-samples", "2", "--eval-samples", "2"],
        ["profile", "{b}", "--iters", "1", "--warmup", "0", "--steps", "1"],
    ],
)
def test_condition_sampler_of_a_copied_bundle_is_not_run(evil, tmp_path, argv):
    marker = _plant(evil, tmp_path, "condition_sampler")
    r = runner.invoke(app, [a.format(b=evil) for a in argv])
    _refused(r, "condition sampler")
    assert not marker.exists()


@pytest.mark.parametrize(
    "argv",
    [
        ["run", "{b}", "--runtime", "torch", "--cond", "class_id=1"],
        ["check", "{b}", "--reference", "ort:fp32", "--candidate", "torch:fp32", "--n", "2", "--cond", "class_id=1"],
    ],
)
def test_model_source_of_a_copied_bundle_is_not_run(evil, tmp_path, argv):
    marker = _plant(evil, tmp_path, "source")
    r = runner.invoke(app, [a.format(b=evil) for a in argv] + ["--json"])
    _refused(r, "model source")
    assert json.loads(r.stdout)["exit_code"] == 1
    assert not marker.exists()


def test_trust_code_is_the_users_explicit_yes(evil, tmp_path):
    marker = _plant(evil, tmp_path, "condition_sampler")
    r = runner.invoke(
        app, ["check", str(evil), "--reference", "ort:fp32", "--candidate", "openvino:fp32", "--n", "2", "--trust-code"]
    )
    assert marker.read_text() == "pwned"  # it ran because the user said so
    assert r.exit_code == 1 and "payload ran" in r.stderr and "Traceback" not in r.output


def test_relative_and_package_refs_from_the_bundle_folder_are_refused(evil, tmp_path, monkeypatch):
    marker = _plant(evil, tmp_path, "condition_sampler")
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))  # `python -m edgekit` puts the working directory first
    for ref in ("evilb/payload.py:f", "evilb.payload:f", "payload:f"):
        problem = bundle_code_problem(evil, ref)
        assert problem, ref
        with pytest.raises(EdgekitError, match="--trust-code") as info:
            load_bundle_callable(evil, ref, "condition sampler")
        assert "\n" not in str(info.value)
    assert not marker.exists() and "evilb.payload" not in sys.modules


@settings(max_examples=60, deadline=None, database=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    ref=st.text(min_size=1, max_size=30)
    | st.sampled_from(
        [
            "os:system",
            "shutil:rmtree",
            "subprocess:run",
            "builtins:exec",
            "/etc/passwd:x",
            "../../x.py:f",
            "edgekit.cli:main",
        ]
    )
)
def test_no_ref_a_foreign_manifest_names_is_imported(tmp_path_factory, ref):
    """Whatever string the manifest holds, an unrecorded bundle imports nothing without --trust-code."""
    root = tmp_path_factory.mktemp("foreign")
    before = set(sys.modules)
    try:
        load_bundle_callable(root, ref, "condition sampler")
    except EdgekitError as exc:
        assert "\n" not in str(exc)
    else:
        assert ref.startswith("edgekit.models.") and ".py:" not in ref  # edgekit's own factories only
    assert {m for m in set(sys.modules) - before if not m.startswith(("edgekit", "encodings"))} == set()
    assert not TRUST_CODE.get()


# ---- the user's own export: runs without the flag, from any directory (issue #31 item 5) ----------
@pytest.fixture
def own(tmp_path, monkeypatch):
    """A factory file that imports a module beside it, exported through the CLI from its folder."""
    src = tmp_path / "src"
    src.mkdir()
    (src / "tiny_helper.py").write_text("from tests.tiny_models import tiny_masked_spec\n")
    (src / "factory.py").write_text(
        textwrap.dedent("""\
        from tiny_helper import tiny_masked_spec

        def make(batch=2):
            return tiny_masked_spec(batch)

        def sampler(rng, batch):
            return {"class_id": rng.integers(0, 3, batch)}
        """)
    )
    monkeypatch.chdir(src)
    r = runner.invoke(app, ["export", "factory.py:make", "-o", str(tmp_path / "own")])
    assert r.exit_code == 0, r.output
    assert str(src) not in sys.path  # the factory's folder was on sys.path only while importing
    sys.modules.pop("tiny_helper", None)
    monkeypatch.chdir(tmp_path)
    return tmp_path / "own"


def test_own_export_runs_torch_from_another_folder_without_the_flag(own, tmp_path):
    r = runner.invoke(app, ["run", str(own), "--runtime", "torch", "--cond", "class_id=1", "--json"])
    assert r.exit_code == 0, r.output
    copy = shutil.copytree(own, tmp_path / "copied")
    r = runner.invoke(app, ["run", str(copy), "--runtime", "torch", "--cond", "class_id=1"])
    assert r.exit_code == 1 and "not exported by you here" in r.stderr and "--trust-code" in r.stderr
    r = runner.invoke(app, ["run", str(copy), "--runtime", "torch", "--cond", "class_id=1", "--trust-code"])
    assert r.exit_code == 0, r.output


def test_changed_factory_file_is_refused(own, tmp_path):
    factory = tmp_path / "src" / "factory.py"
    factory.write_text(factory.read_text() + "\nimport os  # edited after export\n")
    r = runner.invoke(app, ["run", str(own), "--runtime", "torch", "--cond", "class_id=1"])
    assert r.exit_code == 1 and "changed since export" in r.stderr and "re-export" in r.stderr
    assert r.stderr.count("\n") == 1


def test_factory_importing_a_missing_module_names_it(tmp_path):
    (tmp_path / "broken.py").write_text("import not_installed_anywhere_xyz\n\ndef make(batch=2):\n    pass\n")
    r = runner.invoke(app, ["export", f"{tmp_path / 'broken.py'}:make", "-o", str(tmp_path / "b")])
    assert r.exit_code == 1 and "not_installed_anywhere_xyz" in r.stderr and "pip install it" in r.stderr


@pytest.mark.parametrize(
    "ref, suggestion",
    [
        ("masked-dem", "masked-demo"),
        ("{src}/factory.py:mak", "factory.py:make"),
        ("{src}/factroy.py:make", "factory.py"),
    ],
)
def test_mistyped_factory_gets_a_suggestion(own, tmp_path, ref, suggestion):
    r = runner.invoke(app, ["export", ref.format(src=tmp_path / "src"), "-o", str(tmp_path / "x")])
    assert r.exit_code in (1, 2) and "did you mean" in r.stderr and suggestion in r.stderr, r.output
    assert not (tmp_path / "x").exists()
