"""`edgekit pack` and `edgekit unpack`: a bundle as one checked tarball."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

import edgekit.cli.options as opt
from edgekit.cli.app import command
from edgekit.outpaths import check_dir, check_file
from edgekit.output import Output


@command(
    epilog=(
        "Examples:\n\n  edgekit pack bundles/masked -o masked.tar.gz\n\n"
        "  edgekit pack bundles/masked -o masked-rpi5.tar.gz --target rpi5"
    )
)
def pack(
    bundle: opt.Bundle,
    out: Annotated[Path, opt.out_option("Tarball to write (.tar.gz).", show_default=False)],
    target: Annotated[
        str | None, opt.target_option("Only what this target needs (default: every artifact and engine).")
    ] = None,
    json_out: opt.Json = False,
) -> None:
    """Pack a bundle into a tarball to copy to a device (unpack there with `edgekit unpack`)."""
    from edgekit.deploy import pack_bundle
    from edgekit.deploy.render import print_pack

    o = Output(json_out)
    check_file(out, "-o")
    doc = pack_bundle(bundle, out, target)
    o.document(doc)
    print_pack(o, doc)


@command(epilog="Example:\n\n  edgekit unpack masked.tar.gz -o bundles/")
def unpack(
    archive: Annotated[Path, typer.Argument(help="Tarball made by `edgekit pack`.", show_default=False)],
    out: Annotated[Path, opt.out_option("Folder to unpack into.")] = Path("."),
    json_out: opt.Json = False,
) -> None:
    """Unpack a bundle tarball into OUT/<bundle>: checked member by member (no links, no paths
    outside), every hash verified in a staging folder, then swapped in whole."""
    from edgekit.deploy import unpack_bundle
    from edgekit.deploy.render import print_unpack

    o = Output(json_out)
    check_dir(out, "-o")
    doc = unpack_bundle(archive, out)
    o.document(doc)
    print_unpack(o, doc)
