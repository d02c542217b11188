"""`edgekit deploy`: copy a bundle to a device over SSH and run edgekit there.

On the device it checks that ``edgekit`` is installed (else the exact install line for that
target), builds the engines that must be built there (TensorRT; this-CPU ONNX Runtime models),
runs ``edgekit profile`` (or ``run``/``check``) with ``--json``, and brings the JSON document and
any report files back."""

from __future__ import annotations

import json
import re
import shlex
import shutil
import tempfile
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from edgekit.builder import build_bundle, builds_on_device
from edgekit.bundle import Bundle
from edgekit.deploy.pack import stage_bundle
from edgekit.deploy.ssh import (
    SSH_FAILED,
    RemoteCommandFailed,
    SshOptions,
    check_host,
    device_args,
    device_value,
    remote_sh,
    run_command,
    ssh_failure,
)
from edgekit.errors import EdgekitError, TargetUnavailable, UsageError, one_of
from edgekit.targets import Target, load_target

DEPLOY_SCHEMA = "edgekit.deploy/1"


COMMANDS: tuple[str, ...] = ("profile", "run", "check")


TRANSFERS: tuple[str, ...] = ("auto", "rsync", "scp")


# Where `edgekit deploy` looks for edgekit on the device when not told: PATH, then the venvs
# the targets' install lines create.
REMOTE_EDGEKIT = ("edgekit", "~/.venvs/edgekit/bin/edgekit", "~/.local/bin/edgekit")


REPORTS_DIR = "reports"


# The device-side check, in POSIX sh: find edgekit, see what its commands accept, prepare the
# folders. Arguments: remote dir, bundle name, command, then the edgekit candidates. Its facts
# come after a marker line (a chatty login shell may print before it), one KEY=VALUE a line,
# printed with printf '%s' (a value is never read as a format or an echo option).
_PREFLIGHT = r"""
expand() {
  case "$1" in "~") printf '%s\n' "$HOME";; "~/"*) printf '%s\n' "$HOME/${1#??}";; *) printf '%s\n' "$1";; esac
}
dir=$(expand "$1"); name=$2; cmd=$3; shift 3
found=""
for c in "$@"; do c=$(expand "$c"); if command -v "$c" >/dev/null 2>&1; then found=$(command -v "$c"); break; fi; done
echo "---EDGEKIT-PREFLIGHT---"
[ -n "$found" ] || { echo "EDGEKIT_MISSING=1"; exit 0; }
mkdir -p -- "$dir/reports" && dir=$(cd -- "$dir" && pwd) || exit 1
if [ -e "$dir/$name" ] && [ ! -f "$dir/$name/edgekit.json" ]; then printf 'NOT_A_BUNDLE=%s\n' "$dir/$name"; exit 0; fi
printf 'EDGEKIT=%s\n' "$found"
printf 'DIR=%s\n' "$dir"
printf 'RSYNC=%s\n' "$(command -v rsync || true)"
if "$found" build --help >/dev/null 2>&1; then echo "HAS_BUILD=1"; else echo "HAS_BUILD=0"; fi
echo "---HELP---"
"$found" "$cmd" --help 2>&1 || true
"""
_PREFLIGHT_START, _PREFLIGHT_HELP = "---EDGEKIT-PREFLIGHT---", "---HELP---"
# The facts the preflight prints: exactly one of these key sets, each key once.
_PREFLIGHT_FORMS = ({"EDGEKIT_MISSING"}, {"NOT_A_BUNDLE"}, {"EDGEKIT", "DIR", "RSYNC", "HAS_BUILD"})

# Run edgekit in a fresh working folder: $1 the folder, the rest the command.
_IN_WORKDIR = 'rm -rf -- "$1" && mkdir -p -- "$1" && cd -- "$1" && shift && exec "$@"'
# Replace the bundle folder $1 with the upload $2.
_SWAP = 'rm -rf -- "$1" && mv -- "$2" "$1"'


@dataclass(frozen=True)
class _Device:
    edgekit: str
    dir: str
    rsync: bool
    has_build: bool
    help: str

    def accepts(self, option: str) -> bool:
        return re.search(rf"(^|[\s,│|]){re.escape(option)}([\s,=│|]|$)", self.help, re.MULTILINE) is not None


