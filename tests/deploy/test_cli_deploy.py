"""CLI: `edgekit pack`, `unpack` and `deploy` (commands from /tmp/edgekit-cli/targets.py, merged
into edgekit.cli); deploy goes to the OpenSSH server of conftest.py."""

from __future__ import annotations

import json

from typer.testing import CliRunner

from edgekit.cli import app

runner = CliRunner()


def invoke(*args):
    return runner.invoke(app, [str(a) for a in args], catch_exceptions=False)


def ssh_args(sshd):
    return [
        "--host",
        sshd.host,
        "--port",
        sshd.port,
        "--identity",
        sshd.identity,
        "--known-hosts",
        sshd.known_hosts,
        "--remote-edgekit",
        sshd.edgekit,
    ]


def test_pack_and_unpack(masked, tmp_path):
    out = tmp_path / "m.tar.gz"
    r = invoke("pack", masked, "-o", out, "--target", "rpi5", "--json")
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout)["files"][0] == "edgekit.json"
    r = invoke("unpack", out, "-o", tmp_path / "device")
    assert r.exit_code == 0, r.output
    r = invoke("inspect", tmp_path / "device" / "masked")
    assert r.exit_code == 0 and "verification of fp32: passed" in r.stdout


def test_deploy_run_json(sshd, masked, tmp_path):
    r = invoke(
        "deploy",
        masked,
        *ssh_args(sshd),
        "--target",
        "cpu",
        "--command",
        "run",
        "--remote-dir",
        tmp_path / "device",
        "-o",
        tmp_path / "reports",
        "--json",
        "--",
        "--steps",
        "2",
    )
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)
    assert doc["schema"] == "edgekit.deploy/1" and doc["report"]["kind"] == "masked" and doc["report"]["nfe"] == 2
    assert (
        doc["build"]["where"] == "device" and doc["build"]["device"]["status"] == "built"
    )  # cpu engines are this-CPU: built there


def test_deploy_profile_brings_the_report_back(sshd, masked, tmp_path):
    r = invoke(
        "deploy",
        masked,
        *ssh_args(sshd),
        "--target",
        "cpu",
        "--command",
        "profile",
        "--remote-dir",
        tmp_path / "device",
        "-o",
        tmp_path / "reports",
        "--json",
        "--",
        "--iters",
        "3",
        "--min-seconds",
        "0",
        "--warmup",
        "1",
        "--power",
        "off",
    )
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)
    assert doc["report"]["schema"] == "edgekit.profile/1"
    assert "--html" in doc["remote"]["argv"] and any(
        f.endswith(".html") for f in doc["fetched"]
    )  # the HTML report came back


def test_deploy_without_edgekit_there_prints_the_install_line(sshd, masked, tmp_path):
    args = ssh_args(sshd)
    args[-1] = tmp_path / "missing-edgekit"
    r = invoke("deploy", masked, *args, "--target", "rpi5", "--command", "run", "--remote-dir", tmp_path / "device")
    assert r.exit_code == 3 and "~/.venvs/edgekit/bin/pip install edgekit" in r.output and "Traceback" not in r.output
