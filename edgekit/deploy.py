"""Ship a bundle to a device and run edgekit there: `edgekit pack` and `edgekit deploy`.

``pack_bundle`` writes a tarball with only what a target needs (the manifest, the models of the
precisions it runs, its engines); ``safe_extract`` unpacks one and refuses any member that
would land outside the destination. ``deploy`` uses the system's ``ssh`` and ``scp`` (``rsync``
when both ends have it) with ssh's normal host-key verification: it never turns checking off,
and an unknown or changed host key is an error that says how to verify it. On the device it
checks that ``edgekit`` is installed (else the exact install line for that target), builds the
engines that must be built there (TensorRT; this-CPU ONNX Runtime models), runs ``edgekit
profile`` (or ``run``/``check``) with ``--json``, and brings the JSON document and any report
files back.
"""

from __future__ import annotations

import copy
import io
import json
import os
import re
import shlex
import shutil
import subprocess
import tarfile
import tempfile
import threading
import uuid
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any, Callable, Sequence

from edgekit.bundle import MANIFEST, Bundle, now_iso
from edgekit.errors import BundleError, EdgekitError, TargetUnavailable, UsageError
from edgekit.targets import Target, load_target

DEPLOY_SCHEMA = "edgekit.deploy/1"
PACK_SCHEMA = "edgekit.pack/1"
COMMANDS: tuple[str, ...] = ("profile", "run", "check")
TRANSFERS: tuple[str, ...] = ("auto", "rsync", "scp")
# Where `edgekit deploy` looks for edgekit on the device when not told: PATH, then the venvs
# the targets' install lines create.
REMOTE_EDGEKIT = ("edgekit", "~/.venvs/edgekit/bin/edgekit", "~/.local/bin/edgekit")
REPORTS_DIR = "reports"
# ssh's exit status for its own failures (connection, host key, authentication).
SSH_FAILED = 255
_HOST_RE = re.compile(r"^(?:[A-Za-z0-9._-]+@)?(?:[A-Za-z0-9._-]+|\[[0-9A-Fa-f:.]+\])$")


class RemoteCommandFailed(EdgekitError):
    """edgekit on the device exited with an error; the exit code is the device's."""

    def __init__(self, message: str, exit_code: int, hint: str | None = None):
        super().__init__(message, hint)
        self.exit_code = exit_code if exit_code in (1, 2, 3, 4) else 1


# ---------------------------------------------------------------------------------------------
# Packing


def bundle_contents(bundle: Bundle, target: Target | None, *, engines: bool = True) -> tuple[list[str], dict[str, Any], list[str]]:
    """``(files, manifest, left_out)``: the bundle-relative files ``target`` needs, the manifest
    that names exactly those, and what was left out. ``target`` None: every artifact and engine
    (and nothing the manifest does not name). ``engines`` False: no engines at all."""
    manifest = copy.deepcopy(bundle.manifest)
    keep_models = None if target is None else {"fp32", *target.precisions}
    left_out: list[str] = []
    files: list[str] = []
    for name in list(manifest["artifacts"]):
        if keep_models is not None and name not in keep_models:
            left_out.append(f"artifact {name} ({manifest['artifacts'][name]['path']})")
            del manifest["artifacts"][name]
            continue
        files.append(manifest["artifacts"][name]["path"])
    for key in list(manifest.get("engines") or {}):
        entry = manifest["engines"][key]
        if not engines or (target is not None and entry.get("target", key.split("/")[0]) != target.name):
            left_out.append(f"engine {key} ({entry.get('path')})")
            del manifest["engines"][key]
            continue
        files.append(entry["path"])
        files += [entry[role]["path"] for role in ("metadata", "required_operators") if isinstance(entry.get(role), dict)]
    root = bundle.root.resolve()
    for rel in files:
        path = (bundle.root / rel).resolve()
        if root not in path.parents or not path.is_file():
            raise BundleError(f"bundle {bundle.root}: {rel} is missing or outside the bundle", hint="re-run the stage that makes it")
    manifest["packed"] = {"target": target.name if target else None, "from": str(bundle.root), "created": now_iso(), "left_out": left_out}
    return files, manifest, left_out


