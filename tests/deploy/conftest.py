"""A real OpenSSH server on 127.0.0.1 (Debian's openssh-server) with throwaway keys, and the
masked demo bundle to deploy to it. Tests that need the server skip, with the reason, where it
cannot start."""

from __future__ import annotations

import getpass
import os
import shutil
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

SSHD_CANDIDATES = ("/usr/sbin/sshd", "/usr/local/sbin/sshd")
# Debian's init script creates sshd's privilege-separation directory; without systemd nobody does.
PRIVSEP_DIR = Path("/run/sshd")
# The tests run edgekit on the "device" with the same interpreter as here.
EDGEKIT = str(Path(sys.executable).with_name("edgekit"))


@dataclass(frozen=True)
class SshServer:
    host: str  # user@127.0.0.1
    port: int
    identity: Path  # the user's private key
    known_hosts: Path  # holds the server's throwaway host key
    config: Path  # an empty ssh_config, so the tests ignore ~/.ssh/config
    root: Path
    edgekit: str = EDGEKIT  # edgekit's path on the "device" (this machine's venv)


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _keygen(path: Path) -> None:
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "edgekit-test", "-f", str(path)], check=True)


@pytest.fixture(scope="session")
def sshd(tmp_path_factory) -> SshServer:
    sshd_bin = next((p for p in SSHD_CANDIDATES if os.access(p, os.X_OK)), None)
    if sshd_bin is None:
        pytest.skip("sshd not found: install Debian's openssh-server (apt-get install -y openssh-server)")
    if shutil.which("ssh") is None or shutil.which("ssh-keygen") is None:
        pytest.skip("the OpenSSH client (ssh, ssh-keygen) is not installed")
    if not os.access(EDGEKIT, os.X_OK):
        pytest.skip(f"no edgekit console script next to {sys.executable} (pip install -e .)")
    if os.geteuid() == 0 and not PRIVSEP_DIR.is_dir():
        PRIVSEP_DIR.mkdir(mode=0o755, parents=True)
    root = tmp_path_factory.mktemp("sshd")
    _keygen(root / "host_key")
    _keygen(root / "user_key")
    (root / "authorized_keys").write_text((root / "user_key.pub").read_text())
    port = _free_port()
    config = root / "sshd_config"
    config.write_text(
        f"Port {port}\nListenAddress 127.0.0.1\nHostKey {root / 'host_key'}\n"
        f"AuthorizedKeysFile {root / 'authorized_keys'}\nPidFile {root / 'sshd.pid'}\n"
        "PubkeyAuthentication yes\nPasswordAuthentication no\nKbdInteractiveAuthentication no\n"
        "PermitRootLogin prohibit-password\nUsePAM no\n"
        # The keys live under /tmp (mode 1777), which StrictModes rejects for authorized_keys.
        "StrictModes no\nSubsystem sftp internal-sftp\nLogLevel ERROR\n"
    )
    known_hosts = root / "known_hosts"
    known_hosts.write_text(f"[127.0.0.1]:{port} {(root / 'host_key.pub').read_text()}")
    (root / "ssh_config").write_text("")
    log = open(root / "sshd.log", "w")
    proc = subprocess.Popen([sshd_bin, "-D", "-e", "-f", str(config)], stdout=log, stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 10
    while True:
        if proc.poll() is not None:
            log.close()
            pytest.skip(f"sshd could not start: {(root / 'sshd.log').read_text().strip()[-300:]}")
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
            break
        except OSError:
            if time.monotonic() > deadline:
                proc.kill()
                pytest.skip("sshd did not accept connections within 10 s")
            time.sleep(0.1)
    yield SshServer(f"{getpass.getuser()}@127.0.0.1", port, root / "user_key", known_hosts, root / "ssh_config", root)
    proc.terminate()
    try:
        proc.wait(timeout=5)
    except subprocess.TimeoutExpired:
        proc.kill()
    log.close()
