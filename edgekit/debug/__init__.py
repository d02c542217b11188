"""``edgekit debug``: where a variant's error enters a decode (the first step and the first op,
teacher-forced on the reference's trajectory, every tensor captured), why (weights, activation
range, accumulation), whether it compounds, and with ``--fix`` the smallest change that makes
``check`` pass, written into the bundle as a ``quantize --overrides`` file.

    from edgekit.debug import DebugConfig, debug_bundle
    doc = debug_bundle("bundles/masked", DebugConfig(candidate="ort:int8", fix=True))
"""

from edgekit.debug.config import DEFAULT_THRESHOLD_DB, SCHEMA, DebugConfig
from edgekit.debug.stage import debug_bundle

__all__ = ["DEFAULT_THRESHOLD_DB", "SCHEMA", "DebugConfig", "debug_bundle"]