def pack_bundle(path: str | Path, out: str | Path, target: str | Path | Target | None = None) -> dict[str, Any]:
    """Write ``out`` (.tar.gz): one top-level folder named like the bundle, holding its manifest
    and what ``target`` needs (everything the manifest names when None). Returns the
    ``edgekit pack --json`` document."""
    bundle = Bundle.load(path)
    tgt = load_target(target) if target is not None else None
    files, manifest, left_out = bundle_contents(bundle, tgt)
    out = Path(out)
    if out.resolve().is_relative_to(bundle.root.resolve()):
        raise UsageError(f"-o {out} is inside the bundle {bundle.root}", hint="write the tarball somewhere else")
    out.parent.mkdir(parents=True, exist_ok=True)
    top = bundle.root.resolve().name
    tmp = out.with_name(f".{out.name}.{uuid.uuid4().hex[:8]}.tmp")
    total = 0
    try:
        with tarfile.open(tmp, "w:gz") as tar:
            data = (json.dumps(manifest, indent=2) + "\n").encode()
            info = tarfile.TarInfo(f"{top}/{MANIFEST}")
            info.size, info.mode, info.mtime = len(data), 0o644, int(bundle.root.joinpath(MANIFEST).stat().st_mtime)
            tar.addfile(info, io.BytesIO(data))
            for rel in files:
                src = bundle.root / rel
                total += src.stat().st_size
                tar.add(src, arcname=f"{top}/{rel}", recursive=False, filter=_anonymous)
        os.replace(tmp, out)
    finally:
        tmp.unlink(missing_ok=True)
    return {"schema": PACK_SCHEMA, "bundle": str(bundle.root), "target": tgt.name if tgt else None, "out": str(out),
            "files": [MANIFEST, *files], "bytes": out.stat().st_size, "content_bytes": total, "left_out": left_out}


def _anonymous(info: tarfile.TarInfo) -> tarfile.TarInfo:
    info.uid = info.gid = 0
    info.uname = info.gname = ""
    return info


def safe_extract(archive: str | Path | tarfile.TarFile, dest: str | Path) -> list[Path]:
    """Unpack ``archive`` into ``dest`` after checking every member: no absolute paths, no
    ``..``, no link pointing outside ``dest``, no devices or FIFOs. One bad member refuses the
    whole archive before anything is written. Returns the extracted paths."""
    if not isinstance(archive, tarfile.TarFile):
        try:
            with tarfile.open(archive, "r:*") as tar:
                return safe_extract(tar, dest)
        except tarfile.TarError as exc:
            first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__  # tarfile lists every codec tried
            raise BundleError(f"{archive} is not a readable tar archive ({first.rstrip(' (:')})", hint="make one with `edgekit pack`") from None
    dest = Path(dest).resolve()
    members = archive.getmembers()
    for member in members:
        problem = _member_problem(member, dest)
        if problem:
            raise BundleError(
                f"archive member {member.name!r} {problem}; refusing to unpack the archive into {dest}",
                hint="only unpack archives made by `edgekit pack` from a source you trust",
            )
    dest.mkdir(parents=True, exist_ok=True)
    if hasattr(tarfile, "data_filter"):  # Python >= 3.11.4 / 3.12: the stdlib re-checks too
        archive.extractall(dest, members=members, filter="data")
    else:
        archive.extractall(dest, members=members)
    return [dest / m.name for m in members]


def _member_problem(member: tarfile.TarInfo, dest: Path) -> str | None:
    name = member.name
    if name.startswith(("/", "\\")) or re.match(r"^[A-Za-z]:", name):
        return "has an absolute path"
    if ".." in PurePosixPath(name.replace("\\", "/")).parts:
        return "contains '..'"
    where = (dest / name).resolve()
    if where != dest and dest not in where.parents:
        return "would be written outside the destination"
    if member.issym() or member.islnk():
        link = member.linkname
        if link.startswith(("/", "\\")):
            return f"is a link to the absolute path {link!r}"
        base = dest if member.islnk() else (dest / name).parent
        resolved = (base / link).resolve()
        if resolved != dest and dest not in resolved.parents:
            return f"is a link to {link!r}, outside the destination"
        return None
    if member.isdev() or member.isfifo():
        return "is a device or FIFO"
    if not (member.isfile() or member.isdir()):
        return "is not a regular file or directory"
    return None


def stage_bundle(bundle: Bundle, dest: Path, target: Target, *, engines: bool = True) -> dict[str, Any]:
    """Copy what ``target`` needs into ``dest`` (a new directory) as a loadable bundle (hard
    links where possible); its file list and what was left out."""
    files, manifest, left_out = bundle_contents(bundle, target, engines=engines)
    dest.mkdir(parents=True)
    total = 0
    for rel in files:
        out = dest / rel
        out.parent.mkdir(parents=True, exist_ok=True)
        try:
            os.link(bundle.root / rel, out)
        except OSError:
            shutil.copy2(bundle.root / rel, out)
        total += out.stat().st_size
    (dest / MANIFEST).write_text(json.dumps(manifest, indent=2) + "\n")
    return {"files": [MANIFEST, *files], "bytes": total, "left_out": left_out}


