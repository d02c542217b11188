"""`edgekit deploy` under injection (issue #45, point 1): a fake ``ssh`` on PATH runs the remote
command through ``sh -c``, as a real ssh hands it to the device's login shell, so a value spliced
into shell text would run there. Every value that reaches the device is checked first
(``deploy.ssh.device_value``), travels as data (positional parameters of a fixed script), and
the preflight's answer is parsed strictly: the attacks below run nothing."""

from __future__ import annotations

import json
import os
import shutil
import stat
from pathlib import Path

import pytest

from edgekit.deploy import deploy
from edgekit.deploy.ssh import remote_sh, run_command
from edgekit.deploy.stage import parse_preflight
from edgekit.errors import EdgekitError, UsageError

# A fake ssh: skips its options (those with a value too), logs the call, then does what sshd does
# with the rest: joins the words with spaces and hands them to a shell.
FAKE_SSH = r"""#!/bin/sh
while [ $# -gt 0 ]; do
  case "$1" in
    --) shift; break;;
    -o|-p|-i|-F|-l|-P|-c|-E|-L|-R|-D|-J|-b|-e|-m|-O|-Q|-S|-W|-w) shift 2;;
    -*) shift;;
    *) break;;
  esac
done
host=$1; shift
printf '%s\n' "$*" >> "$FAKE_SSH_LOG"
exec sh -c "$*"
"""
# A fake scp: host:path is the local path (the "device" is this machine).
FAKE_SCP = r"""#!/bin/sh
while [ $# -gt 2 ]; do
  case "$1" in -o|-P|-i|-F|-l|-c|-S) shift 2;; *) shift;; esac
done
src=${1#*:}; dest=${2#*:}
exec cp -r "$src" "$dest"
"""
# The device's edgekit: answers --help with the options deploy looks for, records every other
# call's argv as JSON lines, prints one JSON document.
FAKE_EDGEKIT = r"""#!/usr/bin/env python3
import json, os, sys
if "--help" in sys.argv:
    print("Usage: edgekit COMMAND  --target TEXT  --precision TEXT  --html PATH  --json")
    sys.exit(0)
with open(os.environ["FAKE_EDGEKIT_LOG"], "a") as log:
    log.write(json.dumps(sys.argv[1:]) + "\n")
print(json.dumps({"schema": "fake/1", "argv": sys.argv[1:]}))
"""


def _script(path: Path, text: str) -> Path:
    path.write_text(text)
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return path


@pytest.fixture
def fake_device(tmp_path, monkeypatch):
    """PATH with the fake ssh/scp first (no rsync: deploy copies with scp); returns the paths."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    _script(bin_dir / "ssh", FAKE_SSH)
    _script(bin_dir / "scp", FAKE_SCP)
    edgekit = _script(tmp_path / "device-edgekit", FAKE_EDGEKIT)
    logs = {"ssh": tmp_path / "ssh.log", "edgekit": tmp_path / "edgekit.log"}
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("FAKE_SSH_LOG", str(logs["ssh"]))
    monkeypatch.setenv("FAKE_EDGEKIT_LOG", str(logs["edgekit"]))
    evil = _script(tmp_path / "evil.sh", f"#!/bin/sh\ntouch {tmp_path / 'PWNED'}\necho '{{}}'\n")
    return {"root": tmp_path, "edgekit": str(edgekit), "logs": logs, "evil": evil, "pwned": tmp_path / "PWNED"}


@pytest.fixture
def bundle(tiny_bundles, tmp_path):
    return Path(shutil.copytree(tiny_bundles["masked"], tmp_path / "masked"))


def _deploy(bundle, dev, **kw):
    kw = {"remote_dir": str(dev["root"] / "device"), "remote_edgekit": dev["edgekit"], "transfer": "scp"} | kw
    return deploy(bundle, kw.pop("host", "pi@dev"), "android-arm64", kw.pop("command", "run"), **kw)


def _calls(dev) -> list[list[str]]:
    log = dev["logs"]["edgekit"]
    return [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []


def test_the_fake_device_runs_a_clean_deploy(fake_device, bundle):
    """The harness itself works: a plain deploy goes through the fake ssh and runs the command."""
    doc = _deploy(bundle, fake_device, args=["--steps", "2"])
    assert doc["exit_code"] == 0 and doc["report"]["schema"] == "fake/1"
    assert _calls(fake_device)[-1][:2] == ["run", str(fake_device["root"] / "device" / "masked")]
    assert (fake_device["root"] / "device" / "masked" / "edgekit.json").is_file()


def test_the_issues_remote_dir_injection_runs_nothing(fake_device, bundle):
    """`--remote-dir $'/srv/rd\\nEDGEKIT=/srv/evil.sh'`: the injected line replaced the edgekit
    path and deploy ran the attacker's script as `edgekit run`, exit 0."""
    (fake_device["root"] / "rd").mkdir()  # the folder the injected DIR line names exists: the old parser ran evil.sh
    remote = f"{fake_device['root']}/rd\nEDGEKIT={fake_device['evil']}"
    with pytest.raises(UsageError, match="--remote-dir .* is not a path"):
        _deploy(bundle, fake_device, remote_dir=remote)
    assert not fake_device["pwned"].exists() and not fake_device["logs"]["ssh"].exists()  # nothing reached the device


@pytest.mark.parametrize(
    "remote",
    [
        "/tmp/x; touch {pwned}",
        "/tmp/$(touch {pwned})",
        "/tmp/`touch {pwned}`",
        "/tmp/x' ; touch {pwned}; '",
        '/tmp/x" ; touch {pwned}; "',
        "/tmp/x\ntouch {pwned}",
        "-rf",
        "/tmp/x\r",
        "~root/x",
        "/tmp/a b",
        "x" * 2000,
    ],
)
def test_classic_injections_in_remote_paths_are_refused_before_anything_runs(fake_device, bundle, remote):
    remote = remote.format(pwned=fake_device["pwned"])
    for kw in ({"remote_dir": remote}, {"remote_edgekit": remote}):
        with pytest.raises(UsageError):
            _deploy(bundle, fake_device, **kw)
    assert not fake_device["pwned"].exists() and not fake_device["logs"]["ssh"].exists()


