"""`edgekit deploy` against a real OpenSSH server on 127.0.0.1 (see conftest.py): the demo bundle
goes to a temp "device" folder as the current user, edgekit runs there, the report comes back.
Host keys are checked the normal way: an unknown key is refused."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest

from edgekit.deploy import DEPLOY_SCHEMA, SshOptions, check_host, deploy
from edgekit.errors import TargetUnavailable, UsageError
from edgekit.targets import load_target


def options(server, **over) -> SshOptions:
    kw = dict(port=server.port, identity=server.identity, known_hosts=server.known_hosts, config=server.config)
    kw.update(over)
    return SshOptions(**kw)


@pytest.mark.parametrize("transfer", ["scp", "rsync"])
def test_deploy_runs_edgekit_on_the_device_and_brings_the_report_back(sshd, masked, tmp_path, transfer):
    if transfer == "rsync" and shutil.which("rsync") is None:
        pytest.skip("rsync is not installed (apt-get install -y rsync)")
    device, out = tmp_path / "device", tmp_path / "reports"
    remote_lines: list[str] = []
    doc = deploy(
        masked,
        sshd.host,
        "android-arm64",
        "run",
        ssh=options(sshd),
        remote_dir=str(device),
        remote_edgekit=sshd.edgekit,
        out_dir=out,
        transfer=transfer,
        args=["--steps", "4", "-o", "tokens.npz"],
        on_stderr=remote_lines.append,
    )
    assert doc["schema"] == DEPLOY_SCHEMA and doc["exit_code"] == 0 and doc["remote"]["transfer"] == transfer
    report = doc["report"]
    assert report["kind"] == "masked" and report["steps"] == 4 and report["nfe"] == 4
    assert report["bundle"] == str(device / "masked")  # it really ran on the copy
    # Only what android-arm64 needs travelled: manifest, fp32 model, the .ort built here and its config.
    shipped = sorted(p.relative_to(device / "masked").as_posix() for p in (device / "masked").rglob("*") if p.is_file())
    assert shipped == sorted(doc["copied"]["files"]) and len(shipped) == 4
    assert any(p.endswith(".ort") for p in shipped) and doc["build"]["where"] == "here"
    assert json.loads((out / "run.json").read_text()) == report
    tokens = np.load(out / "files" / "tokens.npz")["tokens"]  # the device's -o output came back
    assert tokens.shape == (2, 64)
    assert doc["fetched"] == [str(out / "run.json"), str(out / "files" / "tokens.npz")]


def test_redeploy_replaces_the_bundle(sshd, masked, tmp_path):
    device = tmp_path / "device"
    kw = dict(ssh=options(sshd), remote_dir=str(device), remote_edgekit=sshd.edgekit, args=["--steps", "2"])
    deploy(masked, sshd.host, "android-arm64", "run", transfer="scp", **kw)
    (device / "masked" / "stale.txt").write_text("left by an older deploy")
    doc = deploy(masked, sshd.host, "rpi5", "run", **kw)
    assert not (device / "masked" / "stale.txt").exists()
    assert [p.name for p in (device / "masked" / "engines").iterdir()] == ["rpi5"]  # built here; no android engine
    assert doc["report"]["nfe"] == 2


def test_missing_edgekit_gives_the_targets_install_line(sshd, masked, tmp_path):
    with pytest.raises(TargetUnavailable) as err:
        deploy(
            masked,
            sshd.host,
            "rpi5",
            "run",
            ssh=options(sshd),
            remote_dir=str(tmp_path / "d"),
            remote_edgekit=str(tmp_path / "no-edgekit"),
        )
    assert f"edgekit is not installed on {sshd.host}" in str(err.value)
    assert load_target("rpi5").install in str(err.value)
    assert err.value.exit_code == 3


def test_unknown_host_key_is_refused(sshd, masked, tmp_path):
    empty = tmp_path / "known_hosts"
    empty.write_text("")
    with pytest.raises(TargetUnavailable) as err:
        deploy(
            masked,
            sshd.host,
            "rpi5",
            "run",
            ssh=options(sshd, known_hosts=empty),
            remote_dir=str(tmp_path / "d"),
            remote_edgekit=sshd.edgekit,
        )
    assert "host key is unknown or changed" in str(err.value) and f"ssh -p {sshd.port} {sshd.host}" in str(err.value)
    assert not (tmp_path / "d").exists()  # nothing ran on the device


def test_a_folder_that_is_not_a_bundle_is_never_replaced(sshd, masked, tmp_path):
    device = tmp_path / "device"
    (device / "masked").mkdir(parents=True)
    (device / "masked" / "precious.txt").write_text("mine")
    with pytest.raises(UsageError, match="exists and is not an edgekit bundle"):
        deploy(masked, sshd.host, "rpi5", "run", ssh=options(sshd), remote_dir=str(device), remote_edgekit=sshd.edgekit)
    assert (device / "masked" / "precious.txt").read_text() == "mine"


def test_ssh_options_keep_host_key_checking(tmp_path):
    key = tmp_path / "k"
    key.write_text("")
    argv = SshOptions(port=2222, identity=key, known_hosts=key, config=key).ssh_command()
    assert not any("StrictHostKeyChecking" in a for a in argv)
    assert argv[:3] == ["ssh", "-F", str(key)] and "BatchMode=yes" in argv and argv[-2:] == ["-p", "2222"]
    assert "-P" in SshOptions(port=2222).scp_command()


@pytest.mark.parametrize("host", ["-oProxyCommand=touch /tmp/x", "user@host; rm -rf /", "", "a b"])
def test_hosts_that_ssh_would_read_as_options_are_refused(host):
    with pytest.raises(UsageError, match="is not \\[user@\\]hostname"):
        check_host(host)
    assert check_host("pi@raspberrypi.local") == "pi@raspberrypi.local"
