"""Paths a stage writes stay inside the bundle (issue #19, item 3): a target TOML's ``name`` is a
plain slug, and the engine folder is checked against the bundle root whatever the name."""

import dataclasses
import shutil

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from edgekit.cli import app
from edgekit.errors import BundleError, EdgekitError
from edgekit.targets import load_target, parse_target

runner = CliRunner()


def _cpu_toml(name: str) -> str:
    from importlib import resources

    text = resources.files("edgekit.targets").joinpath("cpu.toml").read_text()
    return text.replace('name = "cpu"', f"name = {name}")


@pytest.mark.parametrize(
    "name",
    [
        '"../../../escaped"',
        '"/tmp/abs-escaped"',
        '".."',
        '"."',
        '"a/b"',
        '""',
        '"\\u001b[31mred"',
        '"x\\u0000y"',
        '"' + "a" * 65 + '"',
    ],
)
def test_unsafe_target_names_are_refused_before_building(tiny_bundles, tmp_path, name):
    bundle = shutil.copytree(tiny_bundles["masked"], tmp_path / "box" / "masked")
    toml = tmp_path / "evil.toml"
    toml.write_text(_cpu_toml(name))
    r = runner.invoke(app, ["build", str(bundle), "--target", str(toml)])
    assert r.exit_code == 2, r.output
    assert "is not a plain name" in r.stderr and "Traceback" not in r.output and r.stderr.count("\n") == 1
    assert sorted(p.name for p in (tmp_path / "box").iterdir()) == ["masked"]
    assert not (bundle / "engines").exists()


def test_engine_folder_is_checked_even_for_a_target_built_in_code(tiny_bundles, tmp_path):
    from edgekit.builder import build_bundle

    bundle = shutil.copytree(tiny_bundles["masked"], tmp_path / "box" / "masked")
    evil = dataclasses.replace(load_target("cpu"), name="../../escaped")
    with pytest.raises(BundleError, match="outside the bundle"):
        build_bundle(bundle, evil)
    assert sorted(p.name for p in (tmp_path / "box").iterdir()) == ["masked"]
    assert not (tmp_path / "escaped").exists()


@settings(max_examples=80, deadline=None, database=None)
@given(name=st.text(max_size=12))
def test_any_name_is_a_slug_or_one_clean_error(name):
    text = _cpu_toml('"' + name.replace("\\", "\\\\").replace('"', '\\"') + '"')
    try:
        target = parse_target(text, "fuzz.toml")
    except EdgekitError as exc:
        assert "\n" not in str(exc)
        return
    assert target.name not in (".", "..") and "/" not in target.name and target.name.isprintable()


def test_deeply_nested_toml_is_one_clean_error():
    with pytest.raises(EdgekitError) as info:
        parse_target("a = " + "[" * 5000 + "]" * 5000, "deep.toml")
    assert "\n" not in str(info.value)