# ---------------------------------------------------------------------------------------------
# SSH


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
    if not host or host.startswith("-") or not _HOST_RE.match(host):
        raise UsageError(f"--host {host!r} is not [user@]hostname", hint="e.g. --host pi@raspberrypi.local or --host root@192.0.2.10")
    return host


def _ssh_failure(host: str, opts: SshOptions, stderr: str, doing: str) -> EdgekitError:
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


def _run(argv: Sequence[str], *, timeout: float | None = None, on_stderr: Callable[[str], None] | None = None) -> tuple[int, str, str]:
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


# The device-side check, in POSIX sh: find edgekit, see what its commands accept, prepare the
# folders. Arguments: remote dir, bundle name, command, then the edgekit candidates.
_PREFLIGHT = r"""
expand() { case "$1" in "~") printf '%s\n' "$HOME";; "~/"*) printf '%s\n' "$HOME/${1#??}";; *) printf '%s\n' "$1";; esac; }
dir=$(expand "$1"); name=$2; cmd=$3; shift 3
found=""
for c in "$@"; do c=$(expand "$c"); if command -v "$c" >/dev/null 2>&1; then found=$(command -v "$c"); break; fi; done
[ -n "$found" ] || { echo "EDGEKIT_MISSING"; exit 0; }
mkdir -p "$dir/reports" && dir=$(cd "$dir" && pwd) || exit 1
if [ -e "$dir/$name" ] && [ ! -f "$dir/$name/edgekit.json" ]; then echo "NOT_A_BUNDLE=$dir/$name"; exit 0; fi
echo "EDGEKIT=$found"
echo "DIR=$dir"
echo "RSYNC=$(command -v rsync || true)"
"$found" build --help >/dev/null 2>&1 && echo "HAS_BUILD=1"
echo "---HELP---"
"$found" "$cmd" --help 2>&1 || true
"""


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
    from edgekit.build import build_bundle, builds_on_device

    if command not in COMMANDS:
        raise UsageError(f"--command {command!r} is unknown; valid: {', '.join(COMMANDS)}")
    if transfer not in TRANSFERS:
        raise UsageError(f"transfer {transfer!r} is unknown; valid: {', '.join(TRANSFERS)}")
    check_host(host)
    b = Bundle.load(bundle)
    tgt = load_target(target)
    precision = precision or tgt.precisions[0]
    if precision not in tgt.precisions:
        raise UsageError(f"--precision {precision!r} is not one target {tgt.name} runs; valid: {', '.join(tgt.precisions)}")
    for tool in ("ssh", "scp"):
        if shutil.which(tool) is None:
            raise TargetUnavailable(f"`{tool}` is not on PATH", hint="install OpenSSH's client (apt-get install openssh-client)")
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
        remote_build = _remote_json(host, ssh, [device.edgekit, "build", remote_bundle, "--target", tgt.name, "--precision", precision, "--json"],
                                    "building the engine on the device", on_stderr, timeout_s)[1]
    elif on_device:
        warnings.append(f"the device's edgekit has no `build` command: {command} runs on the bundle's ONNX (upgrade edgekit there)")

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
    code, report = _remote_json(host, ssh, argv, f"running edgekit {command}", on_stderr, timeout_s, cwd=reports, allow_codes=(0, 4))

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
        "remote": {"edgekit": device.edgekit, "bundle": remote_bundle, "workdir": reports, "argv": argv, "transfer": used},
        "copied": staged,
        "build": {"where": "device" if on_device else "here", "local": local_build, "device": remote_build},
        "report": report,
        "fetched": fetched,
        "warnings": warnings,
    }


def _preflight(host: str, ssh: SshOptions, target: Target, remote_dir: str, name: str, command: str, remote_edgekit: str | None) -> _Device:
    candidates = [remote_edgekit] if remote_edgekit else list(REMOTE_EDGEKIT)
    script = shlex.join(["sh", "-c", _PREFLIGHT, "edgekit-preflight", remote_dir, name, command, *candidates])
    code, out, err = _run([*ssh.ssh_command(), "--", host, script], timeout=120)
    if code == SSH_FAILED:
        raise _ssh_failure(host, ssh, err, "checking the device")
    if code != 0:
        raise EdgekitError(f"preparing {remote_dir} on {host} failed (exit {code}): {err.strip().splitlines()[-1] if err.strip() else out.strip()[-200:]}")
    head, _, help_text = out.partition("---HELP---\n")
    facts = dict(line.split("=", 1) for line in head.splitlines() if "=" in line)
    if "EDGEKIT_MISSING" in head:
        looked = ", ".join(candidates)
        raise TargetUnavailable(
            f"edgekit is not installed on {host} (looked for {looked})",
            hint=f"install it there with: {target.install}" + ("" if remote_edgekit else " (or pass --remote-edgekit PATH)"),
        )
    if "NOT_A_BUNDLE" in facts:
        raise UsageError(
            f"{facts['NOT_A_BUNDLE']} on {host} exists and is not an edgekit bundle; deploy will not replace it",
            hint="pass another --remote-dir, or move that folder away",
        )
    return _Device(facts["EDGEKIT"], facts["DIR"], bool(facts.get("RSYNC")), facts.get("HAS_BUILD") == "1", help_text)


