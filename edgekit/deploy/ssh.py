"""The system's ``ssh``/``scp``/``rsync`` as edgekit drives them: options, host validation, running a
command with a timeout, and failures turned into one-line errors. Host-key checking is never
turned off: an unknown or changed host key is an error that says how to verify it."""

from __future__ import annotations

import re
import shlex
import subprocess
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from edgekit.errors import EdgekitError, TargetUnavailable, UsageError
from edgekit.userfiles import MAX_DOCUMENT_BYTES, check_user_file

# ssh's exit status for its own failures (connection, host key, authentication).
SSH_FAILED = 255


# Everything that reaches the device passes one check (``device_value``): bounded length, no
# control characters, a pattern anchored with \Z (``$`` would let a trailing newline through),
# then travels as a positional parameter of a fixed ``sh -c`` script (``remote_sh``), quoted once
# by shlex: never spliced into shell text. The patterns are narrow on purpose: rsync and scp
# hand remote paths to the device's shell themselves on older versions.
MAX_ARG_CHARS = 4096
MAX_ARGS = 64
# [user@]host: a user and a host name (or [IPv6]) that start with a letter, digit or "_" (never
# "-": ssh would read an option; never "." alone), 32 and 253 characters at most.
HOST_RE = re.compile(
    r"(?:[A-Za-z0-9_][A-Za-z0-9._-]{0,31}@)?(?:[A-Za-z0-9_][A-Za-z0-9._-]{0,252}|\[[0-9A-Fa-f:.]{2,45}\])\Z"
)
# A path on the device: "~", "~/...", "/..." or relative, of letters, digits and ._/+@%,=- (no
# spaces, quotes, $, `, ;, newlines: nothing a shell would read), not starting with "-".
REMOTE_PATH_RE = re.compile(r"(?:~(?=/|\Z)|/|[A-Za-z0-9._+@%,=])[A-Za-z0-9._/+@%,=-]{0,1023}\Z")
# A plain name (a bundle folder, a target, a precision, a command): no "/", not "." or "..".
NAME_RE = re.compile(r"(?!\.{1,2}\Z)[A-Za-z0-9_.+@%,=][A-Za-z0-9_.+@%,=-]{0,127}\Z")
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")
_RULES: dict[str, tuple[re.Pattern[str] | None, str]] = {
    "host": (HOST_RE, "[user@]hostname (letters, digits, '.', '_', '-'; not starting with '-' or '.')"),
    "path": (
        REMOTE_PATH_RE,
        "a path of letters, digits and ._/+@%,=- (~/ for the home folder; not starting with '-'; "
        "at most 1024 characters)",
    ),
    "name": (NAME_RE, "a plain name of letters, digits and ._+@%,=- (not starting with '-'; at most 128 characters)"),
    "arg": (None, f"an argument without control characters, at most {MAX_ARG_CHARS} characters"),
}


def device_value(what: str, value: str, rule: str) -> str:
    """``value`` if it may reach the device as rule ``rule`` ("host", "path", "name", "arg") says;
    else a UsageError naming ``what`` (e.g. "--remote-dir"), the value and what is valid."""
    pattern, valid = _RULES[rule]
    if not isinstance(value, str):
        raise UsageError(f"{what} {value!r} is not text; valid: {valid}")
    if not value and rule != "arg":
        raise UsageError(f"{what} is empty; valid: {valid}")
    shown = repr(value) if len(value) <= 80 else repr(value[:77]) + "..."
    if len(value) > MAX_ARG_CHARS or _CONTROL.search(value) or (pattern is not None and not pattern.match(value)):
        raise UsageError(f"{what} {shown} is not {valid}", hint="nothing was sent to the device")
    return value


def device_args(what: str, values: Sequence[str]) -> list[str]:
    """Extra arguments for the device's command: each checked as ``device_value(..., "arg")``."""
    if len(values) > MAX_ARGS:
        raise UsageError(f"{what}: {len(values)} arguments, more than deploy passes ({MAX_ARGS})")
    return [device_value(f"{what} argument {i + 1}", v, "arg") for i, v in enumerate(values)]


def remote_sh(script: str, *args: str) -> str:
    """The command line ssh sends: the fixed POSIX ``script`` run by ``sh -c`` with ``args`` as
    its positional parameters ($1, $2, ...), each quoted once. The device's login shell only
    unquotes them; ``script`` must never contain a value (it is a constant of this package)."""
    return shlex.join(["sh", "-c", script, "edgekit-deploy", *args])


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
            if value is not None:  # ssh reads them: a regular file of bounded size, never a FIFO it would block on
                check_user_file(value, f"--{name.replace('_', '-')}", max_bytes=MAX_DOCUMENT_BYTES)

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
    try:
        return device_value("--host", host, "host")
    except UsageError:
        shown = repr(host) if len(str(host)) <= 80 else repr(host[:77]) + "..."
        raise UsageError(
            f"--host {shown} is not [user@]hostname", hint="e.g. --host pi@raspberrypi.local or --host root@192.0.2.10"
        ) from None


def ssh_failure(host: str, opts: SshOptions, stderr: str, doing: str) -> EdgekitError:
    text = stderr.strip()
    last = next((line for line in reversed(text.splitlines()) if line.strip()), "no message from ssh")
    port = f"-p {opts.port} " if opts.port else ""
    if "Host key verification failed" in text or "REMOTE HOST IDENTIFICATION HAS CHANGED" in text:
        name = host.split("@")[-1]
        hint = (
            f"verify the device's host key fingerprint, then accept it once with `ssh {port}{host}` "
            f"(or add `ssh-keyscan {port}{name}` output to known_hosts after comparing it);"
            " edgekit never skips the check"
        )
        return TargetUnavailable(
            f"ssh to {host} refused: the device's host key is unknown or changed ({last})", hint=hint
        )
    if "Permission denied" in text:
        return TargetUnavailable(
            f"ssh to {host} refused the login ({last})",
            hint=f"pass --identity KEY, or install your key with `ssh-copy-id {port}{host}`",
        )
    return TargetUnavailable(
        f"ssh to {host} failed while {doing}: {last}",
        hint=f"check that the device is up and sshd listens (`ssh {port}{host} true`)",
    )


def run_command(
    argv: Sequence[str], *, timeout: float | None = None, on_stderr: Callable[[str], None] | None = None
) -> tuple[int, str, str]:
    """Run ``argv``; ``(exit code, stdout, stderr)``, stderr lines passed to ``on_stderr`` as
    they come (a device's progress shows while it works)."""
    proc = subprocess.Popen(
        list(argv), stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
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
