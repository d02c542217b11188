"""What doctor's check of one runtime reads and adds to (``Checkup``): the target, this host and
what ``stage.environment`` found on it, and the target's list of what is missing, each row with
the line that installs it (``lacks``). ``stage.target_report`` makes one per target."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from edgekit.host import HostFacts
from edgekit.targets import Target


@dataclass
class Checkup:
    target: Target
    host: HostFacts
    env: dict[str, Any]  # ``environment(host)``: versions, providers, devices, import errors
    missing: list[dict[str, Any]] = field(default_factory=list)  # the target report's ``missing``

    def lacks(self, what: str, why: str | None, install: str | None) -> None:
        """One row of ``missing``: what is missing, why it counts as missing, and what installs it."""
        self.missing.append({"what": what, "why": why, "install": install})
