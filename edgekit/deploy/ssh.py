"""The system's ``ssh``/``scp``/``rsync`` as edgekit drives them: options, host validation, running a
command with a timeout, and failures turned into one-line errors. Host-key checking is never
turned off: an unknown or changed host key is an error that says how to verify it."""

from __future__ import annotations

import re
import shlex
import subprocess
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Sequence

from edgekit.errors import EdgekitError, TargetUnavailable, UsageError

# ssh's exit status for its own failures (connection, host key, authentication).
SSH_FAILED = 255


HOST_RE = re.compile(r"^(?:[A-Za-z0-9._-]+@)?(?:[A-Za-z0-9._-]+|\[[0-9A-Fa-f:.]+\])$")


class RemoteCommandFailed(EdgekitError):
    """edgekit on the device exited with an error; the exit code is the device's."""

    def __init__(self, message: str, exit_code: int, hint: str | None = None):
        super().__init__(message, hint)
        self.exit_code = exit_code if exit_code in (1, 2, 3, 4) else 1


@dataclass(frozen=True)
class SshOptions:
    # None = what ssh would use (~/.ssh/config, else 22).
    port: int | None = None
    # Private key to offer (only that one: IdentitiesOnly); None = ssh's defaults and agent.
    identity: Path | None = None
    # known_hosts to verify the device against; None = ~/.ssh/known_hosts, as ssh always does.
    known_hosts: Path | None = None
    # An ssh_config to read instead of ~/.ssh/config (-F); None = the user's own.
    config: Path | None = None
    # Seconds to wait for the TCP connection (a powered-off board should fail fast).
    connect_timeout_s: int = 15

    def __post_init__(self) -> None:
        if self.port is not None and not 1 <= self.port <= 65535:
            raise UsageError(f"--port {self.port} is invalid; valid: 1..65535")
        for name in ("identity", "known_hosts", "config"):
            value = getattr(self, name)
            if value is not None and not Path(value).is_file():
                raise UsageError(f"--{name.replace('_', '-')} {value} does not exist", hint="pass an existing file")

    def ssh_args(self) -> list[str]:
        """Options shared by ssh and scp (ssh spells the port -p, scp -P: added by the callers).
        BatchMode: never wait on a password or host-key prompt hidden behind edgekit's output;
        an unknown host key then fails, as StrictHostKeyChecking=ask would for a script."""
        args = ["-o", "BatchMode=yes", "-o", f"ConnectTimeout={self.connect_timeout_s}"]
        if self.config is not None:
            args = ["-F", str(self.config), *args]
        if self.identity is not None:
            args += ["-i", str(self.identity), "-o", "IdentitiesOnly=yes"]
        if self.known_hosts is not None:
            args += ["-o", f"UserKnownHostsFile={self.known_hosts}"]
        return args

    def ssh_command(self) -> list[str]:
        return ["ssh", *self.ssh_args(), *(["-p", str(self.port)] if self.port else [])]

    def scp_command(self) -> list[str]:
        return ["scp", "-q", "-r", *self.ssh_args(), *(["-P", str(self.port)] if self.port else [])]


def check_host(host: str) -> str:
    """``host`` ([user@]name or [IPv6]) or a UsageError; never something ssh would read as an option."""
    if not host or host.startswith("-") or not HOST_RE.match(host):
        raise UsageError(f"--host {host!r} is not [user@]hostname", hint="e.g. --host pi@raspberrypi.local or --host root@192.0.2.10")
    return host


def ssh_failure(host: str, opts: SshOptions, stderr: str, doing: str) -> EdgekitError:
    text = stderr.strip()
    last = next((line for line in reversed(text.splitlines()) if line.strip()), "no message from ssh")
    port = f"-p {opts.port} " if opts.port else ""
    if "Host key verification failed" in text or "REMOTE HOST IDENTIFICATION HAS CHANGED" in text:
        name = host.split("@")[-1]
        hint = (
            f"verify the device's host key fingerprint, then accept it once with `ssh {port}{host}` "
            f"(or add `ssh-keyscan {port}{name}` output to known_hosts after comparing it); edgekit never skips the check"
        )
        return TargetUnavailable(f"ssh to {host} refused: the device's host key is unknown or changed ({last})", hint=hint)
    if "Permission denied" in text:
        return TargetUnavailable(f"ssh to {host} refused the login ({last})", hint=f"pass --identity KEY, or install your key with `ssh-copy-id {port}{host}`")
    return TargetUnavailable(f"ssh to {host} failed while {doing}: {last}", hint=f"check that the device is up and sshd listens (`ssh {port}{host} true`)")


def run_command(argv: Sequence[str], *, timeout: float | None = None, on_stderr: Callable[[str], None] | None = None) -> tuple[int, str, str]:
    """Run ``argv``; ``(exit code, stdout, stderr)``, stderr lines passed to ``on_stderr`` as
    they come (a device's progress shows while it works)."""
    proc = subprocess.Popen(list(argv), stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    out: list[str] = []
    err: list[str] = []

    def pump_out() -> None:
        out.append(proc.stdout.read())

    def pump_err() -> None:
        for line in proc.stderr:
            err.append(line)
            if on_stderr is not None:
                on_stderr(line.rstrip("\n"))

    readers = [threading.Thread(target=pump_out, daemon=True), threading.Thread(target=pump_err, daemon=True)]
    for reader in readers:
        reader.start()
    try:
        code = proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
        raise EdgekitError(f"`{shlex.join(argv[:3])} …` ran past {timeout} s and was stopped") from None
    for reader in readers:
        reader.join(timeout=10)
    return code, "".join(out), "".join(err)