def deploy(
    bundle: str | Path,
    host: str,
    target: str | Path | Target = "cpu",
    command: str = "profile",
    *,
    ssh: SshOptions = SshOptions(),
    precision: str | None = None,
    args: Sequence[str] = (),
    remote_dir: str = "~/edgekit-deploy",
    remote_edgekit: str | None = None,
    out_dir: str | Path | None = None,
    transfer: str = "auto",
    rebuild: bool = False,
    on_stderr: Callable[[str], None] | None = None,
    timeout_s: float | None = None,
) -> dict[str, Any]:
    """Copy ``bundle`` (what ``target`` needs) to ``host`` and run ``edgekit COMMAND`` there.

    Engines that must be built on the device (TensorRT; this-CPU ORT models) are built there;
    portable ORT models are built here first, as `edgekit build` would, and travel with the
    bundle. ``precision`` (default: the target's first) is what is built, and what
    ``run``/``profile`` are told to run; ``args`` go to the device's command as they
    are. ``out_dir``: where the device's JSON document and report files (written in the remote
    run's working folder, e.g. ``--html html`` or ``-o out.npz``) come back to; None = only
    return the document. Returns the ``edgekit deploy --json`` document (``edgekit.deploy/1``)
    with the device's document under ``report`` and its exit code (0, or 4 when a check failed).
    """
    one_of("--command", command, COMMANDS)
    one_of("transfer", transfer, TRANSFERS)
    # Every value that reaches the device, checked before anything runs here or there.
    check_host(host)
    device_value("--remote-dir", remote_dir, "path")
    if remote_edgekit is not None:
        device_value("--remote-edgekit", remote_edgekit, "path")
    args = device_args("the device command's", list(args))
    b = Bundle.load(bundle)
    tgt = load_target(target)
    precision = precision or tgt.precisions[0]
    if precision not in tgt.precisions:
        raise UsageError(
            f"--precision {precision!r} is not one target {tgt.name} runs; valid: {', '.join(tgt.precisions)}"
        )
    device_value("the target name", tgt.name, "name")
    device_value("--precision", precision, "name")
    device_value(f"the bundle folder name of {b.root}", b.root.resolve().name, "name")
    for tool in ("ssh", "scp"):
        if shutil.which(tool) is None:
            raise TargetUnavailable(
                f"`{tool}` is not on PATH", hint="install OpenSSH's client (apt-get install openssh-client)"
            )
    warnings: list[str] = []
    on_device = builds_on_device(tgt)
    local_build = None
    if not on_device:
        local_build = build_bundle(b, tgt, precision, rebuild=rebuild)
        b = Bundle.load(b.root)
    name = b.root.resolve().name

    device = _preflight(host, ssh, tgt, remote_dir, name, command, remote_edgekit)
    with tempfile.TemporaryDirectory(prefix="edgekit-deploy-") as tmp:
        staged = stage_bundle(b, Path(tmp) / name, tgt, engines=not on_device)
        used = _copy_bundle(host, ssh, device, Path(tmp) / name, name, transfer)
    remote_bundle = f"{device.dir}/{name}"

    remote_build = None
    if on_device and device.has_build:
        remote_build = _remote_json(
            host,
            ssh,
            [device.edgekit, "build", remote_bundle, "--target", tgt.name, "--precision", precision, "--json"],
            "building the engine on the device",
            on_stderr,
            timeout_s,
        )[1]
    elif on_device:
        warnings.append(
            f"the device's edgekit has no `build` command: {command} runs on the bundle's ONNX (upgrade edgekit there)"
        )

    argv = [device.edgekit, command, remote_bundle]
    if device.accepts("--target"):
        argv += ["--target", tgt.name]
    else:
        warnings.append(f"the device's `edgekit {command}` has no --target option: it ran without target {tgt.name}")
    if command in ("run", "profile") and device.accepts("--precision"):
        argv += ["--precision", precision]
    if command == "profile" and device.accepts("--html") and "--html" not in args:
        argv += ["--html", "html"]  # into the run's working folder, which comes back
    argv += [*args, "--json"]
    reports = f"{device.dir}/{REPORTS_DIR}/{name}-{command}"
    code, report = _remote_json(
        host, ssh, argv, f"running edgekit {command}", on_stderr, timeout_s, cwd=reports, allow_codes=(0, 4)
    )

    fetched: list[str] = []
    if out_dir is not None:
        out = Path(out_dir)
        out.mkdir(parents=True, exist_ok=True)
        (out / f"{command}.json").write_text(json.dumps(report, indent=2) + "\n")
        fetched = [str(out / f"{command}.json"), *_fetch_reports(host, ssh, reports, out / "files", used)]
    return {
        "schema": DEPLOY_SCHEMA,
        "host": host,
        "target": tgt.name,
        "command": command,
        "precision": precision,
        "exit_code": code,
        "remote": {
            "edgekit": device.edgekit,
            "bundle": remote_bundle,
            "workdir": reports,
            "argv": argv,
            "transfer": used,
        },
        "copied": staged,
        "build": {"where": "device" if on_device else "here", "local": local_build, "device": remote_build},
        "report": report,
        "fetched": fetched,
        "warnings": warnings,
    }