@pytest.mark.parametrize(
    "host",
    [
        "pi@dev\n",
        "pi@dev\nx",
        ".",
        "..",
        "pi@-x",
        "-oProxyCommand=touch /tmp/x",
        "pi@dev;id",
        "pi@$(id)",
        "pi@`id`",
        "h" * 100_000,
        "pi@" + "a" * 300,
        "p i@dev",
        "pi@dev'",
        "",
    ],
)
def test_hosts_are_refused_by_an_anchored_bounded_pattern(fake_device, bundle, host):
    with pytest.raises(UsageError, match="is not \\[user@\\]hostname"):
        _deploy(bundle, fake_device, host=host)
    assert not fake_device["logs"]["ssh"].exists()


@pytest.mark.parametrize(
    "arg",
    [
        "; touch {pwned}",
        "$(touch {pwned})",
        "`touch {pwned}`",
        "'; touch {pwned}; '",
        '"; touch {pwned}; "',
        "a b",
        "\\",
        "*",
        "~",
        "--json",
        "ünïcode",
    ],
)
def test_extra_arguments_reach_the_device_command_verbatim_and_run_nothing(fake_device, bundle, arg):
    """Extra options for the device's command may hold any printable text: they arrive as the
    exact argv words they were, through the device's shell, and nothing in them runs."""
    arg = arg.format(pwned=fake_device["pwned"])
    _deploy(bundle, fake_device, args=["--steps", arg])
    assert not fake_device["pwned"].exists()
    argv = _calls(fake_device)[-1]
    assert argv[argv.index("--steps") + 1] == arg


@pytest.mark.parametrize("arg", ["x\ntouch {pwned}", "x\rx", "x\x00", "\x1b[31m", "x" * 5000])
def test_extra_arguments_with_control_characters_or_unbounded_are_refused(fake_device, bundle, arg):
    with pytest.raises(UsageError, match="argument 2 .* is not an argument without control characters"):
        _deploy(bundle, fake_device, args=["--steps", arg.format(pwned=fake_device["pwned"])])
    assert not fake_device["logs"]["ssh"].exists()


def test_remote_sh_passes_values_as_data_through_a_shell(fake_device):
    """The one way a value reaches the device: a positional parameter of a constant script."""
    hostile = [
        "$(touch {p})",
        "`touch {p}`",
        "; touch {p}",
        "' ; touch {p} ; '",
        '" ; touch {p} ; "',
        "a\nb",
        "$HOME",
        "*",
    ]
    hostile = [h.format(p=fake_device["pwned"]) for h in hostile]
    code, out, err = run_command(["ssh", "--", "pi@dev", remote_sh('printf "%s\\0" "$@"', *hostile)])
    assert code == 0, err
    assert out.split("\0")[:-1] == hostile and not fake_device["pwned"].exists()


@pytest.mark.parametrize(
    "answer,why",
    [
        (
            "---EDGEKIT-PREFLIGHT---\nEDGEKIT=/e\nDIR=/rd\nEDGEKIT=/srv/evil.sh\nRSYNC=\nHAS_BUILD=1\n---HELP---\n",
            "twice",
        ),
        ("---EDGEKIT-PREFLIGHT---\nEDGEKIT=/e\nDIR=/rd\nPWNED=1\nRSYNC=\nHAS_BUILD=1\n---HELP---\n", "unknown key"),
        ("---EDGEKIT-PREFLIGHT---\nEDGEKIT=/e\nDIR=/rd\nx\nRSYNC=\nHAS_BUILD=1\n---HELP---\n", "a line without ="),
        ("---EDGEKIT-PREFLIGHT---\nEDGEKIT=/e\nDIR=/rd\n---HELP---\n", "keys missing"),
        ("---EDGEKIT-PREFLIGHT---\nEDGEKIT_MISSING=1\nEDGEKIT=/e\n", "two forms"),
        ("EDGEKIT=/srv/evil.sh\n", "no marker"),
    ],
)
def test_the_preflight_answer_is_parsed_strictly(answer, why):
    with pytest.raises(EdgekitError):
        parse_preflight(answer, "pi@dev")


def test_a_chatty_login_shell_before_the_marker_is_ignored():
    facts, help_text = parse_preflight(
        "Welcome!\nEDGEKIT=/evil\n---EDGEKIT-PREFLIGHT---\nEDGEKIT=/e\nDIR=/rd\nRSYNC=\nHAS_BUILD=0\n"
        "---HELP---\n  --target TEXT\n",
        "pi@dev",
    )
    assert facts == {"EDGEKIT": "/e", "DIR": "/rd", "RSYNC": "", "HAS_BUILD": "0"} and "--target" in help_text
    assert parse_preflight("---EDGEKIT-PREFLIGHT---\nEDGEKIT_MISSING=1\n", "h")[0] == {"EDGEKIT_MISSING": "1"}


def test_a_device_folder_with_a_newline_in_its_resolved_path_is_refused(fake_device, bundle, monkeypatch):
    """A $HOME on the device holding a newline: the resolved DIR fact spans two lines; refused,
    never half-used."""
    home = fake_device["root"] / "home\nEDGEKIT=x"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    with pytest.raises(EdgekitError, match="not one of its facts"):
        _deploy(bundle, fake_device, remote_dir="~/deploy")
    assert _calls(fake_device) == []
