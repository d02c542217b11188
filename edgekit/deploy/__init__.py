"""Ship a bundle to a device and run edgekit there: `edgekit pack` (``pack``), `edgekit unpack`
(``unpack``) and `edgekit deploy` (``stage``, over the system's ssh/scp/rsync in ``ssh``);
``render``: the console tables."""

from edgekit.deploy.pack import PACK_SCHEMA, bundle_contents, pack_bundle, stage_bundle
from edgekit.deploy.ssh import RemoteCommandFailed, SshOptions, check_host
from edgekit.deploy.stage import DEPLOY_SCHEMA, deploy
from edgekit.deploy.unpack import safe_extract, unpack_bundle

__all__ = [
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
    "unpack_bundle",
]