def _preflight(
    host: str, ssh: SshOptions, target: Target, remote_dir: str, name: str, command: str, remote_edgekit: str | None
) -> _Device:
    candidates = [remote_edgekit] if remote_edgekit else list(REMOTE_EDGEKIT)
    script = remote_sh(_PREFLIGHT, remote_dir, name, command, *candidates)
    code, out, err = run_command([*ssh.ssh_command(), "--", host, script], timeout=120)
    if code == SSH_FAILED:
        raise ssh_failure(host, ssh, err, "checking the device")
    if code != 0:
        said = err.strip().splitlines()[-1] if err.strip() else out.strip()[-200:]
        raise EdgekitError(f"preparing {remote_dir} on {host} failed (exit {code}): {said}")
    facts, help_text = parse_preflight(out, host)
    if "EDGEKIT_MISSING" in facts:
        looked = ", ".join(candidates)
        raise TargetUnavailable(
            f"edgekit is not installed on {host} (looked for {looked})",
            hint=f"install it there with: {target.install}"
            + ("" if remote_edgekit else " (or pass --remote-edgekit PATH)"),
        )
    if "NOT_A_BUNDLE" in facts:
        raise UsageError(
            f"{facts['NOT_A_BUNDLE']} on {host} exists and is not an edgekit bundle; deploy will not replace it",
            hint="pass another --remote-dir, or move that folder away",
        )
    # What the device said is used in later commands and rsync/scp paths: the same rules as ours.
    device_value(f"the edgekit {host} has", facts["EDGEKIT"], "path")
    device_value(f"the folder {host} resolved --remote-dir to", facts["DIR"], "path")
    return _Device(facts["EDGEKIT"], facts["DIR"], bool(facts["RSYNC"]), facts["HAS_BUILD"] == "1", help_text)


def parse_preflight(out: str, host: str) -> tuple[dict[str, str], str]:
    """(facts, the device command's --help) of the preflight's output, strictly: after the marker
    line, KEY=VALUE lines of exactly one expected key set (``_PREFLIGHT_FORMS``), each key once,
    then the help. Anything else (a value carrying a line of its own, a key twice, an unknown
    key) is refused: a device answer that does not parse is never half-used."""
    lines = out.split("\n")
    if _PREFLIGHT_START not in lines:
        raise EdgekitError(
            f"the check on {host} printed no answer ({out.strip()[-200:]!r})",
            hint=f"run `ssh {host} sh -c true` to see what its login shell prints",
        )
    body = lines[lines.index(_PREFLIGHT_START) + 1 :]
    if _PREFLIGHT_HELP in body:
        end = body.index(_PREFLIGHT_HELP)
    else:  # an answer that ends early (edgekit missing, not a bundle): its final newline
        body = body[:-1] if body and body[-1] == "" else body
        end = len(body)
    facts: dict[str, str] = {}
    for line in body[:end]:
        key, sep, value = line.partition("=")
        if not sep or key in facts or not any(key in form for form in _PREFLIGHT_FORMS):
            raise EdgekitError(
                f"the check on {host} answered {line[:120]!r}, which is not one of its facts; nothing was run",
                hint="a --remote-dir or edgekit path with unusual characters on the device can cause this",
            )
        facts[key] = value
    if set(facts) not in _PREFLIGHT_FORMS:
        raise EdgekitError(
            f"the check on {host} answered {', '.join(sorted(facts)) or 'nothing'}; expected "
            f"{' or '.join('+'.join(sorted(f)) for f in _PREFLIGHT_FORMS)}; nothing was run"
        )
    return facts, "\n".join(body[end + 1 :])