def _copy_bundle(host: str, ssh: SshOptions, device: _Device, staged: Path, name: str, transfer: str) -> str:
    """Replace ``<dir>/<name>`` on the device with ``staged``; the tool used (rsync or scp)."""
    target_dir = f"{device.dir}/{name}"
    use_rsync = transfer == "rsync" or (transfer == "auto" and device.rsync and shutil.which("rsync") is not None)
    if transfer == "rsync" and (not device.rsync or shutil.which("rsync") is None):
        raise TargetUnavailable("rsync is missing " + ("on the device" if not device.rsync else "here"), hint="install rsync, or pass --transfer scp")
    if use_rsync:
        argv = ["rsync", "-a", "--delete", "-e", shlex.join(ssh.ssh_command()), f"{staged}/", f"{host}:{target_dir}/"]
        code, _, err = _run(argv)
        if code != 0:
            # rsync exits 255 or 12 (protocol stream ended) when its ssh transport fails.
            if code in (SSH_FAILED, 12):
                raise _ssh_failure(host, ssh, err, "copying the bundle with rsync")
            raise EdgekitError(f"rsync to {host}:{target_dir} failed (exit {code}): {err.strip()[-300:]}")
        return "rsync"
    upload = f"{device.dir}/.edgekit-upload-{uuid.uuid4().hex[:8]}"
    code, _, err = _run([*ssh.scp_command(), str(staged), f"{host}:{upload}"])
    if code != 0:
        raise _ssh_failure(host, ssh, err, "copying the bundle with scp")
    swap = shlex.join(["sh", "-c", 'rm -rf "$1" && mv "$2" "$1"', "edgekit-swap", target_dir, upload])
    code, _, err = _run([*ssh.ssh_command(), "--", host, swap], timeout=120)
    if code != 0:
        raise _ssh_failure(host, ssh, err, "moving the copied bundle into place")
    return "scp"


def _remote_json(
    host: str, ssh: SshOptions, argv: Sequence[str], doing: str, on_stderr: Callable[[str], None] | None,
    timeout: float | None, *, cwd: str | None = None, allow_codes: Sequence[int] = (0,),
) -> tuple[int, dict[str, Any]]:
    """Run edgekit ``argv`` on the device (in ``cwd``, made fresh) and parse its one JSON document."""
    line = shlex.join(list(argv))
    if cwd is not None:
        line = f"rm -rf {shlex.quote(cwd)} && mkdir -p {shlex.quote(cwd)} && cd {shlex.quote(cwd)} && {line}"
    code, out, err = _run([*ssh.ssh_command(), "--", host, line], timeout=timeout, on_stderr=on_stderr)
    if code == SSH_FAILED:
        raise _ssh_failure(host, ssh, err, doing)
    # The last line with words (typer frames usage errors in box-drawing lines).
    last = next((ln.strip(" │|") for ln in reversed(err.splitlines()) if re.search(r"\w", ln)), "")
    if code not in allow_codes:
        raise RemoteCommandFailed(
            f"{doing} on {host} failed (exit {code}): {last or out.strip()[-300:] or 'no output'}", code,
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
        argv = ["rsync", "-a", "-e", shlex.join(ssh.ssh_command()), f"{host}:{remote}/", f"{local}/"]
    else:
        argv = [*ssh.scp_command(), f"{host}:{remote}", str(local)]
    code, _, err = _run(argv)
    if code != 0:
        raise _ssh_failure(host, ssh, err, "fetching the reports")
    return sorted(str(p) for p in local.rglob("*") if p.is_file())


__all__ = [
    "COMMANDS",
    "DEPLOY_SCHEMA",
    "PACK_SCHEMA",
    "RemoteCommandFailed",
    "SshOptions",
    "bundle_contents",
    "check_host",
    "deploy",
    "pack_bundle",
    "safe_extract",
    "stage_bundle",
]
