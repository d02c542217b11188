"""`edgekit deploy`: copy a bundle to a device over SSH, run a command there, bring the report back."""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Annotated, Literal

import typer

import edgekit.cli.options as opt
from edgekit.cli.app import command
from edgekit.outpaths import check_dir
from edgekit.output import Output


@command(
    epilog="Examples:\n\n  edgekit deploy bundles/masked --host pi@raspberrypi.local --target rpi5\n\n"
    "  edgekit deploy bundles/masked --host nvidia@orin.local --target jetson-orin-nano --command check --json\n\n"
    "  edgekit deploy bundles/masked --host me@192.0.2.10 --port 2222 "
    "--identity ~/.ssh/id_ed25519 --command run -- --steps 4"
)
def deploy(
    bundle: opt.Bundle,
    host: Annotated[
        str,
        typer.Option("--host", help="user@host of the device (ssh checks its host key as always).", show_default=False),
    ],
    target: opt.Target = "cpu",
    command_name: Annotated[
        Literal["profile", "run", "check"],
        typer.Option("--command", help="The command run on the device (with --json)."),
    ] = "profile",
    port: Annotated[int | None, typer.Option("--port", help="ssh port (default: ssh's).")] = None,
    identity: Annotated[Path | None, typer.Option("--identity", "-i", help="Private key file for ssh.")] = None,
    known_hosts: Annotated[
        Path | None,
        typer.Option("--known-hosts", help="known_hosts file to verify the device against (default: ssh's)."),
    ] = None,
    precision: Annotated[
        str | None, opt.precision_option("Precision to build/run there (default: the target's first)")
    ] = None,
    remote_dir: Annotated[
        str, typer.Option("--remote-dir", help="Folder on the device for bundles and reports.")
    ] = "~/edgekit-deploy",
    remote_edgekit: Annotated[
        str | None,
        typer.Option("--remote-edgekit", help="edgekit on the device (default: PATH, ~/.venvs/edgekit/bin)."),
    ] = None,
    transfer: Annotated[
        Literal["auto", "rsync", "scp"],
        typer.Option("--transfer", help="auto: rsync when both ends have it, else scp."),
    ] = "auto",
    out: Annotated[Path, opt.out_option("Where the device's JSON and report files come back to.")] = Path(
        "edgekit-reports"
    ),
    rebuild: Annotated[
        bool, typer.Option("--rebuild", help="Rebuild a stale engine made here for the target.")
    ] = False,
    args: Annotated[
        list[str] | None,
        typer.Argument(help="Extra options for the device's command (after --).", show_default=False),
    ] = None,
    json_out: opt.Json = False,
) -> None:
    """Copy a bundle to a device over SSH, run `edgekit profile|run|check` there and bring the report back."""
    from edgekit.deploy import SshOptions
    from edgekit.deploy import deploy as run_deploy
    from edgekit.deploy.render import print_deploy

    o = Output(json_out)
    ssh = SshOptions(port=port, identity=identity, known_hosts=known_hosts)
    device = "".join(c if c.isalnum() or c in ".-" else "_" for c in host.split("@")[-1])
    if len(device) > 64:  # a folder name stays far below the file system's 255 bytes
        device = f"{device[:48]}-{hashlib.sha256(host.encode()).hexdigest()[:12]}"
    reports = check_dir(
        out / f"{Path(bundle).resolve().name[:64]}-{device}-{command_name}", "-o"
    )  # before the copy, not after
    doc = run_deploy(
        bundle,
        host,
        target,
        command_name,
        ssh=ssh,
        precision=precision,
        args=args or [],
        remote_dir=remote_dir,
        remote_edgekit=remote_edgekit,
        out_dir=reports,
        transfer=transfer,
        rebuild=rebuild,
        on_stderr=lambda line: o.info(f"[{host}] {line}"),
    )
    o.document(doc)
    print_deploy(o, doc, host, command_name)
    if doc["exit_code"]:
        raise typer.Exit(doc["exit_code"])