def _copy_bundle(host: str, ssh: SshOptions, device: _Device, staged: Path, name: str, transfer: str) -> str:
    """Replace ``<dir>/<name>`` on the device with ``staged``; the tool used (rsync or scp)."""
    target_dir = f"{device.dir}/{name}"
    use_rsync = transfer == "rsync" or (transfer == "auto" and device.rsync and shutil.which("rsync") is not None)
    if transfer == "rsync" and (not device.rsync or shutil.which("rsync") is None):
        raise TargetUnavailable(
            "rsync is missing " + ("on the device" if not device.rsync else "here"),
            hint="install rsync, or pass --transfer scp",
        )
    if use_rsync:
        # -s: the remote path travels inside rsync's protocol, not through the device's shell.
        argv = [
            "rsync",
            "-a",
            "-s",
            "--delete",
            "-e",
            shlex.join(ssh.ssh_command()),
            f"{staged}/",
            f"{host}:{target_dir}/",
        ]
        code, _, err = run_command(argv)
        if code != 0:
            # rsync exits 255 or 12 (protocol stream ended) when its ssh transport fails.
            if code in (SSH_FAILED, 12):
                raise ssh_failure(host, ssh, err, "copying the bundle with rsync")
            raise EdgekitError(f"rsync to {host}:{target_dir} failed (exit {code}): {err.strip()[-300:]}")
        return "rsync"
    upload = f"{device.dir}/.edgekit-upload-{uuid.uuid4().hex[:8]}"
    code, _, err = run_command([*ssh.scp_command(), str(staged), f"{host}:{upload}"])
    if code != 0:
        raise ssh_failure(host, ssh, err, "copying the bundle with scp")
    code, _, err = run_command([*ssh.ssh_command(), "--", host, remote_sh(_SWAP, target_dir, upload)], timeout=120)
    if code != 0:
        raise ssh_failure(host, ssh, err, "moving the copied bundle into place")
    return "scp"


def _remote_json(
    host: str,
    ssh: SshOptions,
    argv: Sequence[str],
    doing: str,
    on_stderr: Callable[[str], None] | None,
    timeout: float | None,
    *,
    cwd: str | None = None,
    allow_codes: Sequence[int] = (0,),
) -> tuple[int, dict[str, Any]]:
    """Run edgekit ``argv`` on the device (in ``cwd``, made fresh) and parse its one JSON document."""
    line = remote_sh(_IN_WORKDIR, cwd, *argv) if cwd is not None else remote_sh('exec "$@"', *argv)
    code, out, err = run_command([*ssh.ssh_command(), "--", host, line], timeout=timeout, on_stderr=on_stderr)
    if code == SSH_FAILED:
        raise ssh_failure(host, ssh, err, doing)
    # The last line with words (typer frames usage errors in box-drawing lines).
    last = next((ln.strip(" │|") for ln in reversed(err.splitlines()) if re.search(r"\w", ln)), "")
    if code not in allow_codes:
        raise RemoteCommandFailed(
            f"{doing} on {host} failed (exit {code}): {last or out.strip()[-300:] or 'no output'}",
            code,
            hint=f"run it there to see more: ssh {host} {shlex.quote(line)}",
        )
    try:
        doc = json.loads(out)
    except json.JSONDecodeError:
        raise EdgekitError(f"{doing} on {host} printed no JSON document ({out.strip()[:200]!r}; {last})") from None
    return code, doc


def _fetch_reports(host: str, ssh: SshOptions, remote: str, local: Path, used: str) -> list[str]:
    """Bring back the files the device's command wrote in its working folder."""
    if local.exists():
        shutil.rmtree(local)
    if used == "rsync":
        argv = ["rsync", "-a", "-s", "-e", shlex.join(ssh.ssh_command()), f"{host}:{remote}/", f"{local}/"]
    else:
        argv = [*ssh.scp_command(), f"{host}:{remote}", str(local)]
    code, _, err = run_command(argv)
    if code != 0:
        raise ssh_failure(host, ssh, err, "fetching the reports")
    return sorted(str(p) for p in local.rglob("*") if p.is_file())


__all__ = [
    "COMMANDS",
    "DEPLOY_SCHEMA",
    "RemoteCommandFailed",
    "SshOptions",
    "check_host",
    "deploy",
    "stage_bundle",
]
